"""The demo's data directory.

Layout (everything the demo writes; the tools read it afterwards)::

    DIR/.kraftlog-demo        marker: this directory was written by `kraftlog demo`
    DIR/node-<id>/            one raft node each: log/ (segments), snapshots/, quorum-state,
                              node.stderr (the node's own log lines)
    DIR/snapshot-store/       the LMDB snapshot store (data.mdb, lock.mdb)
    DIR/checkpoints/          the snapshot exported as Kafka's <end offset>-<epoch>.checkpoint

A directory is used when it is missing or empty, or when it holds only what an earlier demo left
(its marker and its own entries: `make demo` can run again). Anything else is refused unless
--force or --clean, and even then only the demo's own entries are replaced; other files stay.
"""

from __future__ import annotations

import os
import shutil

from kraftlog.engine.cli.demo_parts.errors import DataDirError

MARKER = ".kraftlog-demo"
SNAPSHOT_STORE = "snapshot-store"
CHECKPOINTS = "checkpoints"
SHOWN_ENTRIES_MAX = 5  # entries named in the refusal message


def node_dir_name(node_id: int) -> str:
    return f"node-{node_id}"


def own_entries(node_ids) -> set[str]:
    return {MARKER, SNAPSHOT_STORE, CHECKPOINTS, *(node_dir_name(i) for i in node_ids)}


def prepare(path: str, node_ids, *, force: bool) -> str | None:
    """Make ``path`` ready for a new tour; returns a note on what was replaced (None if nothing)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise DataDirError(f"--dir {path} exists and is not a directory")
    os.makedirs(path, exist_ok=True)
    entries = set(os.listdir(path))
    ours = own_entries(node_ids)
    foreign = sorted(entries - ours)
    earlier_demo = MARKER in entries and not foreign
    if entries and not earlier_demo and not force:
        shown = ", ".join(foreign[:SHOWN_ENTRIES_MAX] + (["..."] if len(foreign) > SHOWN_ENTRIES_MAX else []))
        raise DataDirError(f"--dir {path} is not empty and was not written by the demo ({len(entries)} entries: "
                           f"{shown}); give an empty or new --dir, or pass --force to use it anyway (the demo "
                           f"replaces only its own entries: {', '.join(sorted(ours - {MARKER}))})")
    replaced = sorted(entries & ours - {MARKER})
    _remove(path, replaced)
    with open(os.path.join(path, MARKER), "w") as f:
        f.write("written by `kraftlog demo`; the demo may replace this directory's demo entries\n")
    if not replaced:
        return None
    return f"replaced the earlier demo's {', '.join(replaced)} in {path}"


def clean(path: str, node_ids) -> None:
    """Remove what the demo wrote (--clean), and the directory itself when nothing else is left."""
    _remove(path, sorted(own_entries(node_ids) & set(os.listdir(path))))
    if not os.listdir(path):
        os.rmdir(path)


def _remove(path: str, names) -> None:
    for name in names:
        target = os.path.join(path, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        else:
            os.unlink(target)
