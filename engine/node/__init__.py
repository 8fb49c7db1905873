"""A node process: roles composed, Raft wiring (engine log as raft's log, the driver), transport,
TLS, metrics, the directory layout's meta.properties."""
