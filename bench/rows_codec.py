"""Report rows: the record batch v2 codec beside aiokafka's Cython codec and the crc32c package.

Data (identical for us and the peer): batches of 1000 records, null keys, no headers, one
timestamp, values of 100 random bytes (seeded), uncompressed.

    codec.encode          build_batch(1000 Records) vs aiokafka's Cython DefaultRecordBatchBuilder
                          (append x1000 + build); goal >= 2x
    codec.decode          decode_columns (header checks, CRC, every record's offset, timestamp,
                          key and value located) vs aiokafka's Cython DefaultRecordBatch
                          (validate_crc + iterate every record); goal >= 3x
    codec.iter_records    the same but ours also builds a Record object per record; same goal
    codec.decode_columns  decode_columns_many over a region of batches, records/s; goal >= 20 M/s
    crc.segment           scan_batches(verify_crc=True) over a segment vs crc32c.crc32c over the
                          same bytes, GB/s; goal >= 0.8x

Each row checks that the peer really is aiokafka's C extension (aiokafka.record._crecords).
"""

from __future__ import annotations

import functools
import random

from kraftlog.bench.timing import measure, row

RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100
TIMESTAMP_MS = 1_700_000_000_000
REGION_BATCHES = 10  # ~1.1 MB: a fetch-sized region
SEGMENT_BYTES = 16 * 1024 * 1024
SMALL_BATCH_RECORDS = 8  # metadata-sized batches (~1 KiB) for the CRC note


def aiokafka_classes():
    """aiokafka's Cython builder and reader; fails if its C extension is not the one in use."""
    from aiokafka.record import _crecords, default_records

    if default_records.DefaultRecordBatch is not _crecords.DefaultRecordBatch:
        raise RuntimeError("aiokafka's C extension is not loaded (AIOKAFKA_NO_EXTENSIONS set?)")
    return _crecords.DefaultRecordBatchBuilder, _crecords.DefaultRecordBatch


@functools.lru_cache(maxsize=4)
def values(count: int = RECORDS_PER_BATCH, size: int = VALUE_BYTES, seed: int = 7) -> tuple[bytes, ...]:
    rng = random.Random(seed)
    return tuple(rng.randbytes(size) for _ in range(count))


@functools.lru_cache(maxsize=4)
def records(count: int = RECORDS_PER_BATCH) -> list:
    from kraftlog.engine.records.batch import Record

    return [Record(None, v, (), TIMESTAMP_MS) for v in values(count)]


def aiokafka_encode(vals) -> bytearray:
    builder_cls, _ = aiokafka_classes()
    builder = builder_cls(2, 0, 0, -1, -1, -1, 1 << 30)
    for i, v in enumerate(vals):
        builder.append(i, TIMESTAMP_MS, None, v, [])
    return builder.build()


def ours_encode(recs) -> bytes:
    from kraftlog.engine.records.batch import build_batch

    return build_batch(recs, base_timestamp_ms=TIMESTAMP_MS)


@functools.lru_cache(maxsize=2)
def peer_batch() -> bytes:
    """One batch as aiokafka writes it: what both decoders read."""
    return bytes(aiokafka_encode(values()))


def aiokafka_decode(buf) -> int:
    _, reader_cls = aiokafka_classes()
    batch = reader_cls(buf)
    if not batch.validate_crc():
        raise RuntimeError("CRC mismatch")
    n = 0
    for _ in batch:
        n += 1
    return n


def aiokafka_decode_region(buf, positions) -> int:
    return sum(aiokafka_decode(buf[p:q]) for p, q in positions)


def ours_iter(buf) -> int:
    from kraftlog.engine.records.batch import iter_records

    n = 0
    for _ in iter_records(buf):
        n += 1
    return n


@functools.lru_cache(maxsize=4)
def region(batches: int, records_per_batch: int = RECORDS_PER_BATCH) -> bytes:
    from kraftlog.engine.records.batch import build_batch_from_values

    vals = values(records_per_batch)
    return b"".join(build_batch_from_values(vals, base_offset=i * records_per_batch, timestamp_ms=TIMESTAMP_MS)
                    for i in range(batches))


def _impl() -> str:
    from kraftlog.engine.records.batch import IMPLEMENTATION

    return IMPLEMENTATION


def row_encode(quick: bool) -> dict:
    repeat = 5 if quick else 21
    recs, vals = records(), values()
    if ours_encode(recs) != ours_encode(recs) or aiokafka_decode(ours_encode(recs)) != RECORDS_PER_BATCH:
        raise RuntimeError("encode check failed")
    ours, spread = measure(lambda: ours_encode(recs), repeat=repeat)
    peer, _ = measure(lambda: aiokafka_encode(vals), repeat=repeat)
    from kraftlog.engine.records.batch import build_batch_from_values

    fast, _ = measure(lambda: build_batch_from_values(vals, timestamp_ms=TIMESTAMP_MS), repeat=repeat)
    return row("codec.encode", "us/batch", ours * 1e6, spread * 1e6,
               peer="aiokafka Cython DefaultRecordBatchBuilder (append x1000 + build)", peer_value=peer * 1e6,
               higher_is_better=False, goal=">= 2x aiokafka", met=peer / ours >= 2,
               notes=(f"1000 records x {VALUE_BYTES} B, null keys, no headers; implementation {_impl()}; "
                      f"build_batch_from_values (metadata fast path) {fast * 1e6:.1f} us = "
                      f"{peer / fast:.1f}x the peer"))


