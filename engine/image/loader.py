"""The metadata loader: record bytes (a snapshot, then a log tail) -> deltas -> published images.

Data flow:
    bytes of whole record batches (an mmap'd segment, a snapshot chunk)
      -> metadata_columns.decode_metadata_region   (native: CRC + decode into column arrays)
      -> apply_columns(delta, columns)              (the side stream, then the topic stream: one native
                                                     pass each, in log order)
      -> delta.apply(provenance) -> image           (shares unchanged chunks with the last image)
      -> publishers(delta, image, manifest)

Two streams: NoOpRecords (and transaction markers) change nothing and are only counted. The
records touching topics and configs form the topic stream; the rest (brokers, features, producer
ids, quotas, ACLs, SCRAM, tokens) edit state no topic record reads, so they are applied first, in
their own log order, and a controller's NoOps and broker records do not stop the topic stream's
native pass. (An error is reported for the first failing record of the first stream: with several bad
records, not necessarily the lowest offset.)

The side stream, in log order (``_apply_side_stream``): one native pass (side.apply:
apply_side_stream in csrc/_side.pyx, twin in side_pure.py) applies every record of it the columns
hold whole, straight from its row into the delta, through the MetadataDelta method that writes
that record's state (replay_broker_change, replay_fence, put_broker, replay_producer_ids,
replay_feature_level, replay_client_quota, put_acl / put_scram / put_token and the removals: the
rules are defined once, there, and the generic replay uses them too), with no decoded record and
no fields dict; the NoOps never reach it. It hands back, to be replayed on its own, a record of a
type it does not apply (UnregisterBrokerRecord, RegisterControllerRecord, ZkMigrationStateRecord,
an unknown apiKey), one whose columns do not hold it whole (``extras``: a change with log dirs,
unknown tags; or a version the columns do not decode), or one that fails (an unknown broker, a
stale epoch: the replay on its own raises the typed error, word for word); then the pass goes on.
``LoadManifest.side_records`` counts what it applied: on the production tail, all of its ~170
records (bench/profile_side_stream.py: ~0.4 ms native against ~0.8 ms one by one, of the tail's
~40 ms apply).

A record replayed on its own (what either pass hands back) comes from its row of the decoded
columns when they hold it whole (``_COLUMN_REPLAY``: topics, partitions, partition changes,
configs and topic deletes by the methods below; the side-stream types by side.replay_row, the
twin's step), else from the generic codec. ``LoadManifest.single_types`` counts them by type.

The topic stream, in log order (``_apply_topic_stream``): one native pass (TopicsDelta.apply_stream:
apply_topic_stream in csrc/_image.pyx, twin in index_pure.py) applies every record of it the
columns hold whole, straight into the delta: PartitionChangeRecords (Kafka's merge rules; a
column's chunk copied (owned) through a callback the first time the pass writes it),
ConfigRecords (the delta's config mappings, built through the C API), RemoveTopicRecords (the
topic, its partitions and its configs), and creations: a TopicRecord and the PartitionRecords
after it, appended into the tables' last chunks (KIP-232 epochs from the offsets). It stops at
the first record it does not apply and hands it back, to be replayed on its own: one whose columns
do not hold it whole (``extras``: directories of a change, ELR or adding / removing replicas of a
PartitionRecord, unknown tags, a list longer than the columns hold; or a version the columns do
not decode), one that fails (an unknown topic or partition, a name or id taken: the scalar path
raises the typed error, word for word), a change that moves directories, a PartitionRecord that
replaces a partition, fills a hole, has directories or would move its topic's rows, a TopicRecord
whose index would pass half full; then the pass goes on. A creation of BULK_MIN_RECORDS records or
more (a large CreateTopics) goes in one vectorised step instead (TopicsDelta.bulk_create), as do
all of a snapshot's creations (their epochs come from a tagged field). On the production tail no
topic-stream record is replayed on its own (83 of 455,442 at 100k partitions before: 47 configs,
10 deletes, 26 records of short creations), and with the side pass no record of it at all.

Transactions (Begin/End/AbortTransactionRecord): records between a Begin and its Abort are
dropped; a transaction still open at the end of what was read is held back: the loader applies
nothing from its Begin on, reports that offset (``pending_transaction_offset``) and keeps the whole
batches from the one holding the Begin, which it puts in front of what the next call (or the next
region) reads. A transaction may span any number of batches, regions and calls (Kafka writes one
per CreateTopics too large for a batch). Records of a held batch before the Begin were applied
already and are not applied again. Loading a snapshot, or an image set from outside that already
covers the Begin, drops what is held.

Errors: an undecodable or inapplicable record raises MetadataLoadError naming its offset and
record type. With ``skip_errors=True`` such a record is skipped and counted in the manifest
instead (never a silent crash-loop: the count is published).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kraftlog.engine.image import index as hindex
from kraftlog.engine.image import side
from kraftlog.engine.image.image import MetadataDelta, MetadataImage, Provenance
from kraftlog.engine.image.topics import (
    TOPIC_EPOCH_TAG,
    MetadataReplayError,
    TopicsDelta,
    halves_to_uuid,
    topic_record_epochs,
)
from kraftlog.engine.records import batch, column_fields, metadata_columns
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.layout import ATTRIBUTES_OFFSET, CONTROL_BIT, HEADER_SIZE
from kraftlog.engine.records.metadata_columns import (
    B_BASE_OFFSET,
    B_LAST_OFFSET_DELTA,
    B_POS,
    B_SIZE,
    CHANGE_LIST_COUNTS,
)
from kraftlog.errors import CorruptRecordError, KraftlogError, UndecodableRecordError

API_TOPIC, API_PARTITION, API_PARTITION_CHANGE = 2, 3, 5
API_BEGIN_TXN, API_END_TXN, API_ABORT_TXN = 23, 24, 25
API_CONFIG, API_REMOVE_TOPIC, API_NOOP, API_BROKER_CHANGE = 4, 9, 20, 17
API_FENCE, API_UNFENCE, API_FEATURE, API_PRODUCER_IDS = 7, 8, 12, 15
API_ACL, API_REMOVE_ACL, API_CLIENT_QUOTA = 18, 19, 14
API_SCRAM, API_REMOVE_SCRAM, API_TOKEN, API_REMOVE_TOKEN = 11, 22, 10, 26
API_REGISTER_BROKER = 0
# Which stream each apiKey goes to (apply_columns). NO_STATE: changes nothing (the transaction
# markers are handled by _transaction_mask), counted, never decoded. TOPIC_STREAM: touches topics
# or configs; these stay in log order among themselves (a RemoveTopicRecord drops its name's
# configs, a ConfigRecord may follow for a re-created name). SIDE_STREAM: every other record,
# editing state no topic record reads (brokers, features, quotas, ACLs, ...); an unknown apiKey
# lands here too, and the generic codec reports it.
NO_STATE, TOPIC_STREAM, SIDE_STREAM = 0, 1, 2
# A creation (TopicRecords + PartitionRecords in a row, from a TopicRecord) this long goes in one
# vectorised step (bulk_create, ~0.2 ms whatever its size); a shorter one record by record in the
# native pass (~1 us a topic, ~0.15 us a partition). Measured on the 100k-partition image: even at
# ~1,000 records (3 or 1,000 partitions a topic), both ways ~0.55 ms; 10,000: native 1.9 ms, bulk 0.9.
BULK_MIN_RECORDS = 512
_STREAM_OF_API_KEY = np.full(256, SIDE_STREAM, dtype=np.uint8)
_STREAM_OF_API_KEY[[API_NOOP, API_BEGIN_TXN, API_END_TXN, API_ABORT_TXN]] = NO_STATE
_STREAM_OF_API_KEY[[API_TOPIC, API_PARTITION, API_PARTITION_CHANGE, API_REMOVE_TOPIC, API_CONFIG]] = TOPIC_STREAM


class MetadataLoadError(KraftlogError):
    """A record the loader cannot decode or apply; names the offset and the record type."""

    def __init__(self, message: str, *, offset: int, record_type: str, path: str | None = None):
        where = f"offset {offset}" + (f" in {path}" if path else "")
        super().__init__(f"{where}: {record_type}: {message}")
        self.offset, self.record_type, self.path = offset, record_type, path


@dataclass
class LoadManifest:
    """What one load step did: handed to publishers with the delta and the new image."""

    source: str  # "snapshot" or "log"
    first_offset: int = -1
    last_offset: int = -1
    records: int = 0
    batches: int = 0
    bytes_read: int = 0
    skipped_records: int = 0
    generic_records: int = 0  # records decoded by the generic codec (the rest went through columns)
    generic_types: dict[str, int] = field(default_factory=dict)  # generic_records by record type
    # side-stream records (brokers, features, producer ids, quotas, ACLs, SCRAM, tokens) the side
    # stream's native pass applied from their column rows
    side_records: int = 0
    # records replayed one at a time in Python (from their row of the columns, or generic): what
    # neither native pass (topic stream, side stream) nor a bulk creation applied, by record type
    single_records: int = 0
    single_types: dict[str, int] = field(default_factory=dict)
    state_records: int = 0  # applied records that can change state (not NoOps, not transaction markers)
    skipped: list[tuple[int, str, str]] = field(default_factory=list)  # (offset, type, reason), first 100
    pending_transaction_offset: int | None = None
    target_offset: int | None = None  # where this load will end (e.g. the log end), when known
    elapsed_s: float = 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True)
class HeldTransaction:
    """The whole batches from the one holding an open transaction's Begin to the end of what was read."""

    data: bytes
    begin_offset: int
    batches: int


