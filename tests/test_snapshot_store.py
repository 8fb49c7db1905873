"""Proves the LMDB snapshot store: an image written as a snapshot loads back as the same image; the
stored stream is framed as Kafka frames a snapshot; the lazy image answers exactly what the full
image answers; corruption of any stored part is reported with the snapshot id and the broken part,
and load_latest_valid falls back to the previous snapshot; retention keeps the newest N; the map
grows on demand; Kafka .checkpoint files export and import; the FetchSnapshot byte stream
rebuilds the snapshot on the receiving side and a damaged transfer stores nothing."""

from __future__ import annotations

import os
import random
import threading
import uuid

import pytest
import zstandard
from image_summary import summary

from kraftlog import _accel
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.image.writer import write_image
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.batch import CODEC_ZSTD, Record
from kraftlog.engine.records.wire import crc32c
from kraftlog.engine.snapshot import (
    LazyImageUnsupportedError,
    LazySnapshotImage,
    SnapshotCorruptError,
    SnapshotExistsError,
    SnapshotId,
    SnapshotReceiver,
    SnapshotStore,
    SnapshotStoreConfig,
    SnapshotStoreFullError,
    SnapshotTransferError,
    export_checkpoint,
    import_checkpoint,
    load_latest_valid,
    parse_checkpoint_name,
)
from kraftlog.engine.snapshot.layout import CHUNK_HEADER, chunk_key, id_key, index_key, key_crc
from kraftlog.engine.snapshot.layout import CODEC_NONE as CODEC_NONE_CHUNK
from kraftlog.engine.snapshot.layout import CODEC_ZSTD as CODEC_ZSTD_CHUNK

pytestmark = pytest.mark.twin

SMALL = SnapshotStoreConfig(map_size_bytes=4 << 20, chunk_target_bytes=16 * 1024, batch_target_bytes=4096,
                            sync=False, metasync=False)


def test_the_expected_codecs_are_loaded():
    # The store decodes through the batch and metadata-column codecs: the twin run must use the twins.
    assert ("pure" if _accel.FORCE_PURE else "native") == batch.IMPLEMENTATION


def to_log(values: list[bytes], per_batch: int = 200, first_offset: int = 0, **kw) -> bytes:
    return b"".join(batch.build_batch_from_values(values[i:i + per_batch], base_offset=first_offset + i, **kw)
                    for i in range(0, len(values), per_batch))


@pytest.fixture(scope="module")
def image() -> MetadataImage:
    """A 1,200-partition reference workload with churn (elections, ISR changes, fencing, deletes)."""
    shape = wl.WorkloadShape.scaled(1200, replicas_per_broker=300)
    base = list(wl.generate(shape))
    churn = list(wl.churn(shape, 600, seed=3))
    config = codec.encode_record("ConfigRecord", 0, {"ResourceType": 2, "ResourceName": "topic-000001",
                                                      "Name": "retention.ms", "Value": "1000"})
    return Loader().replay(to_log(base + churn + [config]))


@pytest.fixture
def store(tmp_path) -> SnapshotStore:
    with SnapshotStore(tmp_path / "snapshots", SMALL) as s:
        yield s


def _all_questions(image: MetadataImage):
    names = list(image.topics.topic_names())
    return names, [(n, p) for n in names for p in range(-1, 13)]


# -- write / load ------------------------------------------------------------------------------------

def test_an_image_written_as_a_snapshot_loads_back_identical(store, image):
    manifest, losses = store.write_image((5000, 7), image)
    assert losses == []
    assert manifest.snapshot_id == SnapshotId(5000, 7) and store.newest_id() == SnapshotId(5000, 7)
    assert manifest.metadata_version == image.features.metadata_version
    loaded = store.load_image()
    assert summary(loaded) == summary(image)
    assert loaded.provenance.offset == 4999 and loaded.provenance.epoch == 7
    assert store.verify((5000, 7)).chunk_count == manifest.chunk_count > 1


