"""`kraftlog snapshot`: list, dump, export and import the snapshots of a node's LMDB store.

DIR may be a node directory (``DIR/__cluster_metadata-0/snapshots``), its metadata log
directory (``DIR/snapshots``) or the store itself (the directory holding LMDB's ``data.mdb``).

    list     one row per snapshot from its manifest; --verify reads every chunk (CRC), the
             whole stream (CRC, batches, header/footer) and the index tables
    dump     the batches and records of one snapshot, as `kraftlog log dump` prints a
             .checkpoint file (dump.py's Dumper: the same lines, word for word)
    export   Kafka's ``%020d-%010d.checkpoint`` file (checkpoint.export_checkpoint), checked
             against the manifest's stream CRC before it appears under its final name
    import   a .checkpoint into the store (checkpoint.import_checkpoint: validated whole before
             anything is stored)

Import refuses while another process has the store open (a running node: its raft does not
expect snapshots to appear under it, and retention may delete one it is serving); ``--force``
imports anyway, with a warning. The check is LMDB's own lock: every process with the environment
open holds a shared fcntl lock on byte 0 of ``lock.mdb`` (mdb_env_setup_locks), so an exclusive,
non-blocking attempt on that byte fails exactly when someone else has it open.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys

from kraftlog.engine.cli.tools.common import (
    METADATA_LOG_DIRNAME,
    ToolError,
    add_command,
    add_commands,
    add_quiet,
    exists,
    is_segment_name,
    pipe_safe,
    show_progress,
    warn,
)
from kraftlog.engine.layout import LMDB_DATA_NAME, LMDB_LOCK_NAME, META_PROPERTIES, SNAPSHOT_DIRNAME

EXPORT_CHECK_BYTES = 8 << 20  # bytes of the exported file read per step when checking its CRC
_ID_TEXT = re.compile(r"^(\d{1,20})-(\d{1,10})(?:\.checkpoint)?$")

LIST_EXAMPLE = """examples:
  kraftlog snapshot list /tmp/n1
  kraftlog snapshot list /tmp/n1 --verify
  kraftlog snapshot list /tmp/n1/__cluster_metadata-0/snapshots --json | jq .endOffset"""
DUMP_EXAMPLE = """examples:
  kraftlog snapshot dump /tmp/n1 | head
  kraftlog snapshot dump /tmp/n1 --snapshot 120000-1 --json | jq 'select(.kind == "record")'"""
EXPORT_EXAMPLE = """examples:
  kraftlog snapshot export /tmp/n1 --format checkpoint --out /tmp/out/
  kraftlog snapshot export /tmp/n1 --snapshot 120000-1 --out /tmp/out/00000000000000120000-0000000001.checkpoint"""
IMPORT_EXAMPLE = """example: kraftlog snapshot import /tmp/n2 /tmp/out/00000000000000120000-0000000001.checkpoint

