"""`kraftlog log`: dump, verify, repair (Kafka's kafka-dump-log, plus a checker and a repair), and
tail (follow a live cluster's committed log: tail_cmd.py).

verify and repair read a log directory without Log.open (which would repair on its own): see
segments.py. repair changes the directory only with --truncate-at-first-corruption (required)
and keeps a backup of everything it cuts (repair.py).
"""

from __future__ import annotations

import argparse
import os

from kraftlog.engine.cli import values
from kraftlog.engine.cli.tools.common import (
    REPAIR_HINT,
    CorruptLogError,
    ToolError,
    add_command,
    add_commands,
    add_quiet,
    pipe_safe,
    resolve_log_dir,
    show_progress,
)

DUMP_EXAMPLE = """examples:
  kraftlog log dump /tmp/meta/00000000000000000000.log
  kraftlog log dump --json /tmp/meta/00000000000000000000.log | jq 'select(.kind == "record")'
  kraftlog log dump /tmp/meta/00000000000000120000-0000000001.checkpoint

As Kafka's kafka-dump-log, dump exits 0 whatever the bytes hold (random bytes, a torn tail, an
index pointing nowhere): each problem is a line of its output. For an exit status that says
whether a log is sound, use kraftlog log verify."""
VERIFY_EXAMPLE = "example: kraftlog log verify /tmp/meta"
REPAIR_EXAMPLE = """example: kraftlog log repair /tmp/meta --truncate-at-first-corruption

Stop every node that uses the log first. Everything cut is kept in DIR/repair-backup-<time>/."""


def register(parser: argparse.ArgumentParser) -> None:
    sub = add_commands(parser, "log_command")
    parser.epilog = "example: kraftlog log verify /tmp/meta"
    dump = add_command(sub, "dump", "print the batches and records of segment, snapshot and index files "
                       "(kafka-dump-log --cluster-metadata-decoder)", DUMP_EXAMPLE, pipe_safe(run_dump))
    dump.add_argument("files", nargs="+", metavar="FILE",
                      help=".log segments, .checkpoint snapshots, .index / .timeindex files")
    dump.add_argument("--json", action="store_true", help="one JSON object per line instead of Kafka's text")
    dump.add_argument("--batches-only", action="store_true", help="batch lines only (Kafka's shallow iteration)")
    dump.add_argument("--max-bytes", type=values.positive("bytes"), default=None, metavar="N",
                      help="read at most N bytes of each file (whole batches only)")

    verify = add_command(sub, "verify", "check a log directory: every CRC, every record decodes, offsets continuous "
                         "across segments, indexes against the log; exit 1 on a problem", VERIFY_EXAMPLE, pipe_safe(run_verify))
    verify.add_argument("dir", metavar="DIR", help="the log directory (or a node's directory holding "
                        "__cluster_metadata-0), or a <end offset>-<epoch>.checkpoint snapshot file")
    add_quiet(verify)

    repair = add_command(sub, "repair", "cut a log directory at its first corruption, keeping a backup of what "
                         "is cut", REPAIR_EXAMPLE, pipe_safe(run_repair))
    repair.add_argument("dir", metavar="DIR", help="the log directory")
    repair.add_argument("--truncate-at-first-corruption", action="store_true", required=True,
                        help="required: the only repair there is (everything after the first problem is cut)")
    repair.add_argument("--dry-run", action="store_true", help="say what would be cut, change nothing (exit 1 if "
                        "something would be)")

    from kraftlog.engine.cli.tools import tail_cmd  # a live cluster's log, not a directory: its own module

    tail_cmd.register(sub)


