"""The file-system seam of the log: every byte the log reads or writes goes through here.

Three pieces (the shape of tikv/raft-engine's ``FileSystem`` seam):

- ``FileSystem`` / ``FileHandle``: the Protocols the log depends on. Deliberately small: open a
  file, positional vectored writes, reads, truncate (shrink or extend), fsync, memory-map, and the
  directory operations (list, rename, remove, fsync the directory).
- ``RealFileSystem``: the operating system (``os.pwritev``, ``os.preadv``, ``os.fdatasync``,
  ``mmap``). Its handles also expose ``fileno()``: the leader append's hot path writes through
  the descriptor natively (CRC check and pwritev in one C call, segment.py / log.py). Handles
  without ``fileno`` (FaultFileSystem's) get the same bytes through ``pwrite``.
- ``FaultFileSystem``: a real file system that remembers what was made durable and can be told
  to fail. It writes through to real files, so memory maps read real bytes; ``crash()`` then
  rewrites every file to what "survived": everything fsynced plus a random prefix of what was not,
  with the last surviving write possibly torn (cut short, zero-filled or garbage-filled).

Crash model of ``FaultFileSystem`` (what tests can and cannot claim): data written and not
fsynced may be lost, in order (a prefix of the unsynced writes survives, the last one possibly
torn). Directory operations (create, rename, remove) are durable at once, and rename is atomic.
Memory-mapped writes (the index files) are not tracked: after a crash an index file is left as
it was, zeroed or filled with garbage, chosen at random, because the log never trusts an index
after a crash.
"""

from __future__ import annotations

import errno as errno_codes
import mmap
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@runtime_checkable
class FileHandle(Protocol):
    """An open file, read-write. Positions and sizes are in bytes."""

    path: str

    def size(self) -> int: ...

    def pwritev(self, buffers: Sequence, position: int) -> None:
        """Write every byte of ``buffers`` (in order) at ``position``, or raise OSError.

        On error some prefix of the bytes may have reached the file: callers truncate back.
        """

    def pwrite(self, data, position: int) -> None:
        """``pwritev([data], position)`` for one bytes-like buffer (the append hot path)."""

    def pread(self, size: int, position: int) -> bytes: ...

    def pread_into(self, buffer, position: int) -> int:
        """Read up to ``len(buffer)`` bytes at ``position`` into the writable ``buffer``; returns
        the count (less only at the end of the file)."""

    def truncate(self, size: int) -> None:
        """Set the file's length (shrinks, or extends with zeros)."""

    def allocate(self, size: int) -> None:
        """Extend the file to ``size`` bytes of zeros with its disk space reserved (posix_fallocate:
        ENOSPC now rather than at a later write). Optional: a handle without it is never preallocated."""

    def sync(self) -> None:
        """Make the file's data and length durable (fdatasync)."""

    def map(self, length: int, *, writable: bool = False, populate: bool = False) -> mmap.mmap:
        """Memory-map ``[0, length)``; ``length`` must not exceed the file size."""

    def close(self) -> None: ...


