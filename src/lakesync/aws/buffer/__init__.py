"""The buffer on DynamoDB: the log, the row index, the shard heads and the dedup records (docs/buffer.md).

* :mod:`~lakesync.aws.buffer.items`: every item's attributes by name, and their codecs;
* :mod:`~lakesync.aws.buffer.log_chunks`: a log item's keys and its compressed entries;
* :mod:`~lakesync.aws.buffer.row_doubts`: where the rows of an in-doubt run live.
"""