Stop the node that uses DIR first (import refuses while a process has the store open; --force
imports anyway). The store keeps its newest snapshots only (retention): an import older than all
of them is refused, and one newer may push the oldest out (the output says which)."""


class NoSnapshotStoreError(ToolError):
    """The directory does not exist, or holds no LMDB snapshot store where one is looked for."""


class StoreInUseError(ToolError):
    """Another process (a running node) has the snapshot store open."""


def register(parser: argparse.ArgumentParser) -> None:
    sub = add_commands(parser, "snapshot_command")
    parser.epilog = "example: kraftlog snapshot list /tmp/n1 --verify"
    lst = add_command(sub, "list", "one row per snapshot: end offset, epoch, records, bytes, created, "
                      "metadata.version, verified", LIST_EXAMPLE, pipe_safe(run_list))
    _dir(lst)
    lst.add_argument("--verify", action="store_true", help="read and check every snapshot whole: each chunk's CRC, "
                     "the stream's CRC, its batches, header and footer, the index tables (exit 1 if one fails)")
    lst.add_argument("--json", action="store_true", help="one JSON object per snapshot instead of a table")
    add_quiet(lst)

    dump = add_command(sub, "dump", "print the batches and records of one snapshot, as `kraftlog log dump` prints "
                       "a .checkpoint file", DUMP_EXAMPLE, pipe_safe(run_dump))
    _dir(dump)
    _snapshot_option(dump, "the snapshot to dump (default: the newest)")
    dump.add_argument("--json", action="store_true", help="one JSON object per line instead of Kafka's text")
    dump.add_argument("--batches-only", action="store_true", help="batch lines only (Kafka's shallow iteration)")

    export = add_command(sub, "export", "write one snapshot as Kafka's <end offset>-<epoch>.checkpoint file",
                         EXPORT_EXAMPLE, pipe_safe(run_export))
    _dir(export)
    export.add_argument("--format", choices=["checkpoint"], default="checkpoint",
                        help="checkpoint: Kafka's snapshot file (the only format)")
    _snapshot_option(export, "the snapshot to export (default: the newest)")
    export.add_argument("--out", required=True, metavar="PATH_OR_DIR",
                        help="a directory (the file gets Kafka's name) or the file's path")
    export.add_argument("--force", action="store_true", help="overwrite an existing file")

    imp = add_command(sub, "import", "store a .checkpoint file (Kafka's or ours) as a snapshot, validated whole "
                      "first", IMPORT_EXAMPLE, pipe_safe(run_import))
    _dir(imp)
    imp.add_argument("file", metavar="FILE", help="a <end offset>-<epoch>.checkpoint file")
    _snapshot_option(imp, "the snapshot id to store it as (default: from the file name)")
    imp.add_argument("--replace", action="store_true", help="replace a stored snapshot with the same id")
    imp.add_argument("--force", action="store_true", help="import even while another process (a running node) "
                     "has the store open")


def _dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", metavar="DIR", help="a node directory, its __cluster_metadata-0, or the LMDB store")


def _snapshot_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--snapshot", type=parse_snapshot_id, default=None, metavar="OFFSET-EPOCH", help=help_text)


def parse_snapshot_id(text: str):
    """'1000-1', also '00000000000000001000-0000000001[.checkpoint]'; a usage error otherwise."""
    from kraftlog.engine.snapshot.layout import as_id

    m = _ID_TEXT.match(text)
    try:
        if m is None:
            raise ValueError
        return as_id((int(m.group(1)), int(m.group(2))))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid snapshot id {text!r}: expected END_OFFSET-EPOCH, "
                                         "e.g. 1000-1 (as `kraftlog snapshot list` shows them)") from None


# ---------------------------------------------------------------------------------- the store


def _metadata_log_dir(path: str) -> str | None:
    """``path`` itself when it is a metadata log directory, else its __cluster_metadata-0, else None."""
    if os.path.basename(os.path.normpath(path)) == METADATA_LOG_DIRNAME or any(
            is_segment_name(n) for n in os.listdir(path)):
        return path
    candidate = os.path.join(path, METADATA_LOG_DIRNAME)
    return candidate if os.path.isdir(candidate) else None


def resolve_store(path: str, *, create: bool = False) -> str:
    """The LMDB store directory for ``path`` (the store, a metadata log dir, or a node dir).

    With ``create``, a metadata log directory without a store gets one (what import needs);
    anything else that holds no store is a NoSnapshotStoreError naming where it looked."""
    if not exists(path):
        raise NoSnapshotStoreError(f"{path} does not exist")
    if not os.path.isdir(path):
        raise NoSnapshotStoreError(f"{path} is not a directory; give a node directory, its "
                                   f"{METADATA_LOG_DIRNAME} or its snapshot store")
    candidates = (path, os.path.join(path, SNAPSHOT_DIRNAME),
                  os.path.join(path, METADATA_LOG_DIRNAME, SNAPSHOT_DIRNAME))
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, LMDB_DATA_NAME)):
            return candidate
    log_dir = _metadata_log_dir(path)
    if create and log_dir is not None:
        return os.path.join(log_dir, SNAPSHOT_DIRNAME)
    if create and _fresh_or_formatted(path):
        # the node layout, where `kraftlog node run` on this directory will find it
        return os.path.join(path, METADATA_LOG_DIRNAME, SNAPSHOT_DIRNAME)
    where = ", ".join(os.path.join(c, LMDB_DATA_NAME) for c in candidates)
    if create:
        raise NoSnapshotStoreError(f"{path} holds neither a snapshot store ({where}) nor a metadata log directory "
                                   f"({METADATA_LOG_DIRNAME}) and is neither empty nor a formatted node directory "
                                   "(kraftlog storage format): nowhere to create a store")
    raise NoSnapshotStoreError(f"{path} holds no snapshot store (no {where})")


def _fresh_or_formatted(path: str) -> bool:
    """An empty directory, or a node directory `kraftlog storage format` wrote (meta.properties)."""
    names = set(os.listdir(path))
    return not names or META_PROPERTIES in names


def open_store(store_path: str):
    """The SnapshotStore at ``store_path``; an LMDB that cannot be opened is one ToolError line."""
    import lmdb

    from kraftlog.engine.snapshot.store import SnapshotStore

    try:
        return SnapshotStore(store_path)
    except lmdb.Error as exc:
        raise ToolError(f"{store_path}: cannot open the LMDB snapshot store: {exc}") from None


def store_users(store_path: str) -> list[int] | None:
    """Pids of other processes that have the store open ([] when unknown but some do), or None
    when nobody else does. Must run before this process opens the store: closing the probe's file
    descriptor drops every POSIX lock this process holds on lock.mdb, LMDB's own included."""
    import fcntl

    lock_path = os.path.join(store_path, LMDB_LOCK_NAME)
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except OSError:
        # Missing: nobody has opened the store (LMDB creates lock.mdb on open). Not ours to write:
        # then opening the store for the import fails too, with LMDB's own one-line reason.
        return None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError:
            return _lock_holders(os.fstat(fd).st_ino)
        return None
    finally:
        os.close(fd)  # also releases the probe's lock when it was taken