Publisher = Callable[[MetadataDelta, MetadataImage, LoadManifest], None]
Progress = Callable[[LoadManifest], None]


def _api_name(api_key: int) -> str:
    schema = codec.BY_API_KEY.get(int(api_key))
    return schema.name if schema is not None else f"apiKey {int(api_key)}"


class Loader:
    """Builds images from snapshots and log regions and hands each to the publishers, in order."""

    def __init__(self, image: MetadataImage | None = None, *, publishers: Sequence[Publisher] = (),
                 skip_errors: bool = False, progress: Progress | None = None):
        self.image = image or MetadataImage.empty()
        self.publishers = list(publishers)
        self.skip_errors = skip_errors
        self.progress = progress
        self.held: HeldTransaction | None = None  # an open transaction, completed by a later read

    def load_snapshot(self, buf, *, end_offset: int, epoch: int, start: int = 0, end: int | None = None,
                      path: str | None = None) -> MetadataImage:
        """Replace the image with the snapshot in ``buf`` (its batches, header/footer control records
        included); ``end_offset``/``epoch`` are the snapshot id."""
        manifest = LoadManifest("snapshot")
        started = time.perf_counter()
        self.held = None  # the snapshot replaces everything before its end
        delta = MetadataImage.empty().delta()
        columns = _decode(buf, start, end, path)
        apply_columns(delta, columns, manifest, snapshot_end_offset=end_offset, skip_errors=self.skip_errors,
                      path=path)
        header_timestamp_ms = snapshot_header_timestamp_ms(buf, start, path)
        timestamp_ms = columns.last_timestamp_ms if header_timestamp_ms is None else header_timestamp_ms
        provenance = Provenance(end_offset - 1, epoch, int(timestamp_ms))
        del columns  # the decoded arrays go before _publish returns their memory to the OS
        return self._publish(delta, provenance, manifest,
                             started)

    def replay(self, buf, *, start: int = 0, end: int | None = None, path: str | None = None) -> MetadataImage:
        """Apply the log records in ``buf[start:end]`` (whole batches) on top of the current image."""
        started = time.perf_counter()
        return self.replay_decoded(_decode(buf, start, end, path), path=path, started=started)

    def replay_decoded(self, columns, *, path: str | None = None, started: float | None = None) -> MetadataImage:
        """``replay`` of a region already decoded with ``decode`` (a caller that looks at the
        records' types first decodes once)."""
        manifest = LoadManifest("log")
        started = time.perf_counter() if started is None else started
        delta = self.image.delta()
        self._apply_log(delta, columns, manifest, path)
        provenance = self.image.provenance
        if columns.last_offset >= 0:
            last = _processed_up_to(manifest, columns)
            provenance = Provenance(last, int(columns.last_epoch), int(columns.last_timestamp_ms))
        del columns  # the decoded arrays go before _publish returns their memory to the OS
        return self._publish(delta, provenance, manifest, started)

    def replay_regions(self, regions, *, path: str | None = None, target_offset: int | None = None) -> MetadataImage:
        """Apply several regions of whole batches (e.g. consecutive log reads) as one delta, published
        once. Stops early at a transaction still open at the end of a region (reported in the
        manifest): the caller re-reads from ``manifest.pending_transaction_offset`` later."""
        manifest = LoadManifest("log", target_offset=target_offset)
        started = time.perf_counter()
        delta = self.image.delta()
        provenance = self.image.provenance
        for buf in regions:
            columns = _decode(buf, 0, None, path)
            manifest.bytes_read += len(buf)
            self._apply_log(delta, columns, manifest, path)
            if columns.last_offset >= 0:
                last = _processed_up_to(manifest, columns)
                provenance = Provenance(last, int(columns.last_epoch), int(columns.last_timestamp_ms))
            if self.progress is not None:
                manifest.elapsed_s = time.perf_counter() - started
                self.progress(manifest)
            del columns  # the decoded arrays go before the next region is decoded
        return self._publish(delta, provenance, manifest, started)

    def _apply_log(self, delta: MetadataDelta, columns, manifest: LoadManifest, path: str | None) -> None:
        """apply_columns for log records, behind the batches of a transaction held open by the last
        read (decoded again with these); holds this read's open transaction in turn."""
        held, self.held = self.held, None
        if held is not None and held.begin_offset <= self.image.provenance.offset:
            held = None  # the image was replaced by one that covers the transaction
        if held is not None and len(columns.batches):
            first, end = int(columns.batches[0, B_POS]), _batches_end(columns.batches)
            columns = _decode(held.data + bytes(memoryview(columns.source)[first:end]), 0, None, path)
            manifest.batches -= held.batches  # counted when they were first read
        elif held is not None:
            self.held = held  # nothing new was read
            return
        skip_below = -1 if held is None else held.begin_offset
        apply_columns(delta, columns, manifest, snapshot_end_offset=None, skip_errors=self.skip_errors, path=path,
                      skip_below=skip_below)
        if manifest.pending_transaction_offset is not None:
            self.held = _hold(columns, manifest.pending_transaction_offset)

    def _publish(self, delta: MetadataDelta, provenance: Provenance, manifest: LoadManifest,
                 started: float) -> MetadataImage:
        return self.publish_applied(delta, delta.apply(provenance), manifest, started)

    def publish_applied(self, delta: MetadataDelta, image: MetadataImage, manifest: LoadManifest,
                        started: float) -> MetadataImage:
        """Make ``image`` (``delta`` applied onto this loader's image) the current one and hand it
        to the publishers: the end of every load, and the active controller's adoption of the
        image it built when it checked its own records (controller.py, ImagePublisher)."""
        if manifest.state_records >= TRIM_AFTER_RECORDS:
            _release_free_memory()
        manifest.elapsed_s = time.perf_counter() - started
        self.image = image
        if self.progress is not None:
            self.progress(manifest)
        for publish in self.publishers:
            publish(delta, image, manifest)
        return image


