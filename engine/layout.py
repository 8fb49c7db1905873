"""The names of a node's data directory, Kafka's layout, defined once (the node writes it, the
tools and the Spark inputs read it)::

    DIR/meta.properties                   META_PROPERTIES (kraftlog storage format writes it)
    DIR/__cluster_metadata-0/             METADATA_LOG_DIRNAME: segments, indexes,
                                          leader-epoch-checkpoint, quorum-state
    DIR/__cluster_metadata-0/snapshots/   SNAPSHOT_DIRNAME: the LMDB snapshot store

Segment and index file names are the log's (engine/log/segment.py); quorum-state is raft's
(raft/aio/quorum_file.py), which must not import engine.
"""

META_PROPERTIES = "meta.properties"
METADATA_LOG_DIRNAME = "__cluster_metadata-0"
SNAPSHOT_DIRNAME = "snapshots"