def run_dump(args: argparse.Namespace) -> int:
    from kraftlog.engine.cli.tools.dump import dump_files

    if args.max_bytes is not None and args.max_bytes < 0:
        raise ToolError(f"--max-bytes must be >= 0, got {args.max_bytes}")
    dump_files(args.files, json_lines=args.json, batches_only=args.batches_only, max_bytes=args.max_bytes)
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from kraftlog.engine.cli.tools import segments
    from kraftlog.engine.cli.tools.progress import ProgressBar

    if os.path.isfile(args.dir) and args.dir.endswith(".checkpoint"):
        return _verify_checkpoint(args.dir, show_progress(args))
    directory = resolve_log_dir(args.dir)
    bases = segments.segment_bases(directory)
    total = sum(os.path.getsize(os.path.join(directory, f"{b:020d}.log")) for b in bases)
    print(f"Verifying {directory}: {len(bases)} segment(s), {total:,} bytes")
    with ProgressBar(show_progress(args), "verifying", total=max(1, total)) as bar:
        done = [0]

        def on_segment(seg) -> None:
            done[0] += seg.file_size
            bar.update(done[0], os.path.basename(seg.path))
            last = f"{seg.base_offset}..{seg.next_offset - 1}" if seg.batch_count else f"{seg.base_offset} (empty)"
            print(f"  {os.path.basename(seg.path)}: {seg.batch_count:,} batches, {seg.records:,} records, "
                  f"offsets {last}, {seg.file_size:,} bytes")

        scan = segments.scan_log_dir(directory, decode_records=True, on_segment=on_segment)
    for note in scan.notes:
        print(f"  note: {note}")
    problem = scan.problem
    if problem is not None:
        if problem.torn_tail:
            hint = (f"the next open of the log truncates it (a crash's torn write), or cut it now with: "
                    f"{REPAIR_HINT.format(dir=args.dir)}")
        else:
            hint = f"to cut the log there (keeping a backup) run: {REPAIR_HINT.format(dir=args.dir)}"
        raise CorruptLogError(problem.path, problem.position, problem.reason, hint)
    _report_undecodable(scan)
    records = scan.records
    print(f"OK: {len(scan.segments)} segment(s), offsets {scan.start_offset}..{scan.end_offset - 1}, {records:,} "
          f"records, {scan.size_bytes:,} bytes: every CRC valid, every record decodes, offsets continuous, "
          "indexes consistent")
    return 0


def _verify_checkpoint(path: str, progress: bool) -> int:
    """A Kafka snapshot file: whole (SnapshotHeader first, SnapshotFooter last, every CRC valid),
    and every record decodes and applies to an image (imageload raises naming what does not)."""
    from kraftlog.engine.cli.tools import imageload

    loaded = imageload.load_checkpoint(path, progress=progress)
    m = loaded.manifest
    print(f"OK: {path}: a snapshot up to offset {loaded.end_offset - 1}, {m.batches:,} batches, {m.records:,} "
          "records: every CRC valid, header and footer in place, every record decodes and applies")
    return 0


def _report_undecodable(scan) -> None:
    """CRC-valid batches whose records do not decode: each on its own line, then exit 1. Not a
    corruption of the log (recovery keeps them, repair would not cut them): a writer wrote records
    no reader can use, or in a codec that does not exist."""
    bad = [(seg.path, u) for seg in scan.segments for u in seg.undecodable]
    if not bad:
        return
    for path, u in bad:
        what = "unsupported codec" if u.unsupported_codec else "undecodable records"
        print(f"  {what}: {path}: position {u.position} (batch at offset {u.base_offset}): {u.reason}")
    codecs = sum(u.unsupported_codec for _, u in bad)
    raise ToolError(f"every CRC valid, but {len(bad)} batch(es) hold records that cannot be read "
                    f"({codecs} in an unsupported codec, {len(bad) - codecs} with undecodable records); "
                    f"first: {bad[0][0]}: position {bad[0][1].position}")


def run_repair(args: argparse.Namespace) -> int:
    from kraftlog.engine.cli.tools.repair import repair

    directory = resolve_log_dir(args.dir)
    return repair(directory, dry_run=args.dry_run, say=print)
