"""The names of a node's data directory, Kafka's layout, defined once (the node writes it, the
tools and the Spark inputs read it)::

    DIR/meta.properties                   META_PROPERTIES (kraftlog storage format writes it)
    DIR/__cluster_metadata-0/             METADATA_LOG_DIRNAME: segments, indexes,
                                          leader-epoch-checkpoint, quorum-state
    DIR/__cluster_metadata-0/snapshots/   SNAPSHOT_DIRNAME: the LMDB snapshot store (LMDB's own
                                          files: LMDB_DATA_NAME, LMDB_LOCK_NAME)

A log directory also holds LOG_START_CHECKPOINT_NAME and LEADER_EPOCH_CHECKPOINT_NAME (Kafka's
names), and a Kafka snapshot file is named as SNAPSHOT_FILE_NAME matches. Segment and index file
names are the log's (engine/log/segment.py); quorum-state is raft's (raft/aio/quorum_file.py),
which must not import engine.
"""

import re

META_PROPERTIES = "meta.properties"
METADATA_LOG_DIRNAME = "__cluster_metadata-0"
SNAPSHOT_DIRNAME = "snapshots"
LMDB_DATA_NAME, LMDB_LOCK_NAME = "data.mdb", "lock.mdb"
LOG_START_CHECKPOINT_NAME = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT_NAME = "leader-epoch-checkpoint"
# Kafka's snapshot file: <20-digit end offset>-<10-digit epoch>.checkpoint
SNAPSHOT_FILE_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