def _lock_holders(inode: int) -> list[int]:
    """Pids holding POSIX locks on the inode, from Linux's /proc/locks ([] elsewhere).

    A line: ``1: POSIX  ADVISORY  READ 1283 fe:00:2213363 0 0`` (id, class, mode, type, pid,
    major:minor:inode, first byte, last byte)."""
    pids = set()
    try:
        with open("/proc/locks") as f:
            for line in f:
                words = line.split()
                if len(words) >= 6 and words[1] == "POSIX" and words[5].rsplit(":", 1)[-1] == str(inode):
                    pids.add(int(words[4]))
    except (OSError, ValueError):
        return []
    pids.discard(os.getpid())
    return sorted(pids)


def _pick(store, store_path: str, wanted):
    """The snapshot id to work on: ``wanted`` when it is stored, else the newest."""
    ids = store.ids()
    if not ids:
        raise ToolError(f"{store_path} holds no snapshot")
    if wanted is None:
        return ids[-1]
    if wanted not in ids:
        raise ToolError(f"snapshot {wanted} is not in {store_path} (it holds {_id_list(ids)})")
    return wanted


@contextlib.contextmanager
def _corruption_named(store_path: str, directory: str):
    """A stored snapshot that fails its checks, as one line naming the store and what to run next."""
    from kraftlog.engine.snapshot.errors import SnapshotCorruptError

    try:
        yield
    except SnapshotCorruptError as exc:
        raise ToolError(f"{store_path}: {exc}; see which snapshots are intact with: kraftlog snapshot list "
                        f"{directory} --verify") from None


def _id_list(ids) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


# --------------------------------------------------------------------------------------- list


def run_list(args: argparse.Namespace) -> int:
    from kraftlog.engine.cli.tools.progress import ProgressBar

    store_path = resolve_store(args.dir)
    rows = []
    with open_store(store_path) as store:
        ids = store.ids()
        with ProgressBar(show_progress(args) and args.verify, "verifying", total=max(1, len(ids))) as bar:
            for done, sid in enumerate(ids, 1):
                rows.append(_row(store, sid, verify=args.verify))
                bar.update(done, str(sid))
    if args.json:
        import json

        for row in rows:
            print(json.dumps(row, separators=(",", ":")))
    else:
        _print_table(store_path, rows)
    failed = [row for row in rows if "error" in row]
    if failed:
        first = failed[0]
        raise ToolError(f"{store_path}: {len(failed)} of {len(rows)} snapshot(s) failed their checks; first: "
                        f"{first['error']}")
    return 0


def _row(store, sid, *, verify: bool) -> dict:
    """A snapshot's facts from its manifest (its CRC checked) and, with ``verify``, a full check."""
    import datetime

    from kraftlog.engine.image import versions
    from kraftlog.errors import KraftlogError

    row: dict = {"snapshot": str(sid), "endOffset": sid.end_offset, "epoch": sid.epoch}
    try:
        m = store.manifest(sid)
    except KraftlogError as exc:
        return {**row, "verified": False, "error": str(exc)}
    created = datetime.datetime.fromtimestamp(m.created_ms / 1000, datetime.UTC)
    # The manifest's metadata.version is the stream's FeatureLevelRecord, read when the snapshot
    # was stored; 0 means the stream has none (Kafka then assumes 3.0-IV1), so decoding the stream
    # again could not find one either.
    row.update(records=m.record_count, batches=m.batch_count, chunks=m.chunk_count, streamBytes=m.stream_bytes,
               storedBytes=m.stored_bytes, createdMs=m.created_ms, created=created.strftime("%Y-%m-%dT%H:%M:%SZ"),
               metadataVersion=versions.name(m.metadata_version) if m.metadata_version else None,
               metadataVersionLevel=m.metadata_version, imageForm=m.image_form,
               lastContainedLogTimestampMs=m.last_contained_log_timestamp_ms, streamCrc=m.stream_crc, verified=None)
    if verify:
        try:
            store.verify(sid)
            row["verified"] = True
        except KraftlogError as exc:
            row.update(verified=False, error=str(exc))
    return row


