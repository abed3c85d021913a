"""The buffer on DynamoDB: the log, the row index, the shard heads and the dedup records (docs/buffer.md).

* :mod:`~lakesync.aws.buffer.items`: every item's attributes by name, and their codecs;
* :mod:`~lakesync.aws.buffer.log_chunks`: a log item's keys and its compressed entries;
* :mod:`~lakesync.aws.buffer.row_doubts`: where the rows of an in-doubt run live;
* :mod:`~lakesync.aws.buffer.log_reader`: reads of the log, by position and by commit HLC;
* :mod:`~lakesync.aws.buffer.rows`: the row index, read newest-of-keys and written where each row lives;
* :mod:`~lakesync.aws.buffer.doubt_records`: the records of the in-doubt runs' rows;
* :mod:`~lakesync.aws.buffer.commit`: the commit by a conditional put, turns, roll forward and in-doubt runs;
* :mod:`~lakesync.aws.buffer.store`: :class:`DynamoDBBufferStore`, the port the gateway calls.
"""
