"""Pure-Python twin of kraftlog._image (the open-addressing hash index, and the row gather /
scatter of chunked tables). Same layout and results; see csrc/_image.pyx for the slot arrays, the
probing rule and the chunk layout."""

from __future__ import annotations

import numpy as np

IMPLEMENTATION = "pure"
EMPTY, TOMBSTONE = -1, -2
_M64 = (1 << 64) - 1


def _mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def hash_name(name) -> int:
    h = 0xCBF29CE484222325
    for b in bytes(name):
        h = ((h ^ b) * 0x100000001B3) & _M64
    return _mix64(h)


def hash_names(blob, offsets) -> np.ndarray:
    blob = bytes(blob)
    offsets = np.asarray(offsets, dtype=np.int64)
    n = max(len(offsets) - 1, 0)
    if n and (offsets[0] < 0 or offsets[n] > len(blob)):
        raise ValueError("name offsets run outside the blob")
    return np.array([hash_name(blob[offsets[i]: offsets[i + 1]]) for i in range(n)], dtype=np.uint64)


def _uuid_hash(hi: int, lo: int) -> int:
    return _mix64((hi & _M64) ^ _mix64(lo & _M64))


def hash_ids(hi, lo) -> np.ndarray:
    return np.array([_uuid_hash(int(a), int(b)) for a, b in zip(hi, lo, strict=True)], dtype=np.uint64)


def insert_many(slot_hash, slot_row, hashes, rows) -> None:
    size = len(slot_row)
    if size & (size - 1):
        raise ValueError("slot arrays must have a power-of-two size")
    mask = size - 1
    for h, row in zip(hashes, rows, strict=True):
        s, probes = int(h) & mask, 0
        while slot_row[s] >= 0:
            s = (s + 1) & mask
            probes += 1
            if probes >= size:
                raise MemoryError("hash index is full")
        slot_hash[s] = int(h) & 0xFFFFFFFF
        slot_row[s] = row


def candidates(slot_hash, slot_row, h: int) -> list[int]:
    size = len(slot_row)
    mask, s, probes, h32 = size - 1, int(h) & (size - 1), 0, int(h) & 0xFFFFFFFF
    found = []
    while slot_row[s] != EMPTY and probes < size:
        if slot_row[s] >= 0 and int(slot_hash[s]) == h32:
            found.append(int(slot_row[s]))
        s = (s + 1) & mask
        probes += 1
    return found


def remove(slot_hash, slot_row, h: int, row: int) -> bool:
    size = len(slot_row)
    mask, s, probes = size - 1, int(h) & (size - 1), 0
    while slot_row[s] != EMPTY and probes < size:
        if slot_row[s] == row:
            slot_row[s] = TOMBSTONE
            return True
        s = (s + 1) & mask
        probes += 1
    return False


def lookup_ids(slot_hash, slot_row, id_hi, id_lo, query_hi, query_lo) -> np.ndarray:
    out = np.full(len(query_hi), -1, dtype=np.int32)
    for i, (qh, ql) in enumerate(zip(query_hi, query_lo, strict=True)):
        h = _uuid_hash(int(qh), int(ql))
        for row in candidates(slot_hash, slot_row, h):
            if row < len(id_hi) and id_hi[row] == qh and id_lo[row] == ql:
                out[i] = row
                break
    return out


def first_candidates(slot_hash, slot_row, hashes) -> np.ndarray:
    out = np.full(len(hashes), -1, dtype=np.int32)
    for i, h in enumerate(hashes):
        found = candidates(slot_hash, slot_row, int(h))
        if found:
            out[i] = found[0]
    return out


def row_spec(scalars, lists) -> tuple:
    """Same shape as the native spec, holding the arrays themselves."""
    for a in scalars:
        if a.ndim != 1 or a.dtype.kind != "i":
            raise ValueError("scalar columns must be 1-D signed integers")
    for a in lists:
        if a.ndim != 2 or a.dtype.itemsize != 4:
            raise ValueError("list columns must be 2-D int32")
    return (tuple(scalars), tuple(lists), None)