TABLE = (("END OFFSET", "endOffset"), ("EPOCH", "epoch"), ("RECORDS", "records"), ("STREAM BYTES", "streamBytes"),
         ("STORED BYTES", "storedBytes"), ("CREATED (UTC)", "created"), ("METADATA.VERSION", "metadataVersion"),
         ("VERIFIED", "verified"))
NUMERIC = {"endOffset", "epoch", "records", "streamBytes", "storedBytes"}


def _cell(row: dict, key: str) -> str:
    if key == "verified":
        return {None: "-", True: "ok", False: "CORRUPT"}[row.get("verified")]
    if key not in row:
        return "?"
    value = row[key]
    if value is None:
        return "-"
    return f"{value:,}" if key in NUMERIC and key not in ("endOffset", "epoch") else str(value)


def _print_table(store_path: str, rows: list[dict]) -> None:
    if not rows:
        print(f"no snapshots in {store_path}")
        return
    cells = [[title for title, _ in TABLE]] + [[_cell(row, key) for _, key in TABLE] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(TABLE))]
    for line in cells:
        print("  ".join(c.rjust(w) if TABLE[i][1] in NUMERIC else c.ljust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))).rstrip())
    for row in rows:
        if "error" in row:
            print(f"  {row['error']}")


# --------------------------------------------------------------------------------------- dump


def run_dump(args: argparse.Namespace) -> int:
    from kraftlog.engine.cli.tools.dump import Dumper

    store_path = resolve_store(args.dir)
    with open_store(store_path) as store:
        sid = _pick(store, store_path, args.snapshot)
        with _corruption_named(store_path, args.dir):
            _, stream = store.read_stream(sid)  # every chunk's CRC and the stream's CRC checked
    label = f"{store_path}#{sid}"  # how the store names a snapshot in its own errors
    dumper = Dumper(sys.stdout.write, json_lines=args.json, batches_only=args.batches_only, max_bytes=None)
    dumper.dump_snapshot_stream(stream, label, sid.end_offset, sid.epoch)
    return 0


# ------------------------------------------------------------------------------------- export


def run_export(args: argparse.Namespace) -> int:
    store_path = resolve_store(args.dir)
    out = args.out
    out_is_dir = os.path.isdir(out)
    parent = out if out_is_dir else (os.path.dirname(out) or ".")
    if not os.path.isdir(parent):
        raise ToolError(f"cannot write {out}: directory {parent} does not exist")
    with open_store(store_path) as store:
        sid = _pick(store, store_path, args.snapshot)
        final = os.path.join(out, sid.file_name) if out_is_dir else out
        if os.path.exists(final) and not args.force:
            raise ToolError(f"{final} exists; use --force to overwrite it")
        with _corruption_named(store_path, args.dir):
            manifest = _export_checked(store, sid, parent, final)
    if os.path.basename(final) != sid.file_name:
        warn("snapshot", f"{final} does not carry the snapshot id in its name; Kafka, `kraftlog log dump` and "
                         f"`kraftlog image show` read it from a name like {sid.file_name}")
    print(f"Exported snapshot {sid} of {store_path} to {final}: {manifest.record_count:,} records, "
          f"{manifest.batch_count:,} batches, {manifest.stream_bytes:,} bytes, CRC-32C {manifest.stream_crc:#010x} "
          "checked")
    return 0


