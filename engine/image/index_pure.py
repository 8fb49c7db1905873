"""Pure-Python twin of kraftlog._image (the open-addressing hash index, and the row gather /
scatter of chunked tables). Same layout and results; see csrc/_image.pyx for the slot arrays, the
probing rule and the chunk layout."""

from __future__ import annotations

import uuid

import numpy as np

from kraftlog.engine.image.configs import TOPIC_RESOURCE_TYPE, edited_config

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
PARTITION_CHANGE_RECORD = 5  # apiKey
_WRITTEN_SCALARS = 4  # partition_epoch, leader_epoch, leader, leader_recovery_state; then the six lists
_LISTS = 6


def apply_changes(partition_chunks: list, topic_chunks: list, written_names: tuple, owned, own,
                  slot_hash, slot_row, record_index, topic_id, partition_id, leader, recovery, lists: tuple,
                  list_counts: tuple, extras, api_keys, kind_rows, order, start: int, written,
                  shift: int) -> tuple[int, int]:
    """The native apply_changes, record by record in Python: the same stops, the same writes, the
    same own() calls (one per column and chunk first written)."""
    nrows = len(record_index)
    if len(written_names) != _WRITTEN_SCALARS + _LISTS or len(lists) != _LISTS or len(list_counts) != _LISTS:
        raise ValueError("ten written columns, six lists")
    if not all(len(a) == nrows for a in (topic_id, partition_id, leader, recovery, extras, *lists, *list_counts)):
        raise ValueError("every change column must have one value per row")
    if not 0 <= start <= len(order):
        raise ValueError(f"start {start} is outside the {len(order)} records")
    if len(written) < len(order) - start or len(api_keys) != len(kind_rows):
        raise ValueError("written must hold a row per record from start; api_keys and kind_rows go together")
    mask = (1 << shift) - 1
    owned = [owned(name) for name in written_names]
    # by column: the chunk arrays as they are now (the writer's own where it owns one), and owned chunks
    current = {name: [o if o is not None else d[name] for o, d in
                      zip(list(own_list) + [None] * (len(partition_chunks) - len(own_list)), partition_chunks,
                          strict=True)]
               for name, own_list in zip(written_names, owned, strict=True)}
    owned_chunks = {name: {k for k, o in enumerate(own_list) if o is not None}
                    for name, own_list in zip(written_names, owned, strict=True)}
    pe, le, ld, rc = written_names[:_WRITTEN_SCALARS]
    list_names = written_names[_WRITTEN_SCALARS:]
    rp = list_names[0]  # replicas

    def at(name: str, prow: int) -> np.ndarray:
        return current[name][prow >> shift]

    def take(name: str, prow: int, width: int) -> None:
        k = prow >> shift
        if k not in owned_chunks[name] or (width and current[name][k].shape[1] < width):
            current[name][k] = own(name, k, width)
            owned_chunks[name].add(k)

    count, pos = 0, start
    while pos < len(order):
        i = int(order[pos])
        if not 0 <= i < len(api_keys) or int(api_keys[i]) != PARTITION_CHANGE_RECORD:
            break
        row = int(kind_rows[i])
        if not 0 <= row < nrows or int(record_index[row]) != i or extras[row]:
            break
        prow = _partition_row(topic_chunks, partition_chunks, slot_hash, slot_row, int(topic_id[row, 0]),
                              int(topic_id[row, 1]), int(partition_id[row]), shift)
        counts = [int(c[row]) for c in list_counts]
        if prow < 0 or any(n > values.shape[1] for n, values in zip(counts, lists, strict=True)):
            break
        local = prow & mask
        if counts[0] >= 0:
            directories = partition_chunks[prow >> shift]["directories"][local]
            old = at(rp, prow)[local]
            if (directories >= 0).any() or not np.isin(lists[0][row, :counts[0]], old[old >= 0]).all():
                break  # directories would change: the caller's replay carries them
        # an empty list onto an empty row changes nothing (and leaves a sparse chunk shared)
        changed = [n > 0 or (n == 0 and at(name, prow)[local, 0] >= 0) for name, n in zip(list_names, counts,
                                                                                             strict=True)]
        take(pe, prow, 0)
        if leader[row] != NO_LEADER_CHANGE:
            take(le, prow, 0)
            take(ld, prow, 0)
        if recovery[row] != -1:
            take(rc, prow, 0)
        for name, n, change in zip(list_names, counts, changed, strict=True):
            if change:
                take(name, prow, n)
        at(pe, prow)[local] += 1
        if leader[row] != NO_LEADER_CHANGE:
            at(le, prow)[local] += 1
            at(ld, prow)[local] = leader[row]
        if recovery[row] != -1:
            at(rc, prow)[local] = recovery[row]
        for name, values, n, change in zip(list_names, lists, counts, changed, strict=True):
            if change:
                at(name, prow)[local] = PAD
                at(name, prow)[local, :n] = values[row, :n]
        written[count] = prow
        count += 1
        pos += 1
    return pos, count


