"""kraftlog.raft.aio: the only part of raft that does I/O.

The asyncio driver (one event loop per node, real clock) that runs a RaftCore exactly as the
simulator in tests/raft_sim/ does, the TCP transport speaking Kafka's wire protocol
(frames and kio types from kraftlog.raft.wire), and the quorum-state file. These modules live
in a subpackage so that every module directly under raft/ stays I/O free (a structure test
parses their imports).
"""