def _export_checked(store, sid, parent: str, final: str):
    """export_checkpoint into a temporary directory beside ``final``, the file's CRC checked against
    the manifest (the chunks are checked as they are read, the whole stream only here), then moved
    into place durably: ``final`` is the old file or the whole checked snapshot, never a part."""
    import shutil
    import tempfile

    from kraftlog.durable import replace_durably
    from kraftlog.engine.snapshot.checkpoint import export_checkpoint

    manifest = store.manifest(sid)
    staging = tempfile.mkdtemp(prefix=".kraftlog-export-", dir=parent)
    try:
        written = export_checkpoint(store, sid, staging)
        crc, size = _file_crc(written)
        if (crc, size) != (manifest.stream_crc, manifest.stream_bytes):
            raise ToolError(f"snapshot {sid} of {store.path}: the exported stream has CRC {crc:#010x} and {size} bytes, "
                            f"the manifest says {manifest.stream_crc:#010x} and {manifest.stream_bytes}; nothing written")
        replace_durably(written, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _file_crc(path: str) -> tuple[int, int]:
    from kraftlog.engine.records.wire import crc32c

    crc = size = 0
    with open(path, "rb") as f:
        while block := f.read(EXPORT_CHECK_BYTES):
            crc = crc32c(block, crc)
            size += len(block)
    return crc, size


# ------------------------------------------------------------------------------------- import


def run_import(args: argparse.Namespace) -> int:
    from kraftlog.engine.snapshot.checkpoint import parse_checkpoint_name

    path = args.file
    if not os.path.isfile(path):
        raise ToolError(f"{path} does not exist" if not exists(path) else f"{path} is not a file")
    sid = args.snapshot or parse_checkpoint_name(path)
    if sid is None:
        raise ToolError(f"{path}: the name is not <20-digit end offset>-<10-digit epoch>.checkpoint; give the id "
                        "with --snapshot END_OFFSET-EPOCH")
    from kraftlog.engine.cli.tools import segments
    from kraftlog.engine.cli.tools.imageload import check_checkpoint

    store_path = resolve_store(args.dir, create=True)
    if not os.path.isdir(store_path):
        # a store about to be created: check the file first, so a failed import creates nothing
        # (into an existing store, import_checkpoint's own check stores nothing on failure)
        check_checkpoint(path, segments.map_file(path), hint="nothing was imported")
    users = store_users(store_path)
    if users is not None:
        who = f"process {', '.join(map(str, users))}" if users else "another process"
        if not args.force:
            raise StoreInUseError(f"{store_path} is open in {who} (a running node?); stop it first, or import "
                                  "anyway with --force")
        warn("snapshot", f"{store_path} is open in {who}; importing anyway (--force)")
    with open_store(store_path) as store:
        before = store.ids()
        _check_room(store, store_path, sid, before, replace=args.replace)
        manifest = _import(store, path, sid, replace=args.replace)
        after = store.ids()
    _report_import(path, store_path, manifest, [i for i in before if i not in after], store.config.retain_count)
    return 0


def _check_room(store, store_path: str, sid, ids, *, replace: bool) -> None:
    """Refuse before writing: an id already stored (without --replace), or one so old that the
    store's retention would delete it in the very transaction that writes it."""
    if sid in ids and not replace:
        raise ToolError(f"snapshot {sid} is already in {store_path}; use --replace to overwrite it")
    retain = store.config.retain_count
    kept = sorted(set(ids) | {sid})[-retain:]
    if sid not in kept:
        raise ToolError(f"snapshot {sid} is older than the {retain} newest in {store_path} ({_id_list(ids[-retain:])}): "
                        "retention would delete it as soon as it is stored")


def _import(store, path: str, sid, *, replace: bool):
    """import_checkpoint; a file that does not validate is one line: file, position, what, and
    that nothing was stored."""
    from kraftlog.engine.cli.tools.common import CorruptLogError
    from kraftlog.engine.snapshot.checkpoint import import_checkpoint
    from kraftlog.engine.snapshot.errors import SnapshotCorruptError

    try:
        return import_checkpoint(store, path, sid, replace=replace)
    except SnapshotCorruptError as exc:
        if exc.position is None:
            raise ToolError(f"{path}: {exc.reason}; nothing was imported") from None
        raise CorruptLogError(path, exc.position, exc.reason, "nothing was imported") from None


def _report_import(path: str, store_path: str, m, removed, retain: int) -> None:
    from kraftlog.engine.image import versions

    mv = versions.name(m.metadata_version) if m.metadata_version else "none"
    print(f"Imported {path} as snapshot {m.snapshot_id} into {store_path}: {m.record_count:,} records, "
          f"{m.batch_count:,} batches, {m.stream_bytes:,} bytes ({m.stored_bytes:,} stored), metadata.version {mv}")
    if removed:
        print(f"Retention removed {_id_list(removed)} (the store keeps the {retain} newest snapshots)")