# A large load frees hundreds of MB of decoder temporaries; glibc keeps most of it in the process
# (after the first big free it raises its mmap threshold, so later arrays come from the heap).
# malloc_trim(0) hands it back: measured at 1M partitions, RSS growth 181 MB -> 63 MB, which is the
# image itself. A no-op where there is no glibc. Counted in records that can change state: a tail
# of NoOps builds nothing to keep, and trimming after it only makes the next load fault its
# temporaries back in (300k NoOps: 24 ms with the trim, 12 ms without).
TRIM_AFTER_RECORDS = 100_000


def _release_free_memory() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def snapshot_header_timestamp_ms(buf, start: int = 0, path: str | None = None) -> int | None:
    """The LastContainedLogTimestamp of the SnapshotHeader opening the snapshot stream at
    ``buf[start:]``: the time of the last log record the snapshot covers, which is what Kafka's
    image provenance carries (the batches' own timestamps say when the snapshot was written).
    None when the stream does not open with a SnapshotHeader control record (values without framing)."""
    view = memoryview(buf)
    if len(view) - start < HEADER_SIZE:
        return None
    attributes = int.from_bytes(view[start + ATTRIBUTES_OFFSET:start + ATTRIBUTES_OFFSET + 2], "big")
    if not attributes & CONTROL_BIT:
        return None
    try:
        first = next(iter(batch.iter_records(buf, start)), None)
        if first is None or first.key is None or codec.control_type_of(first.key) != batch.CONTROL_SNAPSHOT_HEADER:
            return None
        return int(codec.decode_control(first.key, first.value).data["LastContainedLogTimestamp"])
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"snapshot header: {exc.reason}", position=start, path=path) from exc