def test_the_stored_stream_is_framed_as_kafka_frames_a_snapshot(store, image):
    manifest, _ = store.write_image((5000, 7), image, last_contained_log_timestamp_ms=1234)
    stream = store.read((5000, 7), 0, manifest.stream_bytes + 10)
    assert len(stream) == manifest.stream_bytes
    scan = batch.scan_batches(stream)
    assert scan.error_position is None and int(scan.base_offsets[0]) == 0
    assert (scan.base_offsets[1:] == scan.last_offsets[:-1] + 1).all()  # offsets 0, 1, 2, ... without gaps
    assert set(scan.partition_leader_epochs.tolist()) == {7}  # batches carry the snapshot's epoch
    first = list(batch.iter_records(stream, int(scan.positions[0])))
    last = list(batch.iter_records(stream, int(scan.positions[-1])))
    header = codec.decode_control(first[0].key, first[0].value)
    assert header.record_type == "SnapshotHeaderRecord" and header.data["LastContainedLogTimestamp"] == 1234
    assert codec.decode_control(last[-1].key, last[-1].value).record_type == "SnapshotFooterRecord"
    assert scan.attributes[0] & batch.CONTROL_BIT and scan.attributes[-1] & batch.CONTROL_BIT
    values = [r.value for pos in scan.positions[1:-1].tolist() for r in batch.iter_records(stream, pos)]
    assert values == write_image(image).values  # exactly the image writer's records, in its order


def test_a_snapshot_id_is_written_once_unless_replaced(store, image):
    store.write_image((100, 1), image)
    with pytest.raises(SnapshotExistsError, match="100-1"):
        store.write_values((100, 1), write_image(image).values[:3])
    manifest = store.write_values((100, 1), write_image(image).values[:3], replace=True)
    assert manifest.record_count == 3 + 2 and store.ids() == [SnapshotId(100, 1)]
    assert store.load_image().topics.partition_count == 0


# -- lazy image --------------------------------------------------------------------------------------

def test_the_lazy_image_answers_what_the_full_image_answers(store, image):
    store.write_image((9000, 2), image)
    lazy = LazySnapshotImage(store)
    names, questions = _all_questions(image)
    assert lazy.snapshot_id == SnapshotId(9000, 2) and lazy.topic_count == len(names)
    assert lazy.partition_count == image.topics.partition_count
    for name in names:
        view = image.topics.topic(name)
        assert lazy.topic(name) == view and lazy.topic_by_id(view.topic_id) == view
        assert lazy.partition_by_id(view.topic_id, 0) == image.topics.partition(name, 0)
    assert [lazy.partition(n, p) for n, p in questions] == [image.topics.partition(n, p) for n, p in questions]
    assert lazy.topic("no-such-topic") is None and lazy.topic_by_id(uuid.uuid4()) is None
    assert lazy.partition("no-such-topic", 0) is None
    for broker_id in range(-1, 40):
        assert lazy.broker(broker_id) == image.cluster.brokers.get(broker_id)
    assert lazy.broker_ids() == sorted(image.cluster.brokers) and lazy.topic_names() == sorted(names)


def test_the_lazy_image_reads_records_inside_compressed_batches(store, image):
    values = write_image(image).values
    header = batch.build_control_batch(batch.CONTROL_SNAPSHOT_HEADER, codec.encode_control(3, 0, {
        "LastContainedLogTimestamp": 9})[1], base_offset=0)
    footer = batch.build_control_batch(batch.CONTROL_SNAPSHOT_FOOTER, codec.encode_control(4, 0, {})[1],
                                       base_offset=len(values) + 1)
    store.write_stream((len(values) + 1, 3), header + to_log(values, 150, 1, codec=CODEC_ZSTD) + footer)
    lazy = LazySnapshotImage(store)
    names, questions = _all_questions(image)
    assert store.manifest(lazy.snapshot_id).flags & 2  # the stream holds compressed batches
    assert [lazy.partition(n, p) for n, p in questions[::3]] == [image.topics.partition(n, p)
                                                                 for n, p in questions[::3]]
    assert [lazy.topic(n) for n in names] == [image.topics.topic(n) for n in names]


def test_a_stream_with_change_records_is_refused_by_the_lazy_image_but_loads(store, image):
    values = write_image(image).values
    name = next(iter(image.topics.topic_names()))
    before = image.topics.partition(name, 0)
    leader = before.replicas[-1] if before.leader != before.replicas[-1] else before.replicas[0]
    change = codec.encode_record("PartitionChangeRecord", 0, {"TopicId": before.topic_id, "PartitionId": 0,
                                                              "Leader": leader})
    store.write_values((50, 1), values + [change])
    with pytest.raises(LazyImageUnsupportedError):
        LazySnapshotImage(store)
    assert store.load_image().topics.partition(name, 0).leader == leader != before.leader


# -- corruption and fallback -------------------------------------------------------------------------

