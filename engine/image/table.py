"""Copy-on-write chunked column tables: the storage under the topics and partitions images.

A ChunkedTable is immutable. Rows live in chunks of CHUNK_ROWS rows; every chunk holds one numpy
array per column. A TableWriter starts from a table, copies a chunk the first time it writes to it,
appends new rows at the end, and ``freeze()`` returns a new table that shares every untouched chunk
with the old one. So an image of a million partitions is never copied whole by a delta: a change to
one partition copies one chunk (CHUNK_ROWS rows), not the table.

Invariants:
- rows are addressed by a global row id; row r lives in chunk r >> CHUNK_SHIFT at r & CHUNK_MASK;
- every chunk but the last holds exactly CHUNK_ROWS rows;
- arrays reachable from a frozen table are never written again (they are flagged read-only);
- a "list" column (replicas, ISR) is a 2-D int32 array padded with -1; its width may differ from
  chunk to chunk and grows when a longer list is written (broker ids are never negative);
- a "sparse" column (directories, ELR, adding/removing replicas: almost always default) is, in a
  chunk where no row holds a non-default value, a zero-stride broadcast of its fill: it costs no
  memory until the first write to that chunk materialises it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kraftlog.engine.image import index as native  # gather_rows / scatter_rows (kraftlog._image or its twin)

CHUNK_SHIFT = 12
CHUNK_ROWS = 1 << CHUNK_SHIFT
CHUNK_MASK = CHUNK_ROWS - 1
PAD = -1


@dataclass(frozen=True)
class Column:
    """A column's type: ``width`` None for scalars, a minimum width for -1 padded list columns."""

    name: str
    dtype: np.dtype
    width: int | None = None
    fill: int = 0  # the value of a row that was never written (PAD for list columns)
    sparse: bool = False

    def shape(self, rows: int, width: int | None = None) -> tuple[int, ...]:
        return (rows,) if self.width is None else (rows, max(width or self.width, 1))

    def default(self) -> int:
        return PAD if self.width is not None else self.fill

    def empty(self, rows: int, width: int | None = None) -> np.ndarray:
        """A column of ``rows`` default rows: shared and free for sparse columns, real otherwise."""
        if self.sparse:
            return np.broadcast_to(np.array(self.default(), dtype=self.dtype), self.shape(rows, width))
        return np.full(self.shape(rows, width), self.default(), dtype=self.dtype)


def is_shared_default(array: np.ndarray) -> bool:
    """True for the zero-stride default arrays of sparse columns (no memory, never written)."""
    return array.ndim > 0 and array.strides[0] == 0


def _freeze(array: np.ndarray) -> np.ndarray:
    if not is_shared_default(array):
        array.flags.writeable = False
    return array


def _freeze_view(array: np.ndarray, rows: int) -> np.ndarray:
    return _freeze(array[:rows] if rows < len(array) else array)


class Chunk:
    """One chunk: ``rows`` rows of every column (arrays may be views into a larger decoded array).

    ``spec`` caches a row-reader spec (see kraftlog._image.row_spec) for published chunks only:
    their arrays never change, so addresses taken once stay valid while the chunk lives."""

    __slots__ = ("arrays", "rows", "spec")

    def __init__(self, arrays: dict[str, np.ndarray], rows: int):
        self.arrays = arrays
        self.rows = rows
        self.spec = None