def read_row(spec, local: int) -> tuple:
    scalars, lists, _ = spec
    out = [a.item(local) for a in scalars]
    for a in lists:
        out.append(() if a.strides[0] == 0 else tuple(v for v in a[local].tolist() if v >= 0))
    return tuple(out)


def index_spec(slot_hash, slot_row) -> tuple:
    if slot_hash.dtype.itemsize != 4 or slot_row.dtype.itemsize != 4 or len(slot_hash) != len(slot_row):
        raise ValueError("slot arrays must be uint32/int32 of one length")
    return (slot_hash, slot_row, len(slot_row), None)


def lookup_partition(ispec, name_chunks, name, topic_chunks, partition_chunks, partition_id, directory_ids,
                     make_spec):
    slot_hash, slot_row = ispec[0], ispec[1]
    row = next((r for r in candidates(slot_hash, slot_row, hash_name(name.encode()))
                if name_chunks[r >> 12][r & 4095] == name), None)
    if row is None:
        return None
    chunk = topic_chunks[row >> 12]
    t = read_row(chunk.spec or make_spec(chunk, 0), row & 4095)
    if not 0 <= partition_id < t[4]:
        return None
    prow = t[3] + partition_id
    chunk = partition_chunks[prow >> 12]
    v = read_row(chunk.spec or make_spec(chunk, 1), prow & 4095)
    if v[0] < 0 or v[1] < 0:
        return None
    directories = tuple(directory_ids[c] for c in v[12]) if v[12] else ()
    return ((t[0], t[1]), name, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], directories, t[2])


# ---- chunked tables ---------------------------------------------------------------------------------
PAD = -1


def _by_chunk(arrays: list, rows: np.ndarray, shift: int):
    """(array, positions in rows, local rows) per chunk the rows lie in; IndexError as the native."""
    rows = np.asarray(rows, dtype=np.int64)
    chunk_ids = rows >> shift
    local = rows & ((1 << shift) - 1)
    bad = (rows < 0) | (chunk_ids >= len(arrays))
    for k in np.unique(chunk_ids[~bad]).tolist():
        if arrays[k] is None:
            bad |= chunk_ids == k
        else:
            bad |= (chunk_ids == k) & (local >= arrays[k].shape[0])
    first_bad = int(np.argmax(bad)) if bad.any() else len(rows)
    for k in np.unique(chunk_ids[:first_bad]).tolist():
        positions = np.flatnonzero(chunk_ids[:first_bad] == k)
        yield arrays[k], positions, local[positions]
    if first_bad < len(rows):
        raise IndexError(f"row {rows[first_bad]} is not in the given chunks")


def _check_dtype(arrays: list, dtype) -> None:
    for k, a in enumerate(arrays):
        if a is not None and (a.dtype != dtype or a.ndim not in (1, 2)):
            raise ValueError(f"chunk {k}: a {a.ndim}-D {a.dtype} array where {dtype} was expected")


def gather_rows(arrays: list, rows: np.ndarray, out: np.ndarray, shift: int) -> None:
    if not out.flags.c_contiguous or out.ndim not in (1, 2) or out.shape[0] != len(rows):
        raise ValueError("out must be C-contiguous, 1-D or 2-D, one row per row asked")
    _check_dtype(arrays, out.dtype)
    for array, positions, local in _by_chunk(arrays, rows, shift):
        if array.ndim != out.ndim:
            raise IndexError(f"row {int(np.asarray(rows)[positions[0]])} is not in the given chunks (or its chunk's "
                             f"array is not {out.ndim}-D)")
        if out.ndim == 1:
            out[positions] = array[local]
            continue
        take = min(array.shape[1], out.shape[1])
        out[positions, :take] = array[local, :take]
        out[positions, take:] = PAD


