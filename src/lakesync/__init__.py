"""LakeSync: declarative data sync on AWS."""

__version__ = "0.1.0"
