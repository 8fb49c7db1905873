"""Proves that a node keeps its freed large buffers (engine/node/memory.py): after
keep_freed_buffers, an 8 MiB buffer (a Fetch answer at fetch_max_bytes) comes from the heap,
not from a fresh mmap whose pages fault on first touch; before, it is mmapped. Run in a
subprocess so the malloc settings do not leak into the test process."""

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
