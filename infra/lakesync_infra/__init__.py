"""The LakeSync CDK app: one stack per environment, one construct per capability (see ``stack.py``)."""
