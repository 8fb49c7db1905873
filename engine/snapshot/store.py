"""The snapshot store: snapshots of the metadata image in one LMDB environment per log dir.

Layout of the databases, keys, manifest, chunks and index blobs: layout.py. Design, concurrency
and the numbers: docs/arch/snapshots.md.

A snapshot is written in ONE LMDB write transaction (chunks, index tables, manifest, and the
retention deletes), so it becomes visible whole or not at all: a process killed mid-write leaves
the previous snapshots exactly as they were (LMDB never overwrites live pages; the commit is the
meta-page flip). Every read verifies what it reads: the manifest's CRC, each chunk's CRC (seeded
with its key), the index blobs' CRCs; a full read also checks the whole stream's CRC.

Thread and process safety: LMDB gives MVCC: readers see the last committed state and never block
the writer; one writer at a time (LMDB's lock, plus ``_write_lock`` in this process). Any number
of processes may open the same directory. Growing the map (``set_mapsize``) needs no transaction
of this process to be open, so every transaction passes through ``_Gate``: shared for
transactions, exclusive for the resize. Another process that grew the map is followed on the next
transaction (MapResizedError -> adopt the new size).
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import lmdb
import numpy as np
import zstandard

from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.image.writer import Loss, write_image
from kraftlog.engine.records import metadata_columns
from kraftlog.engine.records.wire import crc32c
from kraftlog.engine.snapshot import index as sindex
from kraftlog.engine.snapshot import stream as sstream
from kraftlog.engine.snapshot.errors import (
    SnapshotCorruptError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotNotFoundError,
    SnapshotStoreFullError,
    SnapshotTransferError,
)
from kraftlog.engine.snapshot.layout import (
    CHUNK_HEADER,
    CODEC_NONE,
    CODEC_ZSTD,
    FLAG_COMPRESSED_BATCHES,
    FLAG_IMAGE_FORM,
    ID_KEY,
    INDEX_HEADER,
    Manifest,
    SnapshotId,
    as_id,
    chunk_key,
    id_from_key,
    id_key,
    index_key,
    key_crc,
    unpack_manifest,
)
from kraftlog.engine.snapshot.transfer import SnapshotReceiver
from kraftlog.errors import KraftlogError

MiB = 1 << 20
CODECS = {"none": CODEC_NONE, "zstd": CODEC_ZSTD}
# Per snapshot: LMDB pages for keys and branch pages beside the values (a generous estimate,
# only used to grow the map before a write instead of failing it).
PAGE_OVERHEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class SnapshotStoreConfig:
    """Every LMDB environment option, passed explicitly, and the store's own limits.

    LMDB (lmdb.open): ``map_size_bytes`` initial map; it grows by ``map_growth_factor`` (or more
    when one snapshot needs more) up to ``map_max_bytes``, ``map_grow_retries`` times per write.
    ``sync``/``metasync``: fsync data and meta pages at commit (False trades durability across a
    machine crash for speed; a killed process loses nothing either way). ``max_dbs``: named
    databases (we use 3). ``max_readers``: concurrent read transactions over all processes.
    ``readahead``: OS read-ahead on the map (helps full loads). ``meminit``: zero LMDB's buffers
    before writing them (off: every byte we write is ours). ``writemap``: write through a writable
    mmap (off: a stray pointer cannot scribble on the file). ``map_async`` only matters with
    writemap. ``mode_bits``: permissions of the files LMDB creates. ``lock``: LMDB's locking (on:
    several processes share the directory). ``max_spare_txns``: read transactions py-lmdb keeps
    for reuse.

    Store: ``retain_count`` newest snapshots kept (older ones are deleted in the transaction that
    writes a new one); ``chunk_target_bytes`` of whole record batches per chunk (at least one
    batch); ``batch_target_bytes`` of records per batch we build; ``chunk_codec`` "zstd" or "none"
    at ``zstd_level``; ``receive_max_bytes`` a chunked transfer may buffer;
    ``lazy_cache_max_bytes`` of verified chunks a lazy image keeps.
    """

    map_size_bytes: int = 256 * MiB
    map_growth_factor: float = 2.0
    map_max_bytes: int = 64 * 1024 * MiB
    map_grow_retries: int = 6
    sync: bool = True
    metasync: bool = True
    map_async: bool = False
    writemap: bool = False
    readahead: bool = True
    meminit: bool = False
    max_dbs: int = 4
    max_readers: int = 126
    max_spare_txns: int = 1
    lock: bool = True
    mode_bits: int = 0o755
    retain_count: int = 3
    chunk_target_bytes: int = 256 * 1024
    batch_target_bytes: int = 64 * 1024
    chunk_codec: str = "zstd"
    zstd_level: int = 1
    receive_max_bytes: int = 4096 * MiB
    lazy_cache_max_bytes: int = 256 * MiB

    def __post_init__(self):
        if self.chunk_codec not in CODECS:
            raise ValueError(f"chunk_codec must be one of {sorted(CODECS)}, not {self.chunk_codec!r}")
        if self.retain_count < 1:
            raise ValueError("retain_count must be at least 1: the newest snapshot is always kept")
        if self.map_growth_factor <= 1.0 or self.map_size_bytes <= 0 or self.map_max_bytes < self.map_size_bytes:
            raise ValueError("the map must start positive and grow by a factor above 1 up to map_max_bytes")
        if self.chunk_target_bytes <= 0 or self.batch_target_bytes <= 0:
            raise ValueError("chunk_target_bytes and batch_target_bytes must be positive")


class _Gate:
    """Shared for transactions, exclusive for set_mapsize (LMDB forbids resizing under an open txn)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._shared = 0
        self._resizing = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._resizing or self._shared:
                self._cond.wait()
            self._resizing = True
        try:
            yield
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()