def row_decode(quick: bool) -> dict:
    from kraftlog.engine.records.batch import decode_columns

    repeat = 5 if quick else 21
    buf = peer_batch()
    if decode_columns(buf).record_count != RECORDS_PER_BATCH:
        raise RuntimeError("decode check failed")
    ours, spread = measure(lambda: decode_columns(buf), repeat=repeat)
    peer, _ = measure(lambda: aiokafka_decode(buf), repeat=repeat)
    return row("codec.decode", "us/batch", ours * 1e6, spread * 1e6,
               peer="aiokafka Cython DefaultRecordBatch (validate_crc + iterate)", peer_value=peer * 1e6,
               higher_is_better=False, goal=">= 3x aiokafka", met=peer / ours >= 3,
               notes=(f"the batch aiokafka built (1000 x {VALUE_BYTES} B); ours = decode_columns: CRC + every "
                      f"record's offset, timestamp, key/value position (no per-record objects); "
                      f"{RECORDS_PER_BATCH / ours / 1e6:.1f} M records/s; implementation {_impl()}"))


def row_iter_records(quick: bool) -> dict:
    repeat = 5 if quick else 21
    buf = peer_batch()
    ours, spread = measure(lambda: ours_iter(buf), repeat=repeat)
    peer, _ = measure(lambda: aiokafka_decode(buf), repeat=repeat)
    return row("codec.iter_records", "us/batch", ours * 1e6, spread * 1e6,
               peer="aiokafka Cython DefaultRecordBatch (validate_crc + iterate)", peer_value=peer * 1e6,
               higher_is_better=False, goal=">= 3x aiokafka (the codec.decode goal, on the object path)",
               met=peer / ours >= 3,
               notes=("ours builds a Record (key, value bytes, timestamp, offset) per record, like the peer's "
                      "DefaultRecord: Python object allocation and freeing dominate both; "
                      f"implementation {_impl()}"))


def row_decode_columns(quick: bool) -> dict:
    from kraftlog.engine.records.batch import decode_columns_many, scan_batches

    batches = 3 if quick else REGION_BATCHES
    buf = region(batches)
    n = batches * RECORDS_PER_BATCH
    if decode_columns_many(buf).record_count != n:
        raise RuntimeError("decode_columns_many check failed")
    ours, spread = measure(lambda: decode_columns_many(buf), repeat=5 if quick else 15)
    scan = scan_batches(buf)
    bounds = [(int(p), int(p + s)) for p, s in zip(scan.positions, scan.size_bytes, strict=True)]
    peer, _ = measure(lambda: aiokafka_decode_region(buf, bounds), repeat=3 if quick else 7)
    notes = (f"{batches} batches x 1000 records ({len(buf):,} bytes), CRC checked; columns: offsets, "
             f"timestamps, key/value offsets+lengths, header counts; implementation {_impl()}")
    if not quick:
        big = region(150)
        big_s, _ = measure(lambda: decode_columns_many(big), repeat=5)
        notes += (f"; a {len(big) / 2**20:.0f} MiB region: {150_000 / big_s / 1e6:.1f} M records/s (fresh "
                  "output arrays page-fault on this VM)")
    return row("codec.decode_columns", "M records/s", n / ours / 1e6, n / ours / 1e6 * spread / ours,
               peer="aiokafka Cython DefaultRecordBatch iteration", peer_value=n / peer / 1e6,
               higher_is_better=True, goal=">= 20 M records/s", met=n / ours >= 20e6, notes=notes,
               **({"scale": f"{batches} batches"} if quick else {}))


def row_crc_segment(quick: bool) -> dict:
    import crc32c

    from kraftlog.engine.records.batch import scan_batches

    size = SEGMENT_BYTES // (4 if quick else 1)
    one = len(region(1))
    seg = region(max(1, size // one))
    if scan_batches(seg).valid_end != len(seg):
        raise RuntimeError("scan check failed")
    repeat = 5 if quick else 15
    ours, spread = measure(lambda: scan_batches(seg, verify_crc=True), repeat=repeat)
    peer, _ = measure(lambda: crc32c.crc32c(seg), repeat=repeat)
    small = region(max(1, size // len(region(1, SMALL_BATCH_RECORDS))), SMALL_BATCH_RECORDS)
    small_ours, _ = measure(lambda: scan_batches(small, verify_crc=True), repeat=repeat)
    small_peer, _ = measure(lambda: crc32c.crc32c(small), repeat=repeat)
    gbs = len(seg) / ours / 1e9
    return row("crc.segment", "GB/s", gbs, gbs * spread / ours,
               peer="crc32c package over the same bytes (one call)", peer_value=len(seg) / peer / 1e9,
               higher_is_better=True, goal=">= 0.8x the crc32c package", met=peer / ours >= 0.8,
               notes=(f"{len(seg) / 2**20:.1f} MiB of {one:,}-byte batches; scan_batches = header checks + "
                      f"kl_crc32c per batch in one C loop; with {len(region(1, SMALL_BATCH_RECORDS))}-byte "
                      f"batches: {len(small) / small_ours / 1e9:.2f} GB/s = {small_peer / small_ours:.2f}x "
                      "(csrc/crc32c.c runs one stream for the last < 12 KiB of every call)"),
               **({"scale": f"{len(seg) / 2**20:.0f} MiB"} if quick else {}))


ROWS = {
    "codec.encode": row_encode,
    "codec.decode": row_decode,
    "codec.iter_records": row_iter_records,
    "codec.decode_columns": row_decode_columns,
    "crc.segment": row_crc_segment,
}