class ChunkedTable:
    """An immutable column table in copy-on-write chunks."""

    __slots__ = ("columns", "chunks", "rows")

    def __init__(self, columns: Sequence[Column], chunks: tuple[Chunk, ...] = (), rows: int = 0):
        self.columns = {c.name: c for c in columns}
        self.chunks = chunks
        self.rows = rows

    @classmethod
    def from_arrays(cls, columns: Sequence[Column], arrays: Mapping[str, np.ndarray]) -> ChunkedTable:
        """Adopt whole columns (e.g. straight from the decoder) without copying: chunks are views."""
        specs = {c.name: c for c in columns}
        lengths = {len(a) for a in arrays.values()}
        missing = [n for n, c in specs.items() if n not in arrays and not c.sparse]
        if len(lengths) != 1 or missing or set(arrays) - set(specs):
            raise ValueError(f"from_arrays needs every non-sparse column ({missing} missing), all of one length")
        (rows,) = lengths
        chunks = []
        for start in range(0, rows, CHUNK_ROWS):
            stop = min(start + CHUNK_ROWS, rows)
            chunk = {n: _freeze(a[start:stop]) for n, a in arrays.items()}
            for name, spec in specs.items():
                if name not in chunk:
                    chunk[name] = spec.empty(stop - start)
            chunks.append(Chunk(chunk, stop - start))
        return cls(columns, tuple(chunks), rows)

    def chunk_of(self, row: int) -> tuple[Chunk, int]:
        if not 0 <= row < self.rows:
            raise IndexError(f"row {row} out of range (0..{self.rows - 1})")
        return self.chunks[row >> CHUNK_SHIFT], row & CHUNK_MASK

    def get(self, row: int, name: str):
        chunk, local = self.chunk_of(row)
        return chunk.arrays[name][local]

    def get_list(self, row: int, name: str) -> tuple[int, ...]:
        chunk, local = self.chunk_of(row)
        values = chunk.arrays[name][local]
        return tuple(int(v) for v in values if v != PAD)

    def column(self, name: str) -> np.ndarray:
        """The whole column as one array (a copy); list columns are padded to the widest chunk."""
        parts = [c.arrays[name][: c.rows] for c in self.chunks]
        if not parts:
            spec = self.columns[name]
            return spec.empty(0)
        if parts[0].ndim == 2:
            width = max(p.shape[1] for p in parts)
            parts = [_pad_to(p, width) for p in parts]
        return np.concatenate(parts)

    def gather(self, rows: np.ndarray, name: str) -> np.ndarray:
        """Values of column ``name`` at ``rows`` (any order)."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        spec = self.columns[name]
        arrays = [c.arrays[name] for c in self.chunks]
        if spec.width is None:
            out = np.empty(len(rows), dtype=spec.dtype)
        else:
            out = np.empty((len(rows), max((a.shape[1] for a in arrays), default=1)), dtype=spec.dtype)
        if len(rows):
            native.gather_rows(arrays, rows, out, CHUNK_SHIFT)  # one call, every chunk
        return out

    def writer(self) -> TableWriter:
        return TableWriter(self)

    def nbytes(self, seen: set[int] | None = None) -> int:
        """Bytes held by this table's arrays; arrays in ``seen`` (by id of their base) are not counted."""
        total = 0
        for chunk in self.chunks:
            for array in chunk.arrays.values():
                if is_shared_default(array):
                    continue
                base = array.base if array.base is not None else array
                key = id(base)
                if seen is not None:
                    if key in seen:
                        continue
                    seen.add(key)
                total += base.nbytes if seen is not None else array.nbytes
        return total


def _pad_to(array: np.ndarray, width: int) -> np.ndarray:
    if array.shape[1] == width:
        return array
    out = np.full((array.shape[0], width), PAD, dtype=array.dtype)
    out[:, : array.shape[1]] = array
    return out