class SnapshotStore:
    """Snapshots by id (end offset, epoch) in the LMDB environment at ``path`` (created if missing)."""

    def __init__(self, path: str | os.PathLike, config: SnapshotStoreConfig | None = None, *,
                 clock_ms: Callable[[], int] | None = None):
        self.path = os.fspath(path)
        self.config = config or SnapshotStoreConfig()
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        c = self.config
        os.makedirs(self.path, exist_ok=True)
        self.env = lmdb.open(
            self.path, map_size=c.map_size_bytes, subdir=True, readonly=False, metasync=c.metasync, sync=c.sync,
            map_async=c.map_async, mode=c.mode_bits, create=True, readahead=c.readahead, writemap=c.writemap,
            meminit=c.meminit, max_readers=c.max_readers, max_dbs=c.max_dbs, max_spare_txns=c.max_spare_txns,
            lock=c.lock)
        # Reader slots of processes that died (e.g. killed mid-read) would pin old pages forever.
        self.env.reader_check()
        self._manifests = self.env.open_db(b"manifests")
        self._chunks = self.env.open_db(b"chunks")
        self._index = self.env.open_db(b"index")
        self._gate = _Gate()
        self._write_lock = threading.Lock()
        self._receivers: dict[SnapshotId, object] = {}

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> SnapshotStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- transactions ------------------------------------------------------------------------------
    @contextmanager
    def _read(self) -> Iterator[lmdb.Transaction]:
        """A read transaction whose buffers are zero-copy views: valid only inside the block."""
        for _ in range(2):
            with self._gate.shared():
                try:
                    txn = self.env.begin(buffers=True)
                except lmdb.MapResizedError:
                    pass
                else:
                    try:
                        yield txn
                    finally:
                        txn.abort()
                    return
            self._adopt_map_size()
        raise SnapshotError(f"{self.path}: the LMDB map keeps being resized by another process")

    def _adopt_map_size(self) -> None:
        with self._gate.exclusive():
            self.env.set_mapsize(0)  # 0: take the size another process grew the map to

    def _used_bytes(self) -> tuple[int, int]:
        info, stat = self.env.info(), self.env.stat()
        return info["map_size"], (info["last_pgno"] + 1) * stat["psize"]

    def _grow(self, needed_bytes: int, *, force: bool) -> None:
        """Make room for ``needed_bytes`` more (``force``: grow even if the estimate says it fits)."""
        map_size, used = self._used_bytes()
        if not force and map_size - used >= needed_bytes:
            return
        target = max(int(map_size * self.config.map_growth_factor), used + 2 * needed_bytes)
        target = min(-(-target // MiB) * MiB, self.config.map_max_bytes)
        if target <= map_size:
            raise SnapshotStoreFullError(
                f"{self.path}: a snapshot needs {needed_bytes} bytes; the LMDB map ({map_size} bytes, {used} used) "
                f"cannot grow past map_max_bytes={self.config.map_max_bytes}")
        with self._gate.exclusive():
            self.env.set_mapsize(target)

    def _write(self, needed_bytes: int, body: Callable[[lmdb.Transaction], object]):
        """Run ``body`` in one write transaction, growing the map first or on MapFullError."""
        with self._write_lock:
            self._grow(needed_bytes, force=False)
            for _ in range(self.config.map_grow_retries + 1):
                try:
                    with self._gate.shared(), self.env.begin(write=True) as txn:
                        return body(txn)
                except lmdb.MapFullError:
                    self._grow(needed_bytes, force=True)  # the txn was aborted: nothing was written
                except lmdb.MapResizedError:
                    self._adopt_map_size()
                except lmdb.Error as exc:
                    raise SnapshotError(f"{self.path}: LMDB write failed: {exc}") from exc
            raise SnapshotStoreFullError(f"{self.path}: still no room after {self.config.map_grow_retries} map growths")

    # -- listing -------------------------------------------------------------------------------------
    def ids(self) -> list[SnapshotId]:
        """Finished snapshots, oldest first."""
        with self._read() as txn:
            return [id_from_key(k) for k in txn.cursor(db=self._manifests).iternext(keys=True, values=False)]

    def newest_id(self) -> SnapshotId | None:
        """The newest finished snapshot: the caller may move the log's start offset up to its end offset."""
        with self._read() as txn:
            cursor = txn.cursor(db=self._manifests)
            return id_from_key(cursor.key()) if cursor.last() else None

    def manifest(self, snapshot_id) -> Manifest:
        sid = as_id(snapshot_id)
        with self._read() as txn:
            return self._manifest_in(txn, sid)

    def _manifest_in(self, txn, sid: SnapshotId) -> Manifest:
        key = id_key(sid)
        value = txn.get(key, db=self._manifests)
        if value is None:
            raise SnapshotNotFoundError(sid)
        manifest, problem = unpack_manifest(key, value)
        if manifest is None:
            raise SnapshotCorruptError(sid, "manifest", problem)
        return manifest

    # -- raft's SnapshotStore protocol names (raft/protocols.py) -------------------------------------
    def snapshot_ids(self) -> list[SnapshotId]:
        return self.ids()

    def latest_snapshot_id(self) -> SnapshotId | None:
        return self.newest_id()

    def size(self, snapshot_id) -> int | None:
        """Bytes of the snapshot's .checkpoint form; None when it does not exist."""
        try:
            return self.manifest(snapshot_id).stream_bytes
        except SnapshotNotFoundError:
            return None

    def write_chunk(self, snapshot_id, position: int, data: bytes) -> None:
        """Receive bytes of a snapshot being transferred (position 0 starts it over)."""
        sid = as_id(snapshot_id)
        receiver = self._receivers.get(sid)
        if receiver is None or position == 0:
            receiver = self._receivers[sid] = SnapshotReceiver(self, sid)
        receiver.write(position, data)

    def finish(self, snapshot_id, size: int) -> None:
        sid = as_id(snapshot_id)
        receiver = self._receivers.pop(sid, None)
        if receiver is None:
            raise SnapshotTransferError(f"snapshot {sid}: finish without any chunk written")
        receiver.finish(size)

    def abort(self, snapshot_id) -> None:
        self._receivers.pop(as_id(snapshot_id), None)

    def delete_before(self, snapshot_id) -> list[SnapshotId]:
        """Delete snapshots that end before ``snapshot_id``'s end offset, never the newest; returns
        what was deleted. Only the offset counts (raft passes an unknown epoch, -1)."""
        end_offset = int(snapshot_id[0])

        def body(txn):
            ids = [id_from_key(k) for k in txn.cursor(db=self._manifests).iternext(keys=True, values=False)]
            doomed = [i for i in ids[:-1] if i.end_offset < end_offset]
            for i in doomed:
                self._delete_in(txn, i)
            return doomed

        return self._write(PAGE_OVERHEAD_BYTES, body)

    # -- writing -------------------------------------------------------------------------------------
    def write_image(self, snapshot_id, image: MetadataImage, *, metadata_version: int | None = None,
                    last_contained_log_timestamp_ms: int | None = None,
                    replace: bool = False) -> tuple[Manifest, list[Loss]]:
        """Write ``image`` at ``metadata_version`` (default: its own) as snapshot ``snapshot_id``.
        Returns the manifest and the image writer's loss report (fields a lower version dropped)."""
        written = write_image(image, metadata_version)
        if last_contained_log_timestamp_ms is None:
            last_contained_log_timestamp_ms = max(image.provenance.timestamp_ms, 0)
        manifest = self.write_values(snapshot_id, written.values,
                                     last_contained_log_timestamp_ms=last_contained_log_timestamp_ms, replace=replace)
        return manifest, list(written.losses)

    def write_values(self, snapshot_id, values: Sequence[bytes], *, last_contained_log_timestamp_ms: int = 0,
                     timestamp_ms: int | None = None, replace: bool = False) -> Manifest:
        """Frame ``values`` (framed metadata record values, image order) as a Kafka snapshot and store it."""
        sid = as_id(snapshot_id)
        batches = sstream.build_stream(values, sid, last_contained_log_timestamp_ms=last_contained_log_timestamp_ms,
                                       batch_target_bytes=self.config.batch_target_bytes,
                                       timestamp_ms=self._clock_ms() if timestamp_ms is None else timestamp_ms)
        return self.write_stream(sid, b"".join(batches), replace=replace)

    def write_stream(self, snapshot_id, stream, *, replace: bool = False, path: str | None = None) -> Manifest:
        """Store a whole .checkpoint byte stream after validating it (every batch CRC, header first,
        footer last); raises SnapshotCorruptError when it does not validate, SnapshotExistsError when
        the id is taken (unless ``replace``)."""
        sid = as_id(snapshot_id)
        info = sstream.validate_stream(stream, snapshot_id=sid, path=path)
        try:
            cols = metadata_columns.decode_metadata_region(stream, path=path)
        except KraftlogError as exc:
            raise SnapshotCorruptError(sid, "records", str(exc), path=path) from exc
        pos, length = sindex.record_locations(cols, stream, info.positions, info.base_offsets)
        tables = sindex.build_tables(cols, pos, length, sid.end_offset)
        chunks, starts = self._chunks_of(sid, stream, info)
        tables["chunks"] = {"start": starts}
        blobs = [(index_key(sid, name), _index_blob(index_key(sid, name), *sindex.pack_table(name, table)))
                 for name, table in tables.items()]
        stored = sum(len(v) for _, v in chunks) + sum(len(v) for _, v in blobs)
        flags = (FLAG_IMAGE_FORM if sindex.is_image_form(cols) else 0) | (
            FLAG_COMPRESSED_BATCHES if info.compressed else 0)
        manifest = Manifest(sid, sindex.metadata_version_of(cols), flags, info.record_count, info.batch_count,
                            len(chunks), CODECS[self.config.chunk_codec], len(stream), crc32c(stream),
                            info.last_contained_log_timestamp_ms, self._clock_ms(), stored)

        def body(txn):
            key = id_key(sid)
            if txn.get(key, db=self._manifests) is not None:
                if not replace:
                    raise SnapshotExistsError(sid)
                self._delete_in(txn, sid)
            for k, v in chunks:
                txn.put(k, v, db=self._chunks)
            for k, v in blobs:
                txn.put(k, v, db=self._index)
            txn.put(key, manifest.pack(), db=self._manifests)
            self._retain_in(txn)
            return manifest

        return self._write(stored + PAGE_OVERHEAD_BYTES, body)

    def _chunks_of(self, sid: SnapshotId, stream, info: sstream.StreamInfo) -> tuple[list[tuple[bytes, bytes]], np.ndarray]:
        """(key, value) of every chunk and the chunks' start positions (+ the stream size)."""
        view = memoryview(stream)
        codec = CODECS[self.config.chunk_codec]
        compress = zstandard.ZstdCompressor(level=self.config.zstd_level).compress if codec == CODEC_ZSTD else None
        bounds = _chunk_bounds(info.positions, info.sizes, self.config.chunk_target_bytes, len(view))
        out = []
        for no in range(len(bounds) - 1):
            start, end = int(bounds[no]), int(bounds[no + 1])
            raw = view[start:end]
            payload = compress(raw) if compress is not None else raw
            key = chunk_key(sid, no)
            header = bytearray(CHUNK_HEADER.pack(0, codec, end - start, start))
            crc = crc32c(payload, crc32c(memoryview(header)[4:], key_crc(key)))
            header[0:4] = crc.to_bytes(4, "big")
            out.append((key, bytes(header) + payload))
        return out, bounds.astype(np.uint64)

    # -- deleting ------------------------------------------------------------------------------------
    def delete(self, snapshot_id) -> bool:
        """Delete one snapshot (True when it existed)."""
        sid = as_id(snapshot_id)
        return self._write(PAGE_OVERHEAD_BYTES, lambda txn: self._delete_in(txn, sid))

    def _delete_in(self, txn, sid: SnapshotId) -> bool:
        key = id_key(sid)
        existed = txn.delete(key, db=self._manifests)
        for db in (self._chunks, self._index):
            cursor = txn.cursor(db=db)
            if cursor.set_range(key):
                while bytes(cursor.key()[:ID_KEY.size]) == key:
                    if not cursor.delete():
                        break
        return existed

    def _retain_in(self, txn) -> None:
        """Keep the newest ``retain_count`` snapshots: delete from the oldest end only."""
        ids = [id_from_key(k) for k in txn.cursor(db=self._manifests).iternext(keys=True, values=False)]
        for sid in ids[:max(0, len(ids) - self.config.retain_count)]:
            self._delete_in(txn, sid)

    # -- reading -------------------------------------------------------------------------------------
    def _verified_chunk(self, txn, sid: SnapshotId, no: int) -> tuple[int, int, int, memoryview]:
        """(codec, raw bytes, stream position, payload) of chunk ``no``, its CRC checked; the
        payload is a view into the map, valid only inside the transaction."""
        key = chunk_key(sid, no)
        value = txn.get(key, db=self._chunks)
        what = f"chunk {no}"
        if value is None:
            raise SnapshotCorruptError(sid, what, "missing")
        if len(value) < CHUNK_HEADER.size:
            raise SnapshotCorruptError(sid, what, f"{len(value)} bytes: shorter than its header")
        stored, codec, raw_bytes, start = CHUNK_HEADER.unpack_from(value, 0)
        computed = crc32c(value[4:], key_crc(key))
        if stored != computed:
            raise SnapshotCorruptError(sid, what, f"CRC mismatch (stored {stored:#010x}, computed {computed:#010x})",
                                       position=start)
        if codec not in (CODEC_NONE, CODEC_ZSTD):
            raise SnapshotCorruptError(sid, what, f"unknown chunk codec {codec}", position=start)
        return codec, raw_bytes, start, value[CHUNK_HEADER.size:]

    def _chunk_in(self, txn, sid: SnapshotId, no: int, manifest: Manifest):
        """The raw bytes of chunk ``no``, verified: a zero-copy view for codec none (valid only inside
        the transaction), new bytes for zstd."""
        codec, raw_bytes, start, payload = self._verified_chunk(txn, sid, no)
        raw = payload
        if codec == CODEC_ZSTD:
            try:
                raw = _decompressor().decompress(payload, max_output_size=raw_bytes)
            except zstandard.ZstdError as exc:
                raise SnapshotCorruptError(sid, f"chunk {no}", f"zstd payload does not decompress: {exc}",
                                           position=start) from None
        if len(raw) != raw_bytes:
            raise SnapshotCorruptError(sid, f"chunk {no}", f"{len(raw)} raw bytes, header says {raw_bytes}",
                                       position=start)
        return raw, start

    def _chunk_into(self, txn, sid: SnapshotId, no: int, out: memoryview, pos: int) -> int:
        """Chunk ``no``, verified, written at ``out[pos:]`` (decompressed straight there: no bytes
        object per chunk, no second copy); its raw size. It must start at ``pos`` and fit."""
        codec, raw_bytes, start, payload = self._verified_chunk(txn, sid, no)
        what = f"chunk {no}"
        if start != pos or pos + raw_bytes > len(out):
            raise SnapshotCorruptError(sid, what, f"covers {start}..{start + raw_bytes}, expected to start at {pos} "
                                       f"within {len(out)} bytes", position=start)
        target = out[pos:pos + raw_bytes]
        if codec == CODEC_NONE:
            if len(payload) != raw_bytes:
                raise SnapshotCorruptError(sid, what, f"{len(payload)} raw bytes, header says {raw_bytes}",
                                           position=start)
            target[:] = payload
            return raw_bytes
        try:
            with _decompressor().stream_reader(payload) as reader:
                got = 0
                while got < raw_bytes:  # a reader may return less than asked; 0 at the frame's end
                    n = reader.readinto(target[got:])
                    if n == 0:
                        break
                    got += n
                extra = len(reader.read(1)) if got == raw_bytes else 0
        except zstandard.ZstdError as exc:
            raise SnapshotCorruptError(sid, what, f"zstd payload does not decompress: {exc}", position=start) from None
        if got != raw_bytes or extra:
            raise SnapshotCorruptError(sid, what, f"{'more than ' if extra else ''}{got} raw bytes, header says "
                                       f"{raw_bytes}", position=start)
        return raw_bytes

    def _table_in(self, txn, sid: SnapshotId, name: str) -> sindex.Table:
        key = index_key(sid, name)
        value = txn.get(key, db=self._index)
        what = f"index {name}"
        if value is None:
            raise SnapshotCorruptError(sid, what, "missing")
        if len(value) < INDEX_HEADER.size:
            raise SnapshotCorruptError(sid, what, "shorter than its header")
        stored, rows = INDEX_HEADER.unpack_from(value, 0)
        computed = crc32c(value[4:], key_crc(key))
        if stored != computed:
            raise SnapshotCorruptError(sid, what, f"CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")
        if len(value) - INDEX_HEADER.size != rows * sindex.row_bytes(name):
            raise SnapshotCorruptError(sid, what, f"{rows} rows do not fill its {len(value)} bytes")
        return sindex.unpack_table(name, rows, bytes(value[INDEX_HEADER.size:]))

    def read_table(self, snapshot_id, name: str) -> sindex.Table:
        """One verified index table (see index.py) of a snapshot."""
        sid = as_id(snapshot_id)
        with self._read() as txn:
            self._manifest_in(txn, sid)
            return self._table_in(txn, sid, name)

    def read_chunk_raw(self, snapshot_id, no: int) -> tuple[bytes, int]:
        """Chunk ``no`` of a snapshot, verified and decompressed, as (bytes, stream position)."""
        sid = as_id(snapshot_id)
        with self._read() as txn:
            manifest = self._manifest_in(txn, sid)
            if not 0 <= no < manifest.chunk_count:
                raise ValueError(f"snapshot {sid} has chunks 0..{manifest.chunk_count - 1}, not {no}")
            raw, start = self._chunk_in(txn, sid, no, manifest)
            return bytes(raw), start

    def read_stream(self, snapshot_id=None, *, verify_stream_crc: bool = True) -> tuple[Manifest, memoryview]:
        """The whole .checkpoint stream of a snapshot (default: the newest), every chunk verified, as
        a writable byte view (of _stream_buffer's memory), each chunk decompressed straight into it."""
        with self._read() as txn:
            sid = self._resolve_in(txn, snapshot_id)
            manifest = self._manifest_in(txn, sid)
            out = _stream_buffer(manifest.stream_bytes)
            pos = 0
            for no in range(manifest.chunk_count):
                pos += self._chunk_into(txn, sid, no, out, pos)
        if pos != len(out):
            raise SnapshotCorruptError(sid, "stream", f"chunks hold {pos} bytes, manifest says {len(out)}")
        if verify_stream_crc:
            computed = crc32c(out)
            if computed != manifest.stream_crc:
                raise SnapshotCorruptError(sid, "stream", f"CRC mismatch (manifest {manifest.stream_crc:#010x}, "
                                           f"computed {computed:#010x})")
        return manifest, out

    def _resolve_in(self, txn, snapshot_id) -> SnapshotId:
        if snapshot_id is not None:
            return as_id(snapshot_id)
        cursor = txn.cursor(db=self._manifests)
        if not cursor.last():
            raise SnapshotError(f"{self.path}: the store holds no snapshot")
        return id_from_key(cursor.key())

    def read(self, snapshot_id, position: int, max_bytes: int) -> bytes:
        """Bytes [position, position + max_bytes) of the snapshot's .checkpoint form (FetchSnapshot);
        fewer at its end, empty past it. Every chunk touched is verified."""
        sid = as_id(snapshot_id)
        if position < 0 or max_bytes < 0:
            raise ValueError(f"position {position} and max_bytes {max_bytes} must not be negative")
        with self._read() as txn:
            manifest = self._manifest_in(txn, sid)
            stop = min(position + max_bytes, manifest.stream_bytes)
            if position >= stop:
                return b""
            starts = self._table_in(txn, sid, "chunks")["start"].astype(np.int64)
            first = int(starts.searchsorted(np.int64(position), side="right")) - 1
            parts = []
            for no in range(first, manifest.chunk_count):
                if int(starts[no]) >= stop:
                    break
                raw, start = self._chunk_in(txn, sid, no, manifest)
                parts.append(bytes(raw[max(position - start, 0):min(stop - start, len(raw))]))
            return b"".join(parts)

    def read_chunk(self, snapshot_id, position: int, max_bytes: int) -> bytes:
        """raft's SnapshotStore name for ``read``."""
        return self.read(snapshot_id, position, max_bytes)

    def load_image(self, snapshot_id=None) -> MetadataImage:
        """The image a snapshot (default: the newest) holds, every chunk and batch verified."""
        manifest, stream = self.read_stream(snapshot_id)
        sid = manifest.snapshot_id
        return Loader().load_snapshot(stream, end_offset=sid.end_offset, epoch=sid.epoch,
                                      path=f"{self.path}#{sid}")

    def verify(self, snapshot_id) -> Manifest:
        """Read and check everything of one snapshot: chunks, stream CRC, batches, header/footer,
        index tables. Raises SnapshotCorruptError naming the broken part."""
        manifest, stream = self.read_stream(snapshot_id)
        sid = manifest.snapshot_id
        sstream.validate_stream(stream, snapshot_id=sid)
        with self._read() as txn:
            for name in sindex.TABLES:
                self._table_in(txn, sid, name)
        return manifest


_local = threading.local()  # zstd contexts are not thread-safe, and costly to create: one per thread


def _decompressor() -> zstandard.ZstdDecompressor:
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


def _stream_buffer(size_bytes: int) -> memoryview:
    """``size_bytes`` of fresh memory for a snapshot's stream: an anonymous mapping populated in one
    system call (MAP_POPULATE; plain elsewhere). Measured at a 1M-partition snapshot (121 MiB, read
    then decoded, 8 fresh processes each): a bytearray (zero-filled, then each chunk's bytes copied
    in) 0.21 s; np.empty (numpy asks for huge pages) 0.15-0.44 s, half the runs stalled on huge
    page faults; this 0.19-0.21 s."""
    if size_bytes == 0 or not hasattr(mmap, "MAP_ANONYMOUS"):  # (no anonymous mappings: Windows)
        return memoryview(bytearray(size_bytes))
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    return memoryview(mmap.mmap(-1, size_bytes, flags=flags))


def _chunk_bounds(positions: np.ndarray, sizes: np.ndarray, target_bytes: int, total: int) -> np.ndarray:
    """Chunk start positions + the stream size: greedy, whole batches, at least one per chunk."""
    bounds = [0]
    size = 0
    for pos, n in zip(positions.tolist(), sizes.tolist(), strict=True):
        if size and size + n > target_bytes:
            bounds.append(pos)
            size = 0
        size += n
    bounds.append(total)
    return np.array(bounds, dtype=np.int64)


def _index_blob(key: bytes, rows: int, data: bytes) -> bytes:
    body = INDEX_HEADER.pack(0, rows)[4:] + data
    return crc32c(body, key_crc(key)).to_bytes(4, "big") + body


def load_latest_valid(store: SnapshotStore) -> tuple[MetadataImage, SnapshotId | None, list[KraftlogError]]:
    """The image of the newest snapshot that verifies and loads, trying newest to oldest.

    Returns (image, its id, the problems of every newer snapshot skipped). With no usable
    snapshot: (an empty image, None, problems); the caller then replays the log from its start,
    else from the returned id's end offset.
    """
    problems: list[KraftlogError] = []
    for sid in reversed(store.ids()):
        try:
            return store.load_image(sid), sid, problems
        except KraftlogError as exc:  # corrupt chunk/manifest, undecodable or inapplicable record
            problems.append(exc)
    return MetadataImage.empty(), None, problems
