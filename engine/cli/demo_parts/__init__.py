"""The pieces of `kraftlog demo` (engine/cli/demo.py runs them in order).

    errors.py     DemoError and its kinds (one stderr line each, through cli.py)
    datadir.py    the demo's data directory: what it owns, refusing someone else's, --clean
    node_main.py  the node process: raftnode's entry point, killed with the demo (PR_SET_PDEATHSIG)
    cluster.py    NodeCluster: three raft node processes on loopback, start/kill/restart/stop,
                  and InterruptGuard (SIGINT/SIGTERM stop every node at once, then the tour)
    quorum.py     DescribeQuorum as kafka-metadata-quorum prints it; waiting for a leader, for
                  replicas to reach the high watermark; on-disk replica digests
    narrator.py   narration on stdout, progress bars on stderr, the final table
    steps.py      the tour's steps: quorum, workload, failover + catch-up, replay, snapshot

The tour grows here: controllers and brokers (the live-cluster demo) become further steps.
"""