class TableWriter:
    """Mutable view of a table: copy on first write, append rows, freeze into a new table.

    Copy-on-write is per chunk *and column*: the first write to a chunk makes a shallow copy (its
    arrays still shared), and the first write to one of its columns copies that column only. A
    delta that changes leaders and ISRs of partitions spread over every chunk copies those
    columns, not whole chunks. Writes to the same row apply in call order (the last one wins).
    """

    def __init__(self, base: ChunkedTable):
        self.base = base
        self.columns = base.columns
        self._chunks = list(base.chunks)
        # chunk index -> names of the columns this writer owns there (safe to write in place)
        self._owned: dict[int, set[str]] = {}
        # column name -> (the arrays _column last returned for it, by chunk (None: not owned yet),
        # their widths (-1: not owned, 0: 1-D)): set_many's chunk loop runs in Python only for
        # chunks it has not written before, not ~250 times per call on a 1M-row table
        self._writable: dict[str, tuple[list, np.ndarray]] = {}
        self.rows = base.rows

    @property
    def touched_chunks(self) -> int:
        return len(self._owned)

    def _own(self, chunk_index: int) -> Chunk:
        if chunk_index not in self._owned:
            old = self._chunks[chunk_index]
            self._chunks[chunk_index] = Chunk(dict(old.arrays), old.rows)
            self._owned[chunk_index] = set()
        return self._chunks[chunk_index]

    def _column(self, chunk_index: int, name: str, width: int = 0) -> np.ndarray:
        """The writable array of ``name`` in chunk ``chunk_index`` (copied on first write, with room
        for a whole chunk), at least ``width`` wide for list columns."""
        chunk = self._own(chunk_index)
        owned = self._owned[chunk_index]
        array = chunk.arrays[name]
        if name not in owned:
            grown = np.empty((CHUNK_ROWS, *array.shape[1:]), dtype=array.dtype)
            grown[: chunk.rows] = array[: chunk.rows]
            grown[chunk.rows:] = PAD if array.ndim == 2 else self.columns[name].default()
            array = chunk.arrays[name] = grown
            owned.add(name)
        if array.ndim == 2 and array.shape[1] < width:
            array = chunk.arrays[name] = _pad_to(array, width)
        cached = self._writable.get(name)
        if cached is not None and chunk_index < len(cached[0]):
            cached[0][chunk_index] = array
            cached[1][chunk_index] = array.shape[1] if array.ndim == 2 else 0
        return array

    def _writable_arrays(self, name: str, chunk_indexes: np.ndarray, width: int) -> list:
        """The arrays of ``name`` by chunk for scatter_rows: owned (and at least ``width`` wide)
        in every chunk of ``chunk_indexes``, None in chunks never written."""
        cached = self._writable.get(name)
        if cached is None:
            cached = self._writable[name] = ([], np.empty(0, np.int64))
        if len(cached[0]) < len(self._chunks):  # chunks new to the cache: owned or not, as _owned says
            added = [self._chunks[k].arrays[name] if name in self._owned.get(k, ()) else None
                     for k in range(len(cached[0]), len(self._chunks))]
            widths = [-1 if a is None else (a.shape[1] if a.ndim == 2 else 0) for a in added]
            cached = self._writable[name] = (cached[0] + added, np.append(cached[1], widths).astype(np.int64))
        arrays, widths = cached
        for chunk_index in chunk_indexes[widths[chunk_indexes] < width].tolist():
            self._column(chunk_index, name, width)
        return arrays

    def get(self, row: int, name: str):
        return self._chunks[row >> CHUNK_SHIFT].arrays[name][row & CHUNK_MASK]

    def get_list(self, row: int, name: str) -> tuple[int, ...]:
        values = self._chunks[row >> CHUNK_SHIFT].arrays[name][row & CHUNK_MASK]
        return tuple(int(v) for v in values if v != PAD)

    def set(self, row: int, name: str, value) -> None:
        self._column(row >> CHUNK_SHIFT, name)[row & CHUNK_MASK] = value

    def set_list(self, row: int, name: str, values: Sequence[int]) -> None:
        array = self._column(row >> CHUNK_SHIFT, name, len(values))
        local = row & CHUNK_MASK
        array[local] = PAD
        array[local, : len(values)] = values

    def set_many(self, rows: np.ndarray, name: str, values: np.ndarray) -> None:
        """Vectorised set; for duplicate rows the last occurrence in ``rows`` wins."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        if not len(rows):
            return
        values = np.ascontiguousarray(values, dtype=self.columns[name].dtype)
        width = values.shape[1] if values.ndim == 2 else 0
        # the chunks written, owned (copied on first write) first; then one call writes every row
        native.scatter_rows(self.writable_arrays(name, rows, width), rows, values, CHUNK_SHIFT)

    def writable_arrays(self, name: str, rows: np.ndarray, width: int = 0) -> list:
        """The arrays of column ``name`` by chunk for a native writer: owned (copied on first write,
        at least ``width`` wide) in every chunk ``rows`` (int64) lie in, None in chunks never written."""
        if not len(rows):
            return self._writable_arrays(name, np.empty(0, np.int64), width)
        return self._writable_arrays(name, np.flatnonzero(np.bincount(rows >> CHUNK_SHIFT)), width)

    def owned_arrays(self, name: str) -> list:
        """The arrays of column ``name`` this writer owns (writable in place), by chunk, None in
        the others. The list is kept current by later writes until the next append or freeze."""
        return self._writable_arrays(name, np.empty(0, np.int64), 0)

    def own_column(self, name: str, chunk_index: int, width: int = 0) -> np.ndarray:
        """The writable array of ``name`` in chunk ``chunk_index`` (copied on first write, widened
        to ``width`` for a list column): a native writer's callback for a chunk first touched."""
        return self._column(chunk_index, name, width)

    def chunk_arrays(self) -> list[dict[str, np.ndarray]]:
        """Each chunk's column arrays (for a native pass; written only through own_column)."""
        return [chunk.arrays for chunk in self._chunks]

    def append(self, arrays: Mapping[str, np.ndarray]) -> int:
        """Append rows given whole columns (missing columns get their fill); returns the first row id."""
        count = len(next(iter(arrays.values()))) if arrays else 0
        first = self.rows
        done = 0
        while done < count:
            if (not self._chunks or self._chunks[-1].rows == CHUNK_ROWS) and count - done >= CHUNK_ROWS:
                self._chunks.append(self._adopt(arrays, done))  # whole chunk: a view, no copy
                done += CHUNK_ROWS
                continue
            index = self._last_chunk_with_room()
            chunk = self._chunks[index]
            take = min(CHUNK_ROWS - chunk.rows, count - done)
            lo, hi = chunk.rows, chunk.rows + take
            for spec in self.columns.values():
                if spec.name not in arrays:
                    if not is_shared_default(chunk.arrays[spec.name]):
                        self._column(index, spec.name)[lo:hi] = spec.default()
                    continue
                values = np.asarray(arrays[spec.name][done : done + take])
                if values.ndim == 2:
                    array = self._column(index, spec.name, values.shape[1])
                    array[lo:hi] = PAD
                    array[lo:hi, : values.shape[1]] = values
                else:
                    self._column(index, spec.name)[lo:hi] = values
            chunk.rows = hi
            done += take
        self.rows += count
        return first

    def _last_chunk_with_room(self) -> int:
        """The index of the last chunk, owned, with room for another row (a new chunk when it is
        full); its shared sparse defaults cover the whole chunk (the rows appended next)."""
        if not self._chunks or self._chunks[-1].rows == CHUNK_ROWS:
            fresh = {c.name: c.empty(CHUNK_ROWS) for c in self.columns.values()}
            self._chunks.append(Chunk(fresh, 0))
            self._owned[len(self._chunks) - 1] = {n for n, a in fresh.items() if not is_shared_default(a)}
        index = len(self._chunks) - 1
        chunk = self._own(index)
        for name, array in chunk.arrays.items():
            if is_shared_default(array) and len(array) < CHUNK_ROWS:
                chunk.arrays[name] = np.broadcast_to(array[:1], (CHUNK_ROWS, *array.shape[1:]))
        return index

    def native_room(self, appended: int) -> tuple[int, dict[str, np.ndarray]]:
        """For a native appender (apply_topic_stream in csrc/_image.pyx): counts the ``appended``
        rows it wrote past the last chunk's rows, gives the last chunk room for one more row (a
        new chunk when it is full) with every column owned here, and returns (the next row, that
        chunk's arrays). Call it only when a row will be written: a new chunk must not stay empty.
        An owned array has room for a whole chunk and holds defaults past the chunk's rows
        (_column), so the appender writes only the values of its rows."""
        self.native_appended(appended)
        index = self._last_chunk_with_room()
        chunk = self._chunks[index]
        for name, array in chunk.arrays.items():
            if not is_shared_default(array):
                self._column(index, name)
        return self.rows, chunk.arrays

    def native_appended(self, count: int) -> None:
        """``count`` rows a native appender wrote past the last chunk's rows (after native_room)."""
        if count:
            self._chunks[-1].rows += count
            self.rows += count

    def _adopt(self, arrays: Mapping[str, np.ndarray], start: int) -> Chunk:
        """A full chunk made of views of the caller's arrays (read-only from now on; a later write
        copies it like any shared chunk)."""
        out = {}
        for spec in self.columns.values():
            values = arrays.get(spec.name)
            if values is None:
                out[spec.name] = spec.empty(CHUNK_ROWS)
                continue
            values = np.asarray(values[start:start + CHUNK_ROWS], dtype=spec.dtype)
            if values.ndim == 2 and values.shape[1] < (spec.width or 1):
                values = _pad_to(values, spec.width)
            out[spec.name] = _freeze(values if values.base is not None else values.view())
        return Chunk(out, CHUNK_ROWS)

    def view(self) -> ChunkedTable:
        """A read-only look at the current state, valid until the next write through this writer."""
        return ChunkedTable(self.columns.values(), tuple(self._chunks), self.rows)

    def freeze(self) -> ChunkedTable:
        chunks = []
        for index, chunk in enumerate(self._chunks):
            if index in self._owned:
                arrays = {}
                for name, array in chunk.arrays.items():
                    if is_shared_default(array):
                        # a shared default covers exactly the chunk's rows (it may have room for more)
                        arrays[name] = array if len(array) == chunk.rows else array[: chunk.rows]
                    else:
                        # trim the room left for appends so the frozen table holds only real rows
                        arrays[name] = _freeze_view(array, chunk.rows)
                chunk = Chunk(arrays, chunk.rows)
            chunks.append(chunk)
        table = ChunkedTable(self.columns.values(), tuple(chunks), self.rows)
        self._owned = {}  # further writes copy again: the frozen table must never change
        self._writable = {}
        self._chunks = list(table.chunks)
        return table