def decode(buf, *, path: str | None = None):
    """The columns of the whole batches in ``buf`` (for Loader.replay_decoded); CorruptRecordError
    when they do not decode."""
    return _decode(buf, 0, None, path)


def _decode(buf, start: int, end: int | None, path: str | None):
    try:
        return metadata_columns.decode_metadata_region(buf, start, end, path=path)
    except UndecodableRecordError:
        raise
    except KraftlogError as exc:  # e.g. a decompression limit
        raise CorruptRecordError(str(exc), path=path) from exc


def _processed_up_to(manifest: LoadManifest, columns) -> int:
    """The offset an image is at after ``columns``: their last, or the one before a transaction
    still open (everything before its Begin is applied, nothing from it)."""
    pending = manifest.pending_transaction_offset
    return columns.last_offset if pending is None else pending - 1


def _batches_end(batches: np.ndarray) -> int:
    return int(batches[-1, B_POS] + batches[-1, B_SIZE])


def _hold(columns, begin_offset: int) -> HeldTransaction:
    """The batches of ``columns`` from the one holding ``begin_offset`` on, copied out of the input."""
    batches = columns.batches
    k = int(np.searchsorted(batches[:, B_BASE_OFFSET] + batches[:, B_LAST_OFFSET_DELTA], begin_offset))
    start = int(batches[k, B_POS])
    return HeldTransaction(bytes(memoryview(columns.source)[start:_batches_end(batches)]), begin_offset,
                           len(batches) - k)