def _flip(store: SnapshotStore, db_name: bytes, key: bytes, at: int) -> None:
    """Flip one stored byte of a value, as a bad disk sector would (LMDB's own pages stay sound)."""
    db = store.env.open_db(db_name)
    with store.env.begin(write=True, db=db) as txn:
        value = bytearray(txn.get(key))
        value[at % len(value)] ^= 0x40
        txn.put(key, bytes(value))


def test_a_corrupt_chunk_is_named_and_the_loader_falls_back_to_the_previous_snapshot(store, image):
    store.write_image((1000, 1), image)
    manifest, _ = store.write_image((2000, 1), image)
    bad = manifest.chunk_count // 2
    _flip(store, b"chunks", chunk_key(SnapshotId(2000, 1), bad), 40)
    with pytest.raises(SnapshotCorruptError) as info:
        store.load_image()
    assert info.value.snapshot_id == SnapshotId(2000, 1) and info.value.what == f"chunk {bad}"
    assert "2000-1" in str(info.value) and "CRC mismatch" in str(info.value)
    loaded, sid, problems = load_latest_valid(store)
    assert sid == SnapshotId(1000, 1) and summary(loaded) == summary(image)
    assert [p.what for p in problems] == [f"chunk {bad}"]
    with pytest.raises(SnapshotCorruptError, match=f"chunk {bad}"):
        store.read((2000, 1), 0, manifest.stream_bytes)
    with pytest.raises(SnapshotCorruptError, match=f"chunk {bad}"):
        store.verify((2000, 1))
    lazy = LazySnapshotImage(store)  # opens (index intact) but the broken chunk answers nothing
    names, questions = _all_questions(image)
    with pytest.raises(SnapshotCorruptError, match=f"chunk {bad}"):
        for n, p in questions:
            lazy.partition(n, p)


def _rewrite_chunk(store: SnapshotStore, sid: SnapshotId, no: int, codec_id: int, raw_bytes: int,
                   payload: bytes) -> None:
    """Store chunk ``no`` with this header and payload under a valid CRC: a chunk that passes its
    CRC and still lies about what it holds (a bug of the writer, not of the disk)."""
    key = chunk_key(sid, no)
    db = store.env.open_db(b"chunks")
    with store.env.begin(write=True, db=db) as txn:
        start = CHUNK_HEADER.unpack_from(txn.get(key), 0)[3]
        body = CHUNK_HEADER.pack(0, codec_id, raw_bytes, start)[4:] + payload
        txn.put(key, crc32c(body, key_crc(key)).to_bytes(4, "big") + body)


@pytest.mark.parametrize("codec_id,delta,problem", [
    (CODEC_ZSTD_CHUNK, +1, "header says"),  # the frame holds one byte less than the header says
    (CODEC_ZSTD_CHUNK, -1, "more than"),  # ... one byte more
    (CODEC_NONE_CHUNK, +1, "header says"),
    (CODEC_ZSTD_CHUNK, 0, "does not decompress"),  # not a zstd frame at all
])
def test_a_chunk_whose_payload_does_not_match_its_header_is_refused(store, image, codec_id, delta, problem):
    # read_stream decompresses each chunk straight into the stream's buffer: a frame longer or
    # shorter than its header's raw size is refused, never written past its place.
    manifest, _ = store.write_image((1000, 1), image)
    sid = SnapshotId(1000, 1)
    no = manifest.chunk_count // 2
    raw, _ = store.read_chunk_raw(sid, no)
    if problem == "does not decompress":
        payload = b"\x00not a zstd frame" * 8
    else:
        payload = zstandard.ZstdCompressor().compress(raw) if codec_id == CODEC_ZSTD_CHUNK else raw
    _rewrite_chunk(store, sid, no, codec_id, len(raw) + delta, payload)
    with pytest.raises(SnapshotCorruptError, match=problem) as info:
        store.read_stream(sid)
    assert info.value.what == f"chunk {no}" and info.value.snapshot_id == sid
    with pytest.raises(SnapshotCorruptError, match=f"chunk {no}"):
        store.load_image(sid)


def test_read_stream_is_the_stream_the_chunks_hold(store, image):
    # The stream read in one piece equals its chunks read one by one, and loads as the image.
    manifest, _ = store.write_image((1000, 1), image)
    _, stream = store.read_stream()
    parts = [store.read_chunk_raw((1000, 1), no)[0] for no in range(manifest.chunk_count)]
    assert bytes(stream) == b"".join(parts) and len(stream) == manifest.stream_bytes
    assert summary(Loader().load_snapshot(stream, end_offset=1000, epoch=1)) == summary(image)