def _partition_row(topic_chunks: list, partition_chunks: list, slot_hash, slot_row, hi: int, lo: int,
                   partition_id: int, shift: int) -> int:
    """The partition row of (topic id, partition id), or -1 (an unknown topic or partition, a hole)."""
    mask = (1 << shift) - 1
    for trow in candidates(slot_hash, slot_row, _uuid_hash(hi, lo)):
        t = topic_chunks[trow >> shift]
        local = trow & mask
        if int(t["id_hi"][local]) != hi or int(t["id_lo"][local]) != lo:
            continue
        first, count = int(t["first_row"][local]), int(t["partition_count"][local])
        if not 0 <= partition_id < count:
            return -1
        prow = first + partition_id
        k = prow >> shift
        if k >= len(partition_chunks) or int(partition_chunks[k]["partition_id"][prow & mask]) < 0:
            return -1
        return prow
    return -1


TOPIC_RECORD, PARTITION_RECORD, CONFIG_RECORD, REMOVE_TOPIC_RECORD = 2, 3, 4, 9  # apiKeys
NO_LEADER = -1
# target, by position (csrc/_image.pyx, G_*)
(_P_CHUNKS, _T_CHUNKS, _P_OWNED, _P_OWN, _T_OWNED, _T_OWN, _P_ROOM, _T_ROOM, _P_APPENDED, _T_APPENDED, _P_ROWS,
 _T_ROWS, _NAMES, _NAME_INDEX, _ID_INDEX, _BASE_TOPIC_ROWS, _DELETED, _OFFSETS, _BULK_MIN_RECORDS) = range(19)
_TARGET = 19
_HAND_BACK = None