# -- applying decoded columns ---------------------------------------------------------------------
def apply_columns(delta: MetadataDelta, cols, manifest: LoadManifest, *, snapshot_end_offset: int | None,
                  skip_errors: bool = False, path: str | None = None, skip_below: int = -1) -> None:
    """Apply the records of ``cols`` (those at ``skip_below`` or later) to ``delta``; sets the
    manifest's ``pending_transaction_offset`` when a transaction is still open at the end."""
    n = len(cols.offsets)
    manifest.batches += int(cols.batch_count)
    manifest.pending_transaction_offset = None
    if n == 0:
        return
    keep = _transaction_mask(cols, manifest)
    if skip_below >= 0:  # records before a held transaction's Begin were applied when first read
        keep = (cols.offsets >= skip_below) & (True if keep is None else keep)
    if manifest.first_offset < 0:
        first = 0 if skip_below < 0 else int(np.searchsorted(cols.offsets, skip_below))  # offsets rise
        if first < n:
            manifest.first_offset = int(cols.offsets[first])
    ctx = _Context(delta, cols, manifest, snapshot_end_offset, skip_errors, path)
    stream = _STREAM_OF_API_KEY[np.clip(cols.api_keys, 0, len(_STREAM_OF_API_KEY) - 1)]
    if keep is None and bool((stream == TOPIC_STREAM).all()):  # a snapshot, CreateTopics: no copies
        manifest.state_records += n
        _apply_topic_stream(ctx, np.arange(n), cols.api_keys)
    else:
        if keep is not None:
            stream[~keep] = NO_STATE
        manifest.state_records += int(np.count_nonzero(stream))  # NO_STATE is 0
        _apply_side_stream(ctx, np.flatnonzero(stream == SIDE_STREAM))
        topical = np.flatnonzero(stream == TOPIC_STREAM)
        _apply_topic_stream(ctx, topical, cols.api_keys[topical])
    applied = np.flatnonzero(keep) if keep is not None else None
    last = int(cols.offsets[applied[-1]]) if applied is not None and len(applied) else int(cols.offsets[-1])
    if applied is None or len(applied):
        manifest.last_offset = max(manifest.last_offset, last)
    manifest.records += n if keep is None else int(keep.sum())


def _apply_side_stream(ctx: _Context, indexes: np.ndarray) -> None:
    """The side stream (record indexes ``indexes``, in log order): the side pass applies what the
    columns hold whole and hands back, one at a time, what it does not (replayed on its own)."""
    n = len(indexes)
    if not n:
        return
    indexes = np.ascontiguousarray(indexes, dtype=np.int64)
    pos = 0
    while pos < n:
        stop = ctx.side_pass(indexes, pos)
        ctx.manifest.side_records += stop - pos
        if stop >= n:
            break
        ctx.replay_one(int(indexes[stop]))
        pos = stop + 1


def _apply_topic_stream(ctx: _Context, indexes: np.ndarray, kinds: np.ndarray) -> None:
    """The topic stream (record indexes ``indexes`` of apiKeys ``kinds``) in log order: the native
    pass applies PartitionChangeRecords and hands back, one at a time, what it does not apply (a
    creation goes in one step with the PartitionRecords that follow its TopicRecord)."""
    n = len(indexes)
    creating = (kinds == API_TOPIC) | (kinds == API_PARTITION)
    # where each creation ends: the next record that is neither a TopicRecord nor a PartitionRecord
    others = np.flatnonzero(~creating)
    indexes = np.ascontiguousarray(indexes, dtype=np.int64)
    pos = 0
    while pos < n:
        pos = ctx.native_pass(indexes, pos)
        if pos >= n:
            break
        k = int(np.searchsorted(others, pos))
        end = int(others[k]) if k < len(others) else n
        # the pass stops at a TopicRecord opening a run this long (and, loading a snapshot, at any
        # creation): one vectorised step; any other record it stops at goes on its own
        if creating[pos] and (ctx.snapshot_end_offset is not None
                              or (kinds[pos] == API_TOPIC and end - pos >= BULK_MIN_RECORDS)):
            ctx.create_run(indexes[pos:end])
            pos = end
        else:
            ctx.replay_one(int(indexes[pos]))
            pos += 1


def _transaction_mask(cols, manifest: LoadManifest) -> np.ndarray | None:
    """None when the region holds no transaction marker; else which records to apply."""
    markers = np.flatnonzero((cols.api_keys >= API_BEGIN_TXN) & (cols.api_keys <= API_ABORT_TXN))
    if not len(markers):
        return None
    keep = np.ones(len(cols.api_keys), dtype=bool)
    open_at = None
    for i in markers.tolist():
        kind = int(cols.api_keys[i])
        if kind == API_BEGIN_TXN:
            open_at = i
        elif open_at is not None:
            if kind == API_ABORT_TXN:
                keep[open_at:i + 1] = False
            open_at = None
    if open_at is not None:
        keep[open_at:] = False
        manifest.pending_transaction_offset = int(cols.offsets[open_at])
    return keep