@pytest.mark.parametrize("db_name,part", [(b"manifests", "manifest"), (b"index", "index partitions")])
def test_a_corrupt_manifest_or_index_is_named(store, image, db_name, part):
    store.write_image((1000, 1), image)
    store.write_image((2000, 1), image)
    sid = SnapshotId(2000, 1)
    key = id_key(sid) if db_name == b"manifests" else index_key(sid, "partitions")
    _flip(store, db_name, key, 30)
    with pytest.raises(SnapshotCorruptError) as info:
        store.verify(sid) if db_name == b"index" else store.load_image(sid)
    assert info.value.what == part and info.value.snapshot_id == sid
    assert load_latest_valid(store)[1] == (SnapshotId(1000, 1) if db_name == b"manifests" else sid)


def test_no_valid_snapshot_gives_an_empty_image_and_every_problem(store, image):
    manifest, _ = store.write_image((10, 1), image)
    _flip(store, b"chunks", chunk_key(SnapshotId(10, 1), 0), 100)
    loaded, sid, problems = load_latest_valid(store)
    assert sid is None and loaded.is_empty and len(problems) == 1


# -- retention ---------------------------------------------------------------------------------------

def test_retention_keeps_the_newest_n_and_never_deletes_the_newest(tmp_path, image):
    values = write_image(image).values
    with SnapshotStore(tmp_path / "s", SnapshotStoreConfig(retain_count=2, sync=False, metasync=False)) as store:
        for end in (10, 20, 30, 40):
            store.write_values((end, 1), values)
        assert store.ids() == [SnapshotId(30, 1), SnapshotId(40, 1)] and store.newest_id() == SnapshotId(40, 1)
        assert store.delete_before((1 << 40, 9)) == [SnapshotId(30, 1)]  # everything older, but not the newest
        assert store.ids() == [SnapshotId(40, 1)]
        assert summary(store.load_image()) == summary(image)
        with store.env.begin() as txn:  # deleted snapshots leave no chunk or index entry behind
            for db in (b"chunks", b"index"):
                keys = [bytes(k[:12]) for k in txn.cursor(db=store.env.open_db(db)).iternext(values=False)]
                assert set(keys) == {id_key(SnapshotId(40, 1))}


# -- the LMDB map ------------------------------------------------------------------------------------

def test_the_map_grows_for_a_snapshot_larger_than_it_and_stops_at_its_limit(tmp_path, image):
    values = write_image(image).values * 12
    config = SnapshotStoreConfig(map_size_bytes=1 << 20, map_max_bytes=64 << 20, chunk_codec="none",
                                 sync=False, metasync=False)
    with SnapshotStore(tmp_path / "s", config) as store:
        manifest = store.write_values((10, 1), values)
        assert manifest.stored_bytes > 1 << 20 and store.env.info()["map_size"] > 1 << 20
        tight = SnapshotStoreConfig(map_size_bytes=store.env.info()["map_size"],
                                    map_max_bytes=store.env.info()["map_size"], chunk_codec="none")
    with SnapshotStore(tmp_path / "s", tight) as store:
        with pytest.raises(SnapshotStoreFullError):
            store.write_values((20, 1), values * 2)
        assert store.ids() == [SnapshotId(10, 1)] and store.verify((10, 1)).record_count == len(values) + 2


def test_map_full_inside_the_transaction_grows_and_retries(tmp_path, image, monkeypatch):
    # Defeat the size estimate so the write really hits MapFullError, then must grow and retry.
    monkeypatch.setattr(SnapshotStore, "_grow", _grow_only_when_forced(SnapshotStore._grow))
    with SnapshotStore(tmp_path / "s", SnapshotStoreConfig(map_size_bytes=1 << 20, chunk_codec="none",
                                                           sync=False, metasync=False)) as store:
        store.write_values((10, 1), write_image(image).values * 12)
        assert store.env.info()["map_size"] > 1 << 20 and store.verify((10, 1))


def _grow_only_when_forced(grow):
    def patched(self, needed_bytes, *, force):
        if force:
            grow(self, needed_bytes, force=True)
    return patched


