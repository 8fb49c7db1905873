"""Writeback ahead of the flush: a segment's freshly written bytes start for the disk on a thread
of their own while the log goes on appending, so the flush that follows a long append (a far
follower's 8 MiB Fetch answer: ~50,000 batches in a dozen appends) waits for less.

Only a hint, never a promise. The thread fdatasyncs the segment file through a descriptor of its
own (opened by path), and whatever it does or fails to do changes nothing the log states:
``Log.flush`` still fdatasyncs every dirty segment itself and only then moves the flushed offset.
Its own descriptor is what makes ignoring the thread's errors safe: Linux (4.13+) records a
writeback error on the file and reports it to every descriptor open before it happened, each on
its next fsync (errseq), so the log's flush sees an error the thread ran into. A descriptor shared
with the log's (dup) would not do: the first fsync to see an error clears it for the other.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor


class Writeback:
    """At most one background fdatasync at a time; a request while one runs is dropped (the next
    request, or the log's flush, covers its bytes)."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._running: Future | None = None
        self._lock = threading.Lock()
        self.started = 0  # background fdatasyncs started (tests and traces read it)

    def request(self, path: str) -> bool:
        """Start writing ``path``'s dirty pages back unless a writeback runs; True when one started."""
        with self._lock:
            if self._running is not None and not self._running.done():
                return False
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kraftlog-writeback")
            try:
                self._running = self._executor.submit(_sync_quietly, path)
            except RuntimeError:  # the interpreter is shutting down: no new threads, and no need
                return False
            self.started += 1
            return True

    def wait(self) -> None:
        """Return once no writeback runs (tests)."""
        running = self._running
        if running is not None:
            running.result()

    def close(self) -> None:
        """Stop the thread after the writeback under way, if any."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)


def _sync_quietly(path: str) -> None:
    """fdatasync ``path`` through a descriptor of its own; every error is the log flush's to see
    (the module docstring says why), and a file gone meanwhile (truncated away, deleted) has
    nothing left to write."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fdatasync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