class _Context:
    def __init__(self, delta, cols, manifest, snapshot_end_offset, skip_errors, path):
        self.delta, self.cols, self.manifest = delta, cols, manifest
        self.snapshot_end_offset, self.skip_errors, self.path = snapshot_end_offset, skip_errors, path
        self.stream_tables = None  # the native pass's view of the columns, made at its first call
        self.side_tables = None  # the side pass's

    def topic_epoch(self, i: int, data) -> int | None:
        """KIP-232 epoch record ``i`` gives its topic: log replay, the record's offset; a snapshot,
        the epoch its TopicRecord carries (else the snapshot's end offset), and none from a
        PartitionRecord."""
        if self.snapshot_end_offset is None:
            return int(self.cols.offsets[i])
        if int(self.cols.api_keys[i]) != API_TOPIC:
            return None
        raw = data.get(codec.UNKNOWN_TAGS, {}).get(TOPIC_EPOCH_TAG)
        if raw is not None and len(raw) == 8:
            return int.from_bytes(raw, "big", signed=True)
        return self.snapshot_end_offset

    def decode(self, i: int):
        pos, length = int(self.cols.value_pos[i]), int(self.cols.value_len[i])
        return codec.decode_record(self.cols.data, pos, pos + length)

    def one(self, i: int) -> None:
        """Decode record ``i`` with the generic codec and replay it."""
        offset, api_key = int(self.cols.offsets[i]), int(self.cols.api_keys[i])
        self.manifest.generic_records += 1
        name = _api_name(api_key)
        self.manifest.generic_types[name] = self.manifest.generic_types.get(name, 0) + 1
        try:
            record = self.decode(i)
            self.delta.replay(record.record_type, record.data, topic_epoch=self.topic_epoch(i, record.data))
        except (CorruptRecordError, MetadataReplayError) as exc:
            self.fail(offset, _api_name(api_key), exc)

    def replay_one(self, i: int) -> None:
        """Replay record ``i`` on its own: from the decoded columns when they hold it whole, else
        through the generic codec (which also reports what the columns refuse to guess)."""
        api_key = int(self.cols.api_keys[i])
        self.manifest.single_records += 1
        name = _api_name(api_key)
        self.manifest.single_types[name] = self.manifest.single_types.get(name, 0) + 1
        replay = _COLUMN_REPLAY.get(api_key)
        if replay is None:
            self.one(i)
            return
        table = getattr(self.cols, replay.table)
        row = int(self.cols.kind_rows[i])
        # kind_rows points into ``other`` for a version the columns do not decode: record_index tells
        if row >= len(table.record_index) or int(table.record_index[row]) != i or bool(table.extras[row]):
            self.one(i)
            return
        try:
            replay(self, table, row)
        except MetadataReplayError as exc:
            self.fail(int(self.cols.offsets[i]), _api_name(int(self.cols.api_keys[i])), exc)

    def config(self, g, row: int) -> None:
        """A ConfigRecord (topic configs of every create in a tail, broker configs)."""
        blob = g.config_blob
        value = None if bool(g.value_null[row]) else _blob_text(blob, g.value_offsets, row)
        self.delta.replay_config(int(g.resource_type[row]), _blob_text(blob, g.resource_name_offsets, row),
                                 _blob_text(blob, g.name_offsets, row), value)

    config.table = "configs"

    def remove_topic(self, r, row: int) -> None:
        """A RemoveTopicRecord: the topic, its partitions and its configs go (MetadataDelta)."""
        hi, lo = r.topic_id[row].tolist()
        self.delta.replay_remove_topic(halves_to_uuid(hi, lo))

    remove_topic.table = "remove_topics"

    def topic(self, t, row: int) -> None:
        """A TopicRecord of a create too small for bulk_create (one with tagged fields has extras:
        a snapshot's epoch tag is read by the generic path)."""
        hi, lo = t.topic_id[row].tolist()
        self.delta.replay_topic(halves_to_uuid(hi, lo), _blob_text(t.name_blob, t.name_offsets, row),
                                self.topic_epoch(int(t.record_index[row]), {}))

    topic.table = "topics"

    def partition(self, p, row: int) -> None:
        """A PartitionRecord of a short create, or of a topic created in an earlier region; one
        with adding / removing replicas, ELR or unknown tags has extras (generic codec)."""
        hi, lo = p.topic_id[row].tolist()
        directories = p.directories[row, :16 * int(p.directory_count[row])].tobytes()
        self.delta.replay_partition(
            halves_to_uuid(hi, lo), int(p.partition_id[row]), self.topic_epoch(int(p.record_index[row]), {}),
            replicas=p.replicas[row, :int(p.replica_count[row])].tolist(),
            isr=p.isr[row, :int(p.isr_count[row])].tolist(), leader=int(p.leader[row]),
            leader_epoch=int(p.leader_epoch[row]), partition_epoch=int(p.partition_epoch[row]),
            leader_recovery_state=int(p.leader_recovery_state[row]),
            directories=tuple(uuid.UUID(bytes=directories[k:k + 16]) for k in range(0, len(directories), 16)))

    partition.table = "partitions"

    def partition_change(self, ch, row: int) -> None:
        """A PartitionChangeRecord the native pass hands back (an unknown topic or partition, a
        replica change that moves directories): leader -2 and recovery state -1 mean unchanged, a
        list count -1 a null (unchanged) list. One with directories or unknown tags has extras
        (generic codec)."""
        hi, lo = ch.topic_id[row].tolist()
        lists = {name: _change_list(ch, name, count, row) for name, count in CHANGE_LIST_COUNTS.items()}
        self.delta.replay_partition_change(
            halves_to_uuid(hi, lo), int(ch.partition_id[row]), leader=int(ch.leader[row]),
            leader_recovery_state=int(ch.leader_recovery_state[row]), **lists)

    partition_change.table = "partition_changes"

    def fail(self, offset: int, record_type: str, exc: Exception) -> None:
        if not self.skip_errors:
            raise MetadataLoadError(str(exc), offset=offset, record_type=record_type, path=self.path) from exc
        self.manifest.skipped_records += 1
        if len(self.manifest.skipped) < 100:
            self.manifest.skipped.append((offset, record_type, str(exc)))

    # -- TopicRecord + PartitionRecord runs ----------------------------------------------------------
    def create_run(self, indexes: np.ndarray) -> None:
        """A run of TopicRecords and PartitionRecords: in bulk where its shape allows."""
        is_topic = self.cols.api_keys[indexes] == API_TOPIC
        # PartitionRecords before the run's first TopicRecord belong to a topic created earlier (a
        # region boundary fell inside its creation): they go one by one, the rest in bulk.
        lead = int(np.argmax(is_topic)) if is_topic.any() else len(indexes)
        for i in indexes[:lead].tolist():
            self.replay_one(i)
        rest = indexes[lead:]
        if len(rest) >= BULK_MIN_RECORDS and self.bulk_create(rest, is_topic[lead:]):
            return
        for i in rest.tolist():
            self.replay_one(i)

    def bulk_create(self, indexes: np.ndarray, is_topic: np.ndarray) -> bool:
        cols = self.cols
        rows = cols.kind_rows[indexes]
        t_rows, p_rows = rows[is_topic], rows[~is_topic]
        topics, parts = cols.topics, cols.partitions
        if not len(t_rows):
            return False
        names_blob = bytes(topics.name_blob)
        offsets = topics.name_offsets
        names = _names_at(names_blob, offsets, t_rows)
        name_hashes = hindex.hash_names(names_blob, np.ascontiguousarray(offsets, dtype=np.int64))[t_rows]
        topic_idx = indexes[is_topic]
        if self.snapshot_end_offset is None:
            epochs, partition_epochs = cols.offsets[topic_idx], cols.offsets[indexes[~is_topic]]
        else:
            epochs, partition_epochs = _snapshot_topic_epochs(cols, topic_idx, offsets[t_rows + 1] - offsets[t_rows],
                                                              self.snapshot_end_offset), None
            if epochs is None:
                return False  # TopicRecords with other tagged fields: the generic path keeps them
        # Every partition goes in whole columns (directories too); those with extras (ELR, adding/
        # removing replicas, ...) are then replayed again by the generic codec, which overwrites
        # their row in full.
        plain = slice(None) if _is_all_rows(p_rows, len(parts.partition_id)) else p_rows
        extras = parts.extras[p_rows]
        extra_idx = indexes[~is_topic][extras] if extras.any() else ()  # a snapshot's are rare: no 1M-row copy
        ids = topics.topic_id.view(np.int64)
        pids = parts.topic_id.view(np.int64)
        ok = self.delta.topics.bulk_create(
            id_hi=ids[t_rows, 0], id_lo=ids[t_rows, 1], names=names, name_hashes=name_hashes,
            topic_epochs=epochs.astype(np.int64),
            partitions={
                "topic_hi": pids[plain, 0], "topic_lo": pids[plain, 1],
                "partition_id": parts.partition_id[plain], "leader": parts.leader[plain],
                "leader_epoch": parts.leader_epoch[plain], "partition_epoch": parts.partition_epoch[plain],
                "leader_recovery_state": parts.leader_recovery_state[plain],
                "replicas": parts.replicas[plain], "isr": parts.isr[plain],
                **self._directories(parts, plain),
            }, partition_epochs=partition_epochs)
        if not ok:
            return False
        for i in np.asarray(extra_idx, dtype=np.int64).tolist():
            self.one(i)
        self.delta.changed.add("topics")
        return True

    @staticmethod
    def _directories(parts, plain) -> dict:
        """The directory columns for bulk_create, only when a row has some (W*16 bytes per row
        would otherwise be copied for nothing whenever ``plain`` picks rows)."""
        counts = parts.directory_count[plain]
        if not counts.any():
            return {}
        return {"directories": parts.directories[plain], "directory_count": counts}

    # -- the side stream's pass -----------------------------------------------------------------------
    def side_pass(self, indexes: np.ndarray, pos: int) -> int:
        """The side pass over ``indexes[pos:]``; returns where it stopped (see side.apply)."""
        if self.side_tables is None:
            self.side_tables = side.side_tables(self.cols)
        return side.apply(self.delta, self.side_tables, self.cols.api_keys, self.cols.kind_rows, indexes, pos)

    # -- the native pass: PartitionChangeRecords, ConfigRecords, RemoveTopicRecords -------------------
    def native_pass(self, indexes: np.ndarray, pos: int) -> int:
        """The native pass over ``indexes[pos:]``; returns where it stopped (see TopicsDelta.apply_stream)."""
        cols, delta = self.cols, self.delta
        if self.stream_tables is None:
            self.stream_tables = TopicsDelta.stream_tables(cols)
        offsets = cols.offsets if self.snapshot_end_offset is None else None
        stop, topics_changed, configs_changed = delta.topics.apply_stream(
            self.stream_tables, delta.configs, cols.api_keys, cols.kind_rows, indexes, pos, offsets=offsets,
            bulk_min_records=BULK_MIN_RECORDS)
        if topics_changed:
            delta.changed.add("topics")
        if configs_changed:
            delta.changed.add("configs")
        return stop


