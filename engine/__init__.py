"""kraftlog.engine: storage, snapshots, the metadata image, and the server that wires them to raft.

Dependency direction (docs/ARCHITECTURE.md): records <- log, snapshot, image <- server <- pipeline.
Nothing in engine imports kraftlog.raft except engine.server.
"""
