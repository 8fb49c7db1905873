"""kraftlog.raft: the KIP-595 consensus library.

A pure, I/O-free core (driven by poll/step, given a clock, a seeded RNG, a ReplicatedLog and a
channel) and a small asyncio driver. raft may import kraftlog.engine.records (the formats) and
nothing else of engine; storage is reached only through raft's own ReplicatedLog Protocol.

Modules: core (RaftCore, RaftConfig), ready (Ready, execute_ready: persist, send, apply),
state (the transition table), messages (one value per Kafka request/response), protocols (the
seams), types, control (LeaderChange record), metrics. The simulator lives in tests/raft_sim/.
"""