# apiKey -> the _Context method replaying that record from its kind's table row (``.table``)
_COLUMN_REPLAY = {API_CONFIG: _Context.config, API_REMOVE_TOPIC: _Context.remove_topic, API_TOPIC: _Context.topic,
                  API_PARTITION: _Context.partition, API_PARTITION_CHANGE: _Context.partition_change}


def _side_row(table: str) -> Callable:
    """A side-stream record the side pass handed back (one that fails: an unknown broker, a stale
    epoch), replayed from its row by the twin's step (side.replay_row), which raises the typed error."""
    def replay(ctx: _Context, t, row: int) -> None:
        side.replay_row(ctx.delta, t, row)

    replay.table = table
    return replay


_COLUMN_REPLAY.update({api_key: _side_row(table) for api_key, table in side.TABLE_OF_API_KEY.items()})


_blob_text = column_fields.text


def _change_list(ch, name: str, count: str, row: int) -> list[int] | None:
    n = int(getattr(ch, count)[row])
    return None if n < 0 else getattr(ch, name)[row, :n].tolist()


def _names_at(blob: bytes, offsets: np.ndarray, rows: np.ndarray) -> list[str]:
    """The names of ``rows`` in ``blob`` (name r: bytes offsets[r]:offsets[r + 1]), cut and
    decoded in one native call (a 1M-partition snapshot's 100k names: ~15-30 ms of str slices in
    Python -> a few ms)."""
    return hindex.names_at(blob, np.ascontiguousarray(offsets, dtype=np.int64),
                           np.ascontiguousarray(rows, dtype=np.int32))


def _is_all_rows(rows: np.ndarray, total: int) -> bool:
    """True when ``rows`` is 0..total-1 in order (then whole columns are used without a copy)."""
    return len(rows) == total and (total == 0 or (rows[0] == 0 and rows[-1] == total - 1
                                                  and bool((np.diff(rows) == 1).all())))


def _snapshot_topic_epochs(cols, topic_idx: np.ndarray, name_lengths: np.ndarray, default: int) -> np.ndarray | None:
    """Topic epochs of snapshot TopicRecords: the tagged epoch where present, else ``default``.
    None when some TopicRecord carries tagged fields other than exactly ours."""
    epochs, other = topic_record_epochs(np.frombuffer(cols.data, dtype=np.uint8), cols.value_pos[topic_idx],
                                        cols.value_len[topic_idx], name_lengths, default)
    return None if other.any() else epochs
