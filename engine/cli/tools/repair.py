"""`kraftlog log repair DIR --truncate-at-first-corruption`: cut a log at its first problem.

What is cut, by the kind of the first problem (segments.scan_log_dir):
- a bad batch, a batch that does not continue the offsets, a leader epoch going down: the
  segment is truncated at that batch's position (a non-first segment that is bad from position 0
  is removed whole) and every later segment is removed;
- an index that disagrees with its log: the index file is removed (the log rebuilds it);
- a checkpoint file that does not parse: the file is removed (the log rebuilds the epoch cache
  from the batches' leader epochs; the log start falls back to the first segment).

Nothing is deleted: cut bytes are saved as ``<segment>.log.from-<position>`` and removed files
are moved, all into ``DIR/repair-backup-<UTC timestamp>/`` with a REPAIR.txt saying what came
from where and how to put it back. Then the clean-shutdown marker is removed and the log is
opened once with engine.log.Log (recovery rebuilds the indexes, trims the epoch cache, and closes
cleanly), and the directory is verified again. Run it only while no node has the log open.
"""

from __future__ import annotations

import os
import shutil
import time

from kraftlog.engine.cli.tools import segments
from kraftlog.engine.cli.tools.common import ToolError
from kraftlog.engine.log.log import CLEAN_SHUTDOWN_NAME
from kraftlog.engine.log.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, segment_name

COPY_CHUNK_BYTES = 1 << 20


class Repair:
    def __init__(self, directory: str, *, dry_run: bool, say):
        self.directory = directory
        self.dry_run = dry_run
        self.say = say
        self.backup: str | None = None
        self.notes: list[str] = []

    def _backup_dir(self) -> str:
        if self.backup is None:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            path, n = os.path.join(self.directory, f"repair-backup-{stamp}"), 1
            while os.path.exists(path):
                path, n = os.path.join(self.directory, f"repair-backup-{stamp}-{n}"), n + 1
            os.makedirs(path)
            self.backup = path
            self.say(f"backup: {path}")
        return self.backup

    def _record(self, line: str) -> None:
        self.notes.append(line)
        self.say(line)

    def _move(self, path: str) -> None:
        if os.path.exists(path):
            os.rename(path, os.path.join(self._backup_dir(), os.path.basename(path)))

    def _save_tail(self, path: str, position: int) -> str:
        """Copy bytes [position, end) of ``path`` into the backup; returns the copy's name."""
        name = f"{os.path.basename(path)}.from-{position}"
        with open(path, "rb") as src, open(os.path.join(self._backup_dir(), name), "wb") as dst:
            src.seek(position)
            shutil.copyfileobj(src, dst, COPY_CHUNK_BYTES)
            dst.flush()
            os.fsync(dst.fileno())
        return name

    def _segment_files(self, base: int) -> list[str]:
        stem = os.path.join(self.directory, segment_name(base))
        return [stem + ".log", stem + INDEX_SUFFIX, stem + TIME_INDEX_SUFFIX]

    # -- the three fixes ---------------------------------------------------------------------------------------------

    def cut_log(self, problem: segments.Problem, base: int) -> None:
        later = [b for b in segments.segment_bases(self.directory) if b > base]
        name = os.path.basename(problem.path)
        if problem.position == 0 and base != segments.segment_bases(self.directory)[0]:
            for path in self._segment_files(base):
                self._move(path)
            self._record(f"moved {name} (bad from position 0) and its indexes to the backup")
        else:
            size = os.path.getsize(problem.path)
            saved = self._save_tail(problem.path, problem.position)
            os.truncate(problem.path, problem.position)
            for path in self._segment_files(base)[1:]:
                self._move(path)
            self._record(f"cut {name} at position {problem.position}: {size - problem.position} bytes saved as "
                         f"{saved}; its indexes moved to the backup (rebuilt on open)")
        for b in later:
            for path in self._segment_files(b):
                self._move(path)
        if later:
            self._record(f"moved {len(later)} later segment(s) to the backup: "
                         + ", ".join(segment_name(b) + ".log" for b in later))

    def fix(self, scan: segments.LogDirScan) -> None:
        problem = scan.problem
        if problem.kind == "log":
            self.cut_log(problem, scan.segments[problem.segment].base_offset)
        else:
            self._move(problem.path)
            self._record(f"moved {os.path.basename(problem.path)} to the backup (the log rebuilds it)")

    def describe(self, problem: segments.Problem) -> str:
        if problem.kind == "log":
            return f"would cut {os.path.basename(problem.path)} at position {problem.position} and remove every later segment"
        return f"would move {os.path.basename(problem.path)} to a backup (the log rebuilds it)"


def repair(directory: str, *, dry_run: bool, say) -> int:
    """Repair ``directory``; ``say`` prints a line. Returns the exit code: 0 when repaired or nothing
    needed repair, 1 for a dry run that found something to cut."""
    from kraftlog.engine.log.log import Log

    work = Repair(directory, dry_run=dry_run, say=say)
    max_rounds = len(segments.segment_bases(directory)) + 3  # one cut, then index/checkpoint files at most
    for _ in range(max_rounds):
        scan = segments.scan_log_dir(directory)
        if scan.problem is None:
            break
        say(f"found: {scan.problem.describe()}")
        if dry_run:
            say(work.describe(scan.problem) + " (dry run: nothing changed)")
            return 1
        work.fix(scan)
        marker = os.path.join(directory, CLEAN_SHUTDOWN_NAME)
        if os.path.exists(marker):
            os.remove(marker)  # make the next open CRC-scan everything and rebuild every index
    else:
        raise ToolError(f"{directory}: still not consistent after {max_rounds} repairs; see {work.backup}")
    if work.backup is None:
        say(f"nothing to repair: {directory} verifies clean")
        return 0
    with open(os.path.join(work.backup, "REPAIR.txt"), "w") as f:
        f.write(f"kraftlog log repair --truncate-at-first-corruption of {os.path.abspath(directory)}\n"
                f"at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\n\n")
        f.write("\n".join(work.notes) + "\n\n")
        f.write("To undo: stop every node using the log, append each <segment>.log.from-<position> file back to\n"
                "its segment (cat X.log.from-N >> X.log after truncating X.log to N bytes) and move the other\n"
                "files back into the log directory.\n")
    Log.open(directory).close()  # recovery: rebuild indexes, trim the epoch cache, close cleanly
    after = segments.scan_log_dir(directory)
    if after.problem is not None:
        raise ToolError(f"{directory}: after the repair: {after.problem.describe()}")
    span = (f"offsets {after.start_offset}..{after.end_offset - 1}" if after.end_offset > after.start_offset
            else f"empty, starting at offset {after.start_offset}")
    say(f"reopened the log: {span}, {len(after.segments)} segment(s); indexes and the leader-epoch cache rebuilt")
    say("verify: ok")
    return 0