@runtime_checkable
class FileSystem(Protocol):
    """Directory operations and the way to open files."""

    def open(self, path: str, *, create: bool = False) -> FileHandle: ...

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def makedirs(self, path: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace ``dst`` with ``src``."""

    def sync_dir(self, path: str) -> None:
        """Make the directory's entries (creations, renames, removals) durable."""

    def read_bytes(self, path: str) -> bytes: ...


def write_file_atomic(fs: FileSystem, path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, never a mix.

    Writes ``path + ".tmp"``, fsyncs it, renames it over ``path``, fsyncs the directory.
    """
    tmp = path + ".tmp"
    handle = fs.open(tmp, create=True)
    try:
        handle.truncate(0)
        handle.pwritev([data], 0)
        handle.sync()
    finally:
        handle.close()
    fs.rename(tmp, path)
    fs.sync_dir(os.path.dirname(path) or ".")


# --------------------------------------------------------------------------------------------
# The real thing.


class RealFileHandle:
    """A file descriptor opened O_RDWR."""

    __slots__ = ("path", "_fd")

    def __init__(self, path: str, fd: int):
        self.path = path
        self._fd = fd

    def fileno(self) -> int:
        """The descriptor, for the log's native write of a leader append (segment.py)."""
        return self._fd

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def pwrite(self, data, position: int) -> None:
        written = os.pwrite(self._fd, data, position)
        kind = type(data)
        total = data.nbytes if kind is memoryview else len(data) if kind is bytes or kind is bytearray \
            else memoryview(data).nbytes
        if written < total:
            self._finish_pwrite(memoryview(data).cast("B"), written, position)

    def _finish_pwrite(self, view: memoryview, written: int, position: int) -> None:
        # Short writes happen (signals, some file systems): continue where the kernel stopped.
        while written < view.nbytes:
            view, position = view[written:], position + written
            written = os.pwrite(self._fd, view, position)

    def pwritev(self, buffers: Sequence, position: int) -> None:
        if len(buffers) == 1:
            # One buffer: os.pwrite is measurably cheaper than os.pwritev.
            self.pwrite(buffers[0], position)
            return
        views = [memoryview(b).cast("B") for b in buffers]
        total = sum(v.nbytes for v in views)
        written = os.pwritev(self._fd, views, position)
        # Short writes happen (signals, some file systems): continue where the kernel stopped.
        while written < total:
            views = _skip(views, written)
            position += written
            total -= written
            written = os.pwritev(self._fd, views, position)

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self._fd, size, position)

    def pread_into(self, buffer, position: int) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < view.nbytes:
            got = os.preadv(self._fd, [view[done:]], position + done)
            if not got:
                break
            done += got
        return done

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def allocate(self, size: int) -> None:
        have = self.size()
        if size > have:
            os.posix_fallocate(self._fd, have, size - have)

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def map(self, length: int, *, writable: bool = False, populate: bool = False) -> mmap.mmap:
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
        return mmap.mmap(self._fd, length, flags=flags, prot=prot)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _skip(views: list[memoryview], count: int) -> list[memoryview]:
    """The views left after dropping the first ``count`` bytes."""
    out = []
    for v in views:
        if count >= v.nbytes:
            count -= v.nbytes
            continue
        out.append(v[count:])
        count = 0
    return out


class RealFileSystem:
    """The operating system's file system."""

    def open(self, path: str, *, create: bool = False) -> RealFileHandle:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        return RealFileHandle(path, os.open(path, flags, 0o644))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def remove(self, path: str) -> None:
        os.remove(path)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()


# --------------------------------------------------------------------------------------------
# The fault-injecting file system for tests.

_FAULT_OPS = ("open", "write", "sync", "truncate", "rename", "remove", "sync_dir")


@dataclass
class _Fault:
    op: str
    errno: int
    remaining: int
    path_contains: str | None
    keep_bytes: int | None  # for writes: bytes that reach the file before the error (torn write)


@dataclass
class _FileState:
    """What a file durably holds, and the writes since its last fsync, in order."""

    durable: bytearray
    pending: list[tuple] = field(default_factory=list)  # ("w", position, bytes) | ("t", size)
    mapped_writable: bool = False

    def apply(self, op: tuple, content: bytearray) -> None:
        if op[0] == "t":
            del content[op[1]:]
            content.extend(bytes(op[1] - len(content)))
            return
        _, pos, data = op
        if len(content) < pos:
            content.extend(bytes(pos - len(content)))
        content[pos:pos + len(data)] = data


class FaultFileHandle:
    """A real file handle whose operations can be made to fail, with durability tracked."""

    def __init__(self, fs: FaultFileSystem, path: str, inner: RealFileHandle, state: _FileState):
        self.path = path
        self._fs = fs
        self._inner = inner
        self._state = state
        self._generation = fs.generation

    def _check(self, op: str) -> None:
        if self._generation != self._fs.generation:
            raise OSError(errno_codes.EIO, f"{self.path}: handle from before a simulated crash")
        self._fs._maybe_fail(op, self.path)

    def size(self) -> int:
        return self._inner.size()

    def pwritev(self, buffers: Sequence, position: int) -> None:
        if self._generation != self._fs.generation:
            raise OSError(errno_codes.EIO, f"{self.path}: handle from before a simulated crash")
        data = b"".join(bytes(memoryview(b).cast("B")) for b in buffers)
        fault = self._fs._take_fault("write", self.path)
        keep = len(data)
        err = None
        if fault is not None:
            keep = min(keep, fault.keep_bytes or 0)
            err = OSError(fault.errno, f"{self.path}: injected write failure")
        space = self._fs.space_left_bytes
        if space is not None:
            growth = max(0, position + keep - self._inner.size())
            if growth > space:
                keep = max(0, min(keep, self._inner.size() + space - position))
                err = OSError(errno_codes.ENOSPC, f"{self.path}: no space left on device (injected)")
        if keep:
            growth = max(0, position + keep - self._inner.size())
            self._inner.pwritev([data[:keep]], position)
            self._state.pending.append(("w", position, data[:keep]))
            if self._fs.space_left_bytes is not None:
                self._fs.space_left_bytes -= growth
        if err is not None:
            raise err

    def pwrite(self, data, position: int) -> None:
        self.pwritev([data], position)

    def pread(self, size: int, position: int) -> bytes:
        self._check("read")
        return self._inner.pread(size, position)

    def pread_into(self, buffer, position: int) -> int:
        self._check("read")
        return self._inner.pread_into(buffer, position)

    def truncate(self, size: int) -> None:
        self._check("truncate")
        old = self._inner.size()
        self._inner.truncate(size)
        self._state.pending.append(("t", size))
        if self._fs.space_left_bytes is not None:
            self._fs.space_left_bytes += old - size

    def allocate(self, size: int) -> None:
        """The real allocation, recorded as an extension with zeros (what a crash may keep of it);
        a full disk (``space_left_bytes``) and write faults refuse it before anything changes."""
        self._check("write")
        growth = max(0, size - self._inner.size())
        space = self._fs.space_left_bytes
        if space is not None and growth > space:
            raise OSError(errno_codes.ENOSPC, f"{self.path}: no space left on device (injected)")
        if growth:
            self._inner.allocate(size)
            self._state.pending.append(("t", size))
            if space is not None:
                self._fs.space_left_bytes -= growth

    def sync(self) -> None:
        self._check("sync")
        self._inner.sync()
        for op in self._state.pending:
            self._state.apply(op, self._state.durable)
        self._state.pending.clear()

    def map(self, length: int, *, writable: bool = False, populate: bool = False) -> mmap.mmap:
        self._check("map")
        if writable:
            self._state.mapped_writable = True
        return self._inner.map(length, writable=writable, populate=populate)

    def close(self) -> None:
        self._inner.close()


class FaultFileSystem:
    """A RealFileSystem that fails on request and simulates crashes (see the module docstring).

    ``space_left_bytes``: when set, writes that would grow files past it fail with ENOSPC after
    writing what fits (a torn write), as a full disk does; shrinking files gives space back.
    """

    def __init__(self, *, space_left_bytes: int | None = None):
        self._real = RealFileSystem()
        self._files: dict[str, _FileState] = {}
        self._faults: list[_Fault] = []
        self.space_left_bytes = space_left_bytes
        self.generation = 0
        self.crashes = 0

    # -- fault control ------------------------------------------------------------------------

    def fail(self, op: str, *, errno: int = errno_codes.EIO, times: int = 1, path_contains: str | None = None,
             keep_bytes: int | None = None) -> None:
        """Make the next ``times`` operations ``op`` (on paths containing ``path_contains``) fail.

        For ``op="write"``, ``keep_bytes`` bytes reach the file before the error (a torn write).
        """
        if op not in _FAULT_OPS:
            raise ValueError(f"unknown operation {op!r}; one of {_FAULT_OPS}")
        self._faults.append(_Fault(op, errno, times, path_contains, keep_bytes))

    def clear_faults(self) -> None:
        self._faults.clear()

    def _take_fault(self, op: str, path: str) -> _Fault | None:
        for fault in self._faults:
            if fault.op == op and (fault.path_contains is None or fault.path_contains in path):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _maybe_fail(self, op: str, path: str) -> None:
        fault = self._take_fault(op, path)
        if fault is not None:
            raise OSError(fault.errno, f"{path}: injected {op} failure")

    def unsynced_bytes(self) -> int:
        """Bytes written and not yet fsynced, over every file (what a crash may lose)."""
        return sum(len(op[2]) for s in self._files.values() for op in s.pending if op[0] == "w")

    # -- the crash ------------------------------------------------------------------------------

    def crash(self, rng: random.Random) -> None:
        """Simulate power loss: every file becomes what survived; every open handle dies.

        Each file keeps its durable bytes plus the first k of its unsynced operations (k drawn
        from ``rng``), the k+1-th write possibly surviving in part: cut short, or at full length
        with its tail zeroed or replaced by garbage. Files are rewritten as new inodes, so memory
        maps taken before the crash keep the old bytes instead of faulting.
        """
        self.generation += 1
        self.crashes += 1
        for path, state in list(self._files.items()):
            if not self._real.exists(path):
                del self._files[path]
                continue
            if state.mapped_writable:
                survived = self._survived_index(path, rng)
            else:
                survived = self._survived_data(state, rng)
            tmp = path + ".crash"
            with open(tmp, "wb") as f:
                f.write(survived)
            os.replace(tmp, path)
            self._files[path] = _FileState(bytearray(survived))

    def _survived_data(self, state: _FileState, rng: random.Random) -> bytes:
        content = bytearray(state.durable)
        ops = state.pending
        k = rng.randint(0, len(ops))
        for op in ops[:k]:
            state.apply(op, content)
        if k < len(ops) and ops[k][0] == "w" and rng.random() < 0.5:
            _, pos, data = ops[k]
            cut = rng.randint(0, len(data))
            style = rng.choice(("short", "zeros", "garbage"))
            torn = data[:cut]
            if style == "zeros":
                torn += bytes(len(data) - cut)
            elif style == "garbage":
                torn += rng.randbytes(len(data) - cut)
            state.apply(("w", pos, torn), content)
        return bytes(content)

    def _survived_index(self, path: str, rng: random.Random) -> bytes:
        current = self._real.read_bytes(path)
        choice = rng.choice(("as-is", "zeros", "garbage"))
        if choice == "zeros":
            return bytes(len(current))
        if choice == "garbage":
            return rng.randbytes(len(current))
        return current

    # -- FileSystem -----------------------------------------------------------------------------

    def open(self, path: str, *, create: bool = False) -> FaultFileHandle:
        self._maybe_fail("open", path)
        existed = self._real.exists(path)
        inner = self._real.open(path, create=create)
        state = self._files.get(path)
        if state is None:
            state = _FileState(bytearray(self._real.read_bytes(path)) if existed else bytearray())
            self._files[path] = state
        return FaultFileHandle(self, path, inner, state)

    def exists(self, path: str) -> bool:
        return self._real.exists(path)

    def listdir(self, path: str) -> list[str]:
        return self._real.listdir(path)

    def makedirs(self, path: str) -> None:
        self._real.makedirs(path)

    def remove(self, path: str) -> None:
        self._maybe_fail("remove", path)
        self._real.remove(path)
        self._files.pop(path, None)

    def rename(self, src: str, dst: str) -> None:
        self._maybe_fail("rename", src)
        self._real.rename(src, dst)
        state = self._files.pop(src, None)
        if state is not None:
            self._files[dst] = state
        else:
            self._files.pop(dst, None)

    def sync_dir(self, path: str) -> None:
        self._maybe_fail("sync_dir", path)
        self._real.sync_dir(path)

    def read_bytes(self, path: str) -> bytes:
        self._maybe_fail("open", path)
        return self._real.read_bytes(path)