def test_readers_in_other_threads_during_writes_and_map_growth_see_whole_snapshots(tmp_path, image):
    values = write_image(image).values
    config = SnapshotStoreConfig(map_size_bytes=1 << 20, retain_count=2, chunk_codec="none", sync=False,
                                 metasync=False)
    seen, errors, stop = [], [], threading.Event()
    with SnapshotStore(tmp_path / "s", config) as store:
        store.write_values((1, 1), values)

        def reader():
            while not stop.is_set():
                try:
                    manifest, stream = store.read_stream()
                    seen.append((manifest.snapshot_id, manifest.record_count))
                except Exception as exc:  # noqa: BLE001 - any failure is the finding
                    errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        for end in range(2, 8):
            store.write_values((end, 1), values * end * 3)  # each larger: the map has to grow under the readers
        stop.set()
        for t in threads:
            t.join()
        grown = store.env.info()["map_size"]
    assert errors == [] and len({sid for sid, _ in seen}) > 2 and grown > 1 << 20
    assert all(count == len(values) * (end * 3 if end > 1 else 1) + 2 for (end, _), count in seen)


# -- Kafka .checkpoint files -------------------------------------------------------------------------

def test_export_then_import_round_trips_the_exact_bytes(tmp_path, store, image):
    manifest, _ = store.write_image((123456, 42), image)
    path = export_checkpoint(store, (123456, 42), tmp_path)
    assert os.path.basename(path) == "00000000000000123456-0000000042.checkpoint"
    assert parse_checkpoint_name(path) == SnapshotId(123456, 42) and parse_checkpoint_name("x.log") is None
    with open(path, "rb") as f:
        data = f.read()
    assert data == store.read((123456, 42), 0, len(data) + 1) and len(data) == manifest.stream_bytes
    with SnapshotStore(tmp_path / "other", SMALL) as other:
        imported = import_checkpoint(other, path)
        assert imported.snapshot_id == SnapshotId(123456, 42) and imported.stream_crc == manifest.stream_crc
        assert summary(other.load_image()) == summary(image)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".part")]


def kafka_shaped_checkpoint(values: list[bytes], epoch: int, *, per_batch: int = 512) -> bytes:
    """What Kafka's RecordsSnapshotWriter writes, built record by record here without our stream
    builder: one control batch holding SnapshotHeader then KRaftVersion, data batches of at most
    ``per_batch`` records (offsets from 1), a control batch with the SnapshotFooter."""
    hk, hv = codec.encode_control("SnapshotHeaderRecord", 0, {"LastContainedLogTimestamp": 77})
    kk, kv = codec.encode_control("KRaftVersionRecord", 0, {"KRaftVersion": 1})
    out = [batch.build_batch([Record(hk, hv), Record(kk, kv)], base_offset=0, partition_leader_epoch=epoch,
                             is_control=True)]
    next_offset = 2
    for i in range(0, len(values), per_batch):
        chunk = [Record(None, v) for v in values[i:i + per_batch]]
        out.append(batch.build_batch(chunk, base_offset=next_offset, partition_leader_epoch=epoch))
        next_offset += len(chunk)
    fk, fv = codec.encode_control("SnapshotFooterRecord", 0, {})
    out.append(batch.build_batch([Record(fk, fv)], base_offset=next_offset, partition_leader_epoch=epoch,
                                 is_control=True))
    return b"".join(out)


def test_a_kafka_shaped_checkpoint_imports_and_loads(tmp_path, store, image):
    values = write_image(image).values
    path = tmp_path / SnapshotId(len(values) + 2, 5).file_name
    path.write_bytes(kafka_shaped_checkpoint(values, 5))
    manifest = import_checkpoint(store, path)
    assert manifest.last_contained_log_timestamp_ms == 77 and manifest.record_count == len(values) + 3
    assert summary(store.load_image()) == summary(image)
    (tmp_path / "out").mkdir()
    exported = export_checkpoint(store, manifest.snapshot_id, tmp_path / "out")
    with open(exported, "rb") as f:
        assert f.read() == path.read_bytes()  # an imported file exports byte for byte


def _expect_import_error(tmp_path, store, data: bytes, match: str) -> SnapshotCorruptError:
    path = tmp_path / SnapshotId(999, 1).file_name
    path.write_bytes(data)
    with pytest.raises(SnapshotCorruptError, match=match) as info:
        import_checkpoint(store, path)
    assert info.value.path == str(path) and store.ids() == []
    return info.value