def apply_topic_stream(target: tuple, change_args: tuple, config_args: tuple, remove_args: tuple, topic_args: tuple,
                       partition_args: tuple, configs, api_keys, kind_rows, order, start: int, written,
                       shift: int) -> tuple[int, int, int, int, int, bool]:
    """The native apply_topic_stream, record by record in Python: the same records applied in the
    same order, the same stops, the same writes, own() and room() calls."""
    if not 0 <= start <= len(order):
        raise ValueError(f"start {start} is outside the {len(order)} records")
    if len(written) < len(order) - start or len(api_keys) != len(kind_rows):
        raise ValueError("written must hold a row per record from start; api_keys and kind_rows go together")
    if (len(target), len(change_args), len(config_args), len(remove_args), len(topic_args),
            len(partition_args)) != (_TARGET, 9, 8, 3, 5, 13):
        raise ValueError("19 target entries; 9 change, 8 config, 3 remove, 5 topic, 13 partition arguments")
    g_rec, g_type, g_null, g_extras, g_blob, g_rname, g_name, g_value = config_args
    r_rec, r_tid, r_extras = remove_args
    if not (len(g_type) == len(g_null) == len(g_extras) == len(g_rec)
            and len(g_rname) == len(g_name) == len(g_value) == len(g_rec) + 1 and len(r_tid) == len(r_extras) == len(r_rec)
            and len(topic_args[1]) == len(topic_args[2]) == len(topic_args[0]) == len(topic_args[4]) - 1
            and all(len(a) == len(partition_args[0]) for a in partition_args)):
        raise ValueError("every config / remove / topic / partition column must have one value per row")
    offsets = target[_OFFSETS]
    if offsets is not None and len(offsets) != len(api_keys):
        raise ValueError("one offset per record")
    s = _Pass(target, shift)
    pos, count = start, 0
    try:
        while pos < len(order):
            i = int(order[pos])
            if not 0 <= i < len(api_keys):
                break
            kind, row = int(api_keys[i]), int(kind_rows[i])
            if kind == PARTITION_CHANGE_RECORD:
                ids = target[_ID_INDEX]
                stop, applied = apply_changes(target[_P_CHUNKS](), target[_T_CHUNKS](), change_args[0], target[_P_OWNED],
                                              target[_P_OWN], ids.slot_hash, ids.slot_row, *change_args[1:], api_keys,
                                              kind_rows, order, pos, written[count:], shift)
                count += applied
                if stop == pos:
                    break
                s.p_arrays = None  # it may have widened a list column of the last chunk (a new array)
                pos = stop
                continue
            if kind == CONFIG_RECORD and _whole_row(g_rec, g_extras, row, i):
                value = None if g_null[row] else _blob_text(g_blob, g_value, row)
                key = (int(g_type[row]), _blob_text(g_blob, g_rname, row))
                s.configs_changed |= _put_config(configs, key, _blob_text(g_blob, g_name, row), value)
            elif kind == REMOVE_TOPIC_RECORD and _whole_row(r_rec, r_extras, row, i):
                trow = s.find(int(r_tid[row, 0]), int(r_tid[row, 1]))
                if trow < 0:
                    break  # an unknown topic: the loader's replay reports it
                s.drop_topic(configs, trow, int(r_tid[row, 0]), int(r_tid[row, 1]))
            elif kind == TOPIC_RECORD and offsets is not None and _whole_row(topic_args[0], topic_args[2], row, i):
                if _creation_end(api_keys, order, pos) - pos >= target[_BULK_MIN_RECORDS]:
                    break  # the loader's vectorised step
                if s.create_topic(topic_args, row, int(offsets[i])) is _HAND_BACK:
                    break
            elif kind == PARTITION_RECORD and offsets is not None \
                    and _whole_row(partition_args[0], partition_args[12], row, i):
                if s.create_partition(partition_args, row, int(offsets[i])) is _HAND_BACK:
                    break
            else:
                break
            pos += 1
    finally:
        s.finish()
    return pos, count, s.removed, s.created, s.grown, s.configs_changed


def _creation_end(api_keys, order, pos: int) -> int:
    """The end of the run of TopicRecords and PartitionRecords from ``pos``."""
    while pos < len(order) and 0 <= int(order[pos]) < len(api_keys) \
            and int(api_keys[int(order[pos])]) in (TOPIC_RECORD, PARTITION_RECORD):
        pos += 1
    return pos


