"""kraftlog.engine: everything that is not consensus, one room per role.

    records, log, snapshot, image   storage and the metadata image (import no role below)
    controller, broker              the roles (a controller's write handlers, a broker's lifecycle)
    protocol                        Kafka wire facts the roles and clients share
    node                            a process: roles composed, Raft wiring, transport, TLS, metrics
    client                          what a program uses to talk to a cluster
    cli                             the `kraftlog` command on top of all of it
    pipeline                        PySpark jobs over records, log, image, snapshot

Nothing in engine imports kraftlog.raft except engine.node and the roles it composes
(docs/ARCHITECTURE.md has the dependency rules; import-linter checks them in `make test`).
"""
