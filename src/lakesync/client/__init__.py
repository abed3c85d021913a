"""Python clients of the LakeSync HTTP API."""