class _Pass:
    """One apply_topic_stream call's state (the native _Pass): rows appended so far, the last
    partitions chunk's arrays while room was made for it."""

    def __init__(self, target: tuple, shift: int):
        self.target, self.shift, self.mask = target, shift, (1 << shift) - 1
        self.t_rows, self.p_rows = target[_T_ROWS], target[_P_ROWS]
        self.t_added = self.p_added = 0
        self.t_room, self.p_arrays = False, None
        self.topic_row_owned = None
        self.removed = self.created = self.grown = 0
        self.configs_changed = False

    def topic_array(self, name: str, trow: int, write: bool) -> np.ndarray:
        """The array of topic row ``trow``'s chunk in ``name`` (owned first when written)."""
        k = trow >> self.shift
        owned = self.target[_T_OWNED](name)
        array = owned[k] if k < len(owned) else None
        if array is None and write:
            array = self.target[_T_OWN](name, k, 0)
        return self.target[_T_CHUNKS]()[k][name] if array is None else array

    def find(self, hi: int, lo: int) -> int:
        ids = self.target[_ID_INDEX]
        for trow in candidates(ids.slot_hash, ids.slot_row, _uuid_hash(hi, lo)):
            if int(self.topic_array("id_hi", trow, False)[trow & self.mask]) == hi \
                    and int(self.topic_array("id_lo", trow, False)[trow & self.mask]) == lo:
                return trow
        return -1

    def find_name(self, name: str, h: int) -> int:
        index, names = self.target[_NAME_INDEX], self.target[_NAMES]
        for trow in candidates(index.slot_hash, index.slot_row, h):
            if names[trow >> self.shift][trow & self.mask] == name:
                return trow
        return -1

    def set_topic(self, trow: int, **values) -> None:
        for name, value in values.items():
            self.topic_array(name, trow, True)[trow & self.mask] = value

    def drop_topic(self, configs, trow: int, hi: int, lo: int) -> None:
        local = trow & self.mask
        first, pcount = (int(self.topic_array(n, trow, False)[local]) for n in ("first_row", "partition_count"))
        if self.topic_row_owned is None:
            self.topic_row_owned = self.target[_P_OWNED]("topic_row")
        for r in range(first, first + pcount):
            k = r >> self.shift
            array = self.topic_row_owned[k] if k < len(self.topic_row_owned) else None
            if array is None:
                array = self.target[_P_OWN]("topic_row", k, 0)
            array[r & self.mask] = -1
        self.set_topic(trow, live=False)
        name = self.target[_NAMES][trow >> self.shift][local]
        names, ids = self.target[_NAME_INDEX], self.target[_ID_INDEX]
        if not remove(names.slot_hash, names.slot_row, hash_name(name.encode()), trow) \
                or not remove(ids.slot_hash, ids.slot_row, _uuid_hash(hi, lo), trow):
            raise AssertionError(f"topic row {trow} is not in its index")
        if trow < self.target[_BASE_TOPIC_ROWS]:  # else created and deleted in this delta: no trace
            self.target[_DELETED][uuid.UUID(int=((hi & _M64) << 64) | (lo & _M64))] = name
        key = (TOPIC_RESOURCE_TYPE, name)
        if key in (configs.base if configs.items is None else configs.items):
            del _writable_configs(configs)[key]
            self.configs_changed = True
        self.removed += 1

    def create_topic(self, topic_args: tuple, row: int, offset: int):
        _, tid, _, blob, offsets = topic_args
        hi, lo = int(tid[row, 0]), int(tid[row, 1])
        name = _blob_text(blob, offsets, row)
        h = hash_name(name.encode())
        existing = self.find_name(name, h)
        if existing >= 0:
            return 0 if self.find(hi, lo) == existing else _HAND_BACK  # the same topic again / the scalar path raises
        if self.find(hi, lo) >= 0 or not _has_room(self.target[_NAME_INDEX]) or not _has_room(self.target[_ID_INDEX]):
            return _HAND_BACK
        if not self.t_room:
            self.t_rows, _ = self.target[_T_ROOM](self.t_added)
            self.t_added, self.t_room = 0, True
        trow = self.t_rows
        self.set_topic(trow, id_hi=hi, id_lo=lo, first_row=-1, partition_count=0, topic_epoch=offset, live=True)
        names, k = self.target[_NAMES], trow >> self.shift
        if k == len(names):
            names.append((name,))
        else:
            names[k] = names[k] + (name,)
        _insert_slot(self.target[_NAME_INDEX], h, trow)
        _insert_slot(self.target[_ID_INDEX], _uuid_hash(hi, lo), trow)
        self.t_rows += 1
        self.t_added += 1
        self.t_room = (self.t_rows & self.mask) != 0  # a full chunk: room again next time
        self.created += 1
        return 1

    def create_partition(self, partition_args: tuple, row: int, offset: int):
        (_, tid, pids, leader, leader_epoch, partition_epoch, recovery, replicas, replica_count, isr, isr_count,
         directory_count, _) = partition_args
        pid, nrep, nisr = int(pids[row]), int(replica_count[row]), int(isr_count[row])
        if pid < 0 or directory_count[row] != 0 or not 0 <= nrep <= replicas.shape[1] or not 0 <= nisr <= isr.shape[1]:
            return _HAND_BACK
        trow = self.find(int(tid[row, 0]), int(tid[row, 1]))
        if trow < 0:
            return _HAND_BACK  # an unknown topic: the scalar path raises
        first, count = (int(self.topic_array(n, trow, False)[trow & self.mask]) for n in ("first_row", "partition_count"))
        if pid < count or not (count == 0 or first + count == self.p_rows):
            return _HAND_BACK  # a row replaced or a hole filled; or the topic's rows would move
        grow = pid + 1 - count
        if (self.p_rows & self.mask) + grow > self.mask + 1:
            return _HAND_BACK  # the rows would cross into another chunk
        if self.p_arrays is None:
            self.p_rows, self.p_arrays = self.target[_P_ROOM](self.p_added)
            self.p_added = 0
        start = self.p_rows
        local = np.arange(start, start + grow) & self.mask
        a = self.p_arrays
        for name, value in (("topic_row", trow), ("partition_id", -1), ("leader", NO_LEADER), ("leader_epoch", 0),
                            ("partition_epoch", 0), ("leader_recovery_state", 0), ("replicas", PAD), ("isr", PAD)):
            a[name][local] = value
        at = local[-1]
        a["partition_id"][at], a["leader"][at] = pid, leader[row]
        a["leader_epoch"][at], a["partition_epoch"][at] = leader_epoch[row], partition_epoch[row]
        a["leader_recovery_state"][at] = recovery[row]
        for name, values, n in (("replicas", replicas, nrep), ("isr", isr, nisr)):
            if a[name].shape[1] < n:
                a[name] = self.target[_P_OWN](name, start >> self.shift, n)  # the writer's chunk dict is ``a``
            a[name][at, :n] = values[row, :n]
        self.p_rows += grow
        self.p_added += grow
        if (self.p_rows & self.mask) == 0:
            self.p_arrays = None  # a full chunk: room again next time
        if count == 0:
            self.set_topic(trow, first_row=start)
        self.set_topic(trow, partition_count=pid + 1, topic_epoch=offset)  # a new partition (KIP-232)
        self.grown += 1
        return 1

    def finish(self) -> None:
        if self.t_added:
            self.target[_T_APPENDED](self.t_added)
        if self.p_added:
            self.target[_P_APPENDED](self.p_added)
        self.t_added = self.p_added = 0


