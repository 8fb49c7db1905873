"""The quorum-state file: Kafka's QuorumStateData v0 as JSON, replaced atomically.

    {"clusterId": "", "leaderId": 1, "leaderEpoch": 5, "votedId": -1, "appliedOffset": 0,
     "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}], "data_version": 0}

Write: the JSON goes to ``quorum-state.tmp``, which is fsynced, renamed over ``quorum-state``,
and the directory is fsynced, so a crash leaves either the old or the new state, never a mix
(the durability contract of raft/protocols.py QuorumStateStore). ``leaderEpoch`` -1 (Kafka's
default) reads as epoch 0.
"""

from __future__ import annotations

import json
import os

from kraftlog.durable import fsync_directory, write_atomically
from kraftlog.errors import CorruptRecordError
from kraftlog.raft.types import NO_ID, ElectionState

FILE_NAME = "quorum-state"
DATA_VERSION = 0


class QuorumStateFile:
    """QuorumStateStore on a directory."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.path = os.path.join(self.directory, FILE_NAME)
        self.writes = 0

    def read(self) -> ElectionState | None:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(raw)
            version = doc.get("data_version", 0)
            if version != DATA_VERSION:
                raise CorruptRecordError(f"quorum-state data_version {version} is not {DATA_VERSION}", path=self.path)
            voters = doc.get("currentVoters") or []
            return ElectionState(max(int(doc.get("leaderEpoch", -1)), 0), int(doc.get("leaderId", NO_ID)),
                                 int(doc.get("votedId", NO_ID)), frozenset(int(v["voterId"]) for v in voters))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptRecordError(f"quorum-state is not valid QuorumStateData JSON: {exc}", path=self.path) from None

    def write(self, state: ElectionState) -> None:
        doc = {"clusterId": "", "leaderId": state.leader_id, "leaderEpoch": state.epoch, "votedId": state.voted_id,
               "appliedOffset": 0, "currentVoters": [{"voterId": v} for v in sorted(state.voters)],
               "data_version": DATA_VERSION}
        write_atomically(self.path, json.dumps(doc, separators=(",", ":")).encode())
        self.writes += 1

    def clear(self) -> None:
        try:
            os.remove(self.path)
        except FileNotFoundError:
            return
        fsync_directory(self.directory)
