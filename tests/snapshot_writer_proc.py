"""Helper process for tests/test_snapshot_crash.py: writes snapshots into a store until killed.

    python tests/snapshot_writer_proc.py <store dir> <first end offset> <partitions> <retain count>

Prints "ready" once set up, then for each snapshot "begin <end offset>" before the write and
"ok <end offset>" after its commit returned (flushed at once), so the killing test knows which
snapshots were committed and which write was in flight. Snapshot ``e`` holds a 20-partition-per-
broker workload plus a ConfigRecord (topic "kill-test", "end" = e): the test checks that every
visible snapshot holds exactly its own content.
"""

from __future__ import annotations

import sys

from kraftlog.engine.image import workload as wl
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.snapshot import SnapshotStore, SnapshotStoreConfig


def marker(end_offset: int) -> bytes:
    return codec.encode_record("ConfigRecord", 0, {"ResourceType": 2, "ResourceName": "kill-test", "Name": "end",
                                                   "Value": str(end_offset)})


def main() -> None:
    path, first, partitions, retain_count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    values = list(wl.generate(wl.WorkloadShape.scaled(partitions, replicas_per_broker=500)))
    store = SnapshotStore(path, SnapshotStoreConfig(retain_count=retain_count, chunk_target_bytes=64 * 1024,
                                                    map_size_bytes=1 << 20))
    print("ready", flush=True)
    end = first
    while True:  # until SIGKILL: bounded by the test's kill timer
        print(f"begin {end}", flush=True)
        store.write_values((end, 1), values + [marker(end)])
        print(f"ok {end}", flush=True)
        end += 1


if __name__ == "__main__":
    main()