def _has_room(index) -> bool:
    """HashIndex.insert grows the slots past half full; the pass leaves that to it."""
    return 2 * (index.used + 1) <= len(index.slot_row)


def _insert_slot(index, h: int, row: int) -> None:
    insert_many(index.slot_hash, index.slot_row, [h], [row])
    index.used += 1


def _whole_row(record_index, extras, row: int, i: int) -> bool:
    # kind_rows points into ``other`` for a version the columns do not decode: record_index tells
    return 0 <= row < len(record_index) and int(record_index[row]) == i and not extras[row]


def _blob_text(blob, offsets, row: int) -> str:
    lo, hi = int(offsets[row]), int(offsets[row + 1])
    if lo < 0 or hi < lo or hi > len(blob):
        raise ValueError(f"string {row}: offsets {lo}..{hi} run outside the blob")
    return bytes(blob[lo:hi]).decode()


def _writable_configs(configs) -> dict:
    return configs.writable() if configs.items is None else configs.items


def _put_config(configs, key: tuple, name: str, value: str | None) -> bool:
    """One ConfigRecord into MetadataDelta.configs (edited_config); True when the configs changed."""
    current = (configs.base if configs.items is None else configs.items).get(key)
    updated = edited_config(current, name, value)
    if updated is current:
        return False
    if updated is None:
        del _writable_configs(configs)[key]
    else:
        _writable_configs(configs)[key] = updated
    return True


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
