"""Keep a node's freed large buffers in the process (glibc malloc), for the node's life.

A node moves buffers of up to fetch_max_bytes (8 MiB): a Fetch answer's frame on both sides,
the copy asyncio keeps of what the socket did not take at once, a follower's log appends.
glibc serves an allocation of 128 KiB or more with a fresh mmap and unmaps it on free (its
dynamic threshold only rises to the size freed, and a request of that size is mmapped again),
so each such buffer is new memory whose every page faults on first touch: ~0.5 ms per MiB on
this project's VMs (4.5 ms to make an 8 MiB bytearray, 0.2 ms when the heap already holds the
pages), a third of a far follower's catch-up time (bench row raft.catchup_batches_per_s).
Raising the mmap threshold to glibc's maximum and the trim threshold (what the heap keeps free
at its top instead of returning it) lets those buffers come back from the heap already mapped.
Cost: up to TRIM_THRESHOLD_BYTES of freed memory stay with the process. Elsewhere than glibc
nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from kraftlog.raft.core import RaftConfig

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3
# what prefault_heap faults in at a node's start: a Fetch answer at fetch_max_bytes twice over
# (a leader: the answer's frame; a follower: the buffer it receives the answer in, and its append)
PREFAULT_BYTES = 2 * RaftConfig().fetch_max_bytes
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's maximum on 64-bit (HEAP_MAX_SIZE / 2): above fetch_max_bytes
TRIM_THRESHOLD_BYTES = 128 << 20


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def is_glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError, AttributeError):  # not a glibc system
        return False


def keep_freed_buffers() -> bool:
    """Apply the thresholds above; True if glibc took both."""
    if not is_glibc():
        return False
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1


def prefault_heap(size_bytes: int = PREFAULT_BYTES) -> bool:
    """After keep_freed_buffers: grow the heap by ``size_bytes``, touch every page, free it. The
    pages stay mapped at the heap's top (under TRIM_THRESHOLD_BYTES), so the first large buffers
    (a leader's first Fetch answer to a far follower: its read copy and its frame, ~5 ms of page
    faults for 8 MiB) come from memory already faulted in, not only the ones after a first free.
    True if done (glibc with the thresholds applied, ``size_bytes`` under the mmap threshold)."""
    if not 0 < size_bytes < MMAP_THRESHOLD_BYTES or not keep_freed_buffers():
        return False
    libc = _libc()
    libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
    libc.free.argtypes, libc.free.restype = [ctypes.c_void_p], None
    block = libc.malloc(size_bytes)
    if not block:
        return False
    ctypes.memset(block, 0, size_bytes)  # the touch that faults the pages in, once, here
    libc.free(block)
    return True