def test_import_refuses_a_bad_crc_a_missing_footer_or_a_misplaced_header(tmp_path, store, image):
    good = bytearray(kafka_shaped_checkpoint(write_image(image).values, 1))
    scan = batch.scan_batches(bytes(good))
    flipped = bytearray(good)
    middle = int(scan.positions[2])
    flipped[middle + 100] ^= 1
    err = _expect_import_error(tmp_path, store, bytes(flipped), "CRC")
    assert err.position == middle
    _expect_import_error(tmp_path, store, bytes(good[:int(scan.positions[-1])]), "SnapshotFooter|control batch")
    _expect_import_error(tmp_path, store, bytes(good[:int(scan.positions[-1]) - 7]), "truncated")
    no_header = bytes(good[int(scan.positions[1]):])
    _expect_import_error(tmp_path, store, no_header, "offset 0|control batch")
    fk, fv = codec.encode_control("SnapshotHeaderRecord", 0, {"LastContainedLogTimestamp": 1})
    two_headers = bytes(good[:int(scan.positions[1])]) + batch.build_batch(
        [Record(fk, fv)], base_offset=2, is_control=True) + bytes(good[int(scan.positions[-1]):])
    _expect_import_error(tmp_path, store, two_headers, "SnapshotHeader record that is not the first")
    _expect_import_error(tmp_path, store, b"", "needs a header")


# -- chunked transfer --------------------------------------------------------------------------------

def test_the_transfer_stream_rebuilds_the_snapshot_on_the_receiving_side(tmp_path, store, image):
    manifest, _ = store.write_image((7777, 3), image)
    rng = random.Random(5)
    whole = store.read((7777, 3), 0, 1 << 30)
    with SnapshotStore(tmp_path / "receiver", SMALL) as other:
        receiver = SnapshotReceiver(other, (7777, 3), size=manifest.stream_bytes)
        while receiver.position < manifest.stream_bytes:
            data = store.read((7777, 3), receiver.position, rng.randrange(1, 50_000))
            assert data == whole[receiver.position:receiver.position + len(data)]
            receiver.write(receiver.position, data)
        assert other.ids() == []  # nothing is visible before finish verified it
        received = receiver.finish()
        assert received.stream_crc == manifest.stream_crc and summary(other.load_image()) == summary(image)
    assert store.read((7777, 3), manifest.stream_bytes, 100) == b""


def test_a_damaged_or_disordered_transfer_stores_nothing(tmp_path, store, image):
    manifest, _ = store.write_image((7777, 3), image)
    whole = bytearray(store.read((7777, 3), 0, 1 << 30))
    with SnapshotStore(tmp_path / "receiver", SMALL) as other:
        receiver = SnapshotReceiver(other, (7777, 3))
        receiver.write(0, whole[:1000])
        with pytest.raises(SnapshotTransferError, match="expected 1000"):
            receiver.write(2000, whole[2000:3000])
        whole[len(whole) // 2] ^= 0x10
        receiver.write(1000, whole[1000:])
        with pytest.raises(SnapshotCorruptError, match="CRC"):
            receiver.finish()
        short = SnapshotReceiver(other, (7777, 3))
        short.write(0, whole[:500])
        with pytest.raises(SnapshotCorruptError, match="received 500 bytes"):
            short.finish(manifest.stream_bytes)
        with pytest.raises(SnapshotTransferError):
            short.write(500, b"x")
        assert other.ids() == []


def test_the_raft_snapshot_store_methods_drive_a_transfer(tmp_path, store, image):
    manifest, _ = store.write_image((300, 2), image)
    assert store.size((300, 2)) == manifest.stream_bytes and store.size((1, 1)) is None
    with SnapshotStore(tmp_path / "follower", SMALL) as follower:
        position = 0
        while position < manifest.stream_bytes:
            data = store.read_chunk((300, 2), position, 8192)
            follower.write_chunk((300, 2), position, data)
            position += len(data)
        follower.finish((300, 2), manifest.stream_bytes)
        assert follower.snapshot_ids() == [SnapshotId(300, 2)] and follower.latest_snapshot_id() == (300, 2)
        follower.write_chunk((400, 2), 0, b"partial")
        follower.abort((400, 2))
        with pytest.raises(SnapshotTransferError):
            follower.finish((400, 2), 7)
        assert follower.snapshot_ids() == [SnapshotId(300, 2)]


def test_the_config_refuses_nonsense_and_lmdb_gets_every_option(tmp_path):
    with pytest.raises(ValueError):
        SnapshotStoreConfig(retain_count=0)
    with pytest.raises(ValueError):
        SnapshotStoreConfig(chunk_codec="gzip")
    config = SnapshotStoreConfig(max_dbs=5, max_readers=17, map_size_bytes=3 << 20)
    with SnapshotStore(tmp_path / "s", config) as store:
        assert store.env.max_readers() == 17 and store.env.info()["map_size"] == 3 << 20
        assert store.env.flags()["sync"] and store.env.flags()["metasync"] and not store.env.flags()["writemap"]