def scatter_rows(arrays: list, rows: np.ndarray, values: np.ndarray, shift: int) -> None:
    if not values.flags.c_contiguous or values.ndim not in (1, 2) or values.shape[0] != len(rows):
        raise ValueError("values must be C-contiguous, 1-D or 2-D, one row per row written")
    _check_dtype(arrays, values.dtype)
    for k, a in enumerate(arrays):
        if a is not None and not a.flags.writeable:
            raise ValueError(f"chunk {k}: the array is read-only")
    for array, positions, local in _by_chunk(arrays, rows, shift):
        if values.ndim != array.ndim or (values.ndim == 2 and array.shape[1] < values.shape[1]):
            width = values.shape[1] if values.ndim == 2 else 0
            raise ValueError(f"row {int(np.asarray(rows)[positions[0]])}: its chunk's array is not {values.ndim}-D "
                             f"or cannot hold a row of width {width}")
        if values.ndim == 1:
            array[local] = values[positions]  # numpy: of repeated indexes the last assignment wins
            continue
        block = np.full((len(positions), array.shape[1]), PAD, dtype=array.dtype)
        block[:, : values.shape[1]] = values[positions]
        array[local] = block


NO_LEADER_CHANGE = -2


def apply_partition_changes(partition_epoch: list, leader_epoch: list, leader_col: list, recovery_col: list,
                            isr_col: list, replicas_col: list, rows: np.ndarray, leader: np.ndarray,
                            recovery: np.ndarray, isr: np.ndarray, isr_count: np.ndarray, replicas: np.ndarray,
                            replica_count: np.ndarray, shift: int) -> None:
    """The native apply_partition_changes, vectorised per column: counts with np.add.at, and for
    the other fields numpy's fancy assignment, where of repeated indexes the last (log order) wins."""
    rows = np.asarray(rows, dtype=np.int64)
    if not (len(leader) == len(recovery) == len(isr_count) == len(replica_count) == len(isr) == len(replicas)
            == len(rows)):
        raise ValueError("every change column must have one value per row")
    _check_dtype(partition_epoch + leader_epoch + leader_col + isr_col + replicas_col, np.dtype(np.int32))
    _check_dtype(recovery_col, np.dtype(np.int8))
    named = leader != NO_LEADER_CHANGE
    _count(partition_epoch, rows, shift)
    _count(leader_epoch, rows[named], shift)
    _last(leader_col, rows, named, leader, shift)
    _last(recovery_col, rows, recovery != -1, recovery, shift)
    _last(isr_col, rows, isr_count >= 0, isr, shift)
    _last(replicas_col, rows, replica_count >= 0, replicas, shift)


def _count(arrays: list, rows: np.ndarray, shift: int) -> None:
    for array, _, local in _by_chunk(arrays, rows, shift):
        np.add.at(array, local, 1)


def _last(arrays: list, rows: np.ndarray, mask: np.ndarray, values: np.ndarray, shift: int) -> None:
    picked = np.flatnonzero(mask)
    for array, positions, local in _by_chunk(arrays, rows[picked], shift):
        if values.ndim == 1:
            array[local] = values[picked[positions]]
            continue
        if array.ndim != 2 or array.shape[1] < values.shape[1]:
            raise IndexError(f"row {int(rows[picked[positions[0]]])} is not in the given (writable, wide enough) chunks")
        block = np.full((len(positions), array.shape[1]), PAD, dtype=array.dtype)
        block[:, : values.shape[1]] = values[picked[positions]]
        array[local] = block


def names_at(blob, offsets: np.ndarray, rows: np.ndarray) -> list[str]:
    """The native names_at: the names of ``rows`` (name r: blob[offsets[r]:offsets[r + 1]])."""
    bounds, data = offsets.tolist(), bytes(blob)
    out = []
    for r in rows.tolist():
        if not 0 <= r < len(bounds) - 1:
            raise IndexError(f"name {r} is not among the blob's {len(bounds) - 1}")
        lo, hi = bounds[r], bounds[r + 1]
        if lo < 0 or hi < lo or hi > len(data):
            raise ValueError(f"name {r}: offsets {lo}..{hi} run outside the blob")
        out.append(data[lo:hi].decode())
    return out
