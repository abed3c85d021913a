"""Spark side of LakeSync: the session factory and the local Iceberg runtime. The only package importing pyspark."""

from lakesync.spark.runtime import SparkSetupError, iceberg_jars
from lakesync.spark.session import build_session, session_conf

__all__ = ["SparkSetupError", "build_session", "iceberg_jars", "session_conf"]
