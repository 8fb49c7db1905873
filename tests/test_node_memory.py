"""Proves that a node keeps its freed large buffers (engine/node/memory.py): after
keep_freed_buffers, an 8 MiB buffer (a Fetch answer at fetch_max_bytes) comes from the heap,
not from a fresh mmap whose pages fault on first touch; before, it is mmapped. And that after
prefault_heap even the first such buffer lands on pages already faulted in. Run in
subprocesses so the malloc settings do not leak into the test process."""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys

import pytest

from kraftlog.engine.node.memory import is_glibc

_PROBE = """
import ctypes, ctypes.util
from kraftlog.engine.node.memory import keep_freed_buffers
libc = ctypes.CDLL(ctypes.util.find_library("c"))
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
def mmapped_by_one_buffer():
    before = libc.mallinfo2().hblks
    buf = bytearray(8 << 20)
    return libc.mallinfo2().hblks - before
print(mmapped_by_one_buffer(), keep_freed_buffers(), mmapped_by_one_buffer())
"""


def _has_mallinfo2() -> bool:
    return is_glibc() and hasattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "mallinfo2")


@pytest.mark.skipif(not _has_mallinfo2(), reason="glibc's malloc only (mallinfo2: glibc 2.33+)")
def test_large_buffers_come_from_the_heap_after_keep_freed_buffers():
    out = subprocess.run([sys.executable, "-c", _PROBE], check=True, capture_output=True, text=True, timeout=60)
    before, applied, after = out.stdout.split()
    assert (before, applied, after) == ("1", "True", "0")


_FAULTS_PROBE = """
import resource, sys
from kraftlog.engine.node.memory import keep_freed_buffers, prefault_heap
done = prefault_heap(16 << 20) if sys.argv[1] == "prefault" else keep_freed_buffers()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
frame = b"\\x01" * (8 << 20)  # a first Fetch answer's frame, every page written
print(done, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _first_buffer_faults(how: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _FAULTS_PROBE, how], check=True, capture_output=True, text=True,
                         timeout=60)
    done, faults = out.stdout.split()
    return done, int(faults)


def test_first_large_buffer_does_not_fault_after_prefault_heap():
    plain_done, plain_faults = _first_buffer_faults("plain")
    done, faults = _first_buffer_faults("prefault")
    if not is_glibc():  # the thresholds are glibc's: elsewhere both do nothing, and say so
        assert (plain_done, done) == ("False", "False")
        return
    assert (plain_done, done) == ("True", "True")
    # 8 MiB of 4 KiB pages is 2,048 faults (fewer with huge pages); prefaulted, next to none
    assert plain_faults >= 4 * max(faults, 1), (plain_faults, faults)
