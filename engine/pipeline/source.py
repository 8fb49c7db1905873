"""The ``kraftlog`` PySpark data source (pyspark >= 4.1: Python data sources with filter pushdown).

    from kraftlog.engine.pipeline.source import register
    register(spark)
    df = spark.read.format("kraftlog").load(["/data/fleet"])            # batch
    q = spark.readStream.format("kraftlog").load("/data/c1").writeStream...  # tail a live log

Input partitions are the splits of inputs.plan (segments, or batch-aligned ranges of large ones);
``read`` yields pyarrow RecordBatches built by rows.to_record_batch from the native decoders.

Options (all optional):
    recordTypes   comma-separated record names to keep (e.g. "PartitionRecord,PartitionChangeRecord")
    startOffset   first log offset to keep;  endOffset: keep offsets below it
    clusters      comma-separated cluster names to keep
    splitBytes    byte size of one input partition (default 32 MiB)
    onCorrupt     "fail" (default: the job fails naming file and position) or "skip" (skip the bad
                  bytes and emit a ``__corrupt__`` marker row for them)
    maxRecordsPerTrigger (streaming) cap on records per micro-batch (whole batches; at least one)

Filter pushdown (DataSourceReader.pushFilters, pyspark 4.1+; needs
spark.sql.python.filterPushdown.enabled=true, which ``register`` sets): ``record_type`` (=, IN),
``offset`` (=, <, <=, >, >=) and ``cluster`` (=, IN) are applied by the reader (clusters and
offsets also prune whole splits) and are not evaluated again by Spark.

Streaming (DataSourceStreamReader + SupportsTriggerAvailableNow): the offset is
``{"<log directory>": next log offset}``; ``latestOffset`` walks new batch headers from where the
last call stopped; with Trigger.AvailableNow the end of every directory is fixed when the query
starts and micro-batches (capped by maxRecordsPerTrigger) run until it is reached.
"""

from __future__ import annotations

import json
import mmap
import os

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from kraftlog.engine.pipeline import inputs
from kraftlog.engine.pipeline.reader import ON_CORRUPT, read_split
from kraftlog.engine.pipeline.rows import API_KEYS, ROW_FIELDS, RowFilter
from kraftlog.engine.records import batch

NAME = "kraftlog"

_SPARK_TYPES = {"string": "STRING", "int64": "BIGINT", "int32": "INT", "int16": "SMALLINT", "int8": "TINYINT",
                "bool": "BOOLEAN", "timestamp[us, tz=UTC]": "TIMESTAMP", "list<item: int32>": "ARRAY<INT>",
                "list<item: string>": "ARRAY<STRING>"}
SCHEMA_DDL = ", ".join(f"{name} {_SPARK_TYPES[str(kind)]}" for name, kind in ROW_FIELDS)


def register(spark) -> None:
    """Register the data source on a session (and enable Python filter pushdown, which it uses)."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(KraftlogDataSource)


def _paths(options) -> list[str]:
    if "paths" in options:
        paths = json.loads(options["paths"])
        if "path" in options:
            paths = [options["path"], *paths]
        return paths
    if "path" in options:
        return [options["path"]]
    raise inputs.PipelineInputError("no path: use spark.read.format('kraftlog').load(path or [paths])")


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


class _Settings:
    """Options parsed once on the driver; picklable (sent to the executors with the reader)."""

    def __init__(self, options):
        self.paths = _paths(options)
        types = _csv(options.get("recordTypes"))
        unknown = [t for t in types or () if t not in API_KEYS]
        if unknown:
            raise inputs.PipelineInputError(f"unknown record types {unknown}; known: {sorted(API_KEYS)}")
        self.api_keys = None if types is None else {API_KEYS[t] for t in types}
        self.low = int(options["startOffset"]) if "startOffset" in options else None
        self.high = int(options["endOffset"]) if "endOffset" in options else None
        clusters = _csv(options.get("clusters"))
        self.clusters = None if clusters is None else set(clusters)
        self.split_bytes = int(options.get("splitBytes", inputs.SPLIT_BYTES))
        self.on_corrupt = options.get("onCorrupt", "fail")
        if self.on_corrupt not in ON_CORRUPT:
            raise inputs.PipelineInputError(f"onCorrupt must be one of {ON_CORRUPT}, not {self.on_corrupt!r}")
        max_records = options.get("maxRecordsPerTrigger")
        self.max_records = int(max_records) if max_records is not None else None

    def row_filter(self) -> RowFilter:
        return RowFilter(None if self.api_keys is None else frozenset(self.api_keys), self.low, self.high)


class KraftlogDataSource(DataSource):
    """spark.read.format("kraftlog"): metadata records of log directories and snapshot files."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return KraftlogReader(_Settings(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KraftlogStreamReader(_Settings(self.options), schema)


def _arrow_schema(schema: StructType):
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


class _SplitPartition(InputPartition):
    def __init__(self, split: inputs.Split, end_position: int | None = None):
        super().__init__(split.path)
        self.split = split
        self.end_position = end_position


class KraftlogReader(DataSourceReader):
    def __init__(self, settings: _Settings, schema: StructType):
        self.settings = settings
        self.schema = schema

    def pushFilters(self, filters):
        for f in filters:
            column = f.attribute[0] if len(f.attribute) == 1 else None
            if column == "record_type" and self._types(f):
                continue
            if column == "offset" and self._offsets(f):
                continue
            if column == "cluster" and self._clusters(f):
                continue
            yield f

    def _types(self, f) -> bool:
        names = _value_set(f)
        if names is None:
            return False
        if not all(isinstance(n, str) and n in API_KEYS for n in names):
            return False  # e.g. the __corrupt__ marker: Spark evaluates it on the rows
        keys = {API_KEYS[n] for n in names}
        s = self.settings
        s.api_keys = keys if s.api_keys is None else s.api_keys & keys
        return True

    def _offsets(self, f) -> bool:
        s = self.settings
        value = getattr(f, "value", None)
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        if isinstance(f, EqualTo):
            low, high = value, value + 1
        elif isinstance(f, GreaterThan):
            low, high = value + 1, None
        elif isinstance(f, GreaterThanOrEqual):
            low, high = value, None
        elif isinstance(f, LessThan):
            low, high = None, value
        elif isinstance(f, LessThanOrEqual):
            low, high = None, value + 1
        else:
            return False
        if low is not None:
            s.low = low if s.low is None else max(s.low, low)
        if high is not None:
            s.high = high if s.high is None else min(s.high, high)
        return True

    def _clusters(self, f) -> bool:
        names = _value_set(f)
        if names is None:
            return False
        s = self.settings
        s.clusters = names if s.clusters is None else s.clusters & names
        return True

    def partitions(self):
        s = self.settings
        splits = inputs.plan(s.paths, split_bytes=s.split_bytes, low=s.low, high=s.high, clusters=s.clusters)
        if s.api_keys is not None and not s.api_keys:
            return []
        return [_SplitPartition(split) for split in splits]

    def read(self, partition: _SplitPartition):
        if not isinstance(partition, _SplitPartition):
            return  # no splits planned: Spark still runs one task, with a placeholder partition
        yield from read_split(partition.split, self.settings.row_filter(), on_corrupt=self.settings.on_corrupt,
                              schema=_arrow_schema(self.schema), end_position=partition.end_position)


class _Cursor:
    """Where the driver's last header walk of one directory stopped."""

    def __init__(self, segment_base: int, position: int, next_offset: int):
        self.segment_base, self.position, self.next_offset = segment_base, position, next_offset


class KraftlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Tails log directories: offsets are {"<directory>": next log offset}."""

    def __init__(self, settings: _Settings, schema: StructType):
        self.settings = settings
        self.schema = schema
        self.dirs, _ = inputs.discover(settings.paths)
        self.cursors: dict[str, _Cursor] = {}
        self.boundaries: dict[str, dict[int, tuple[int, int]]] = {}  # dir -> offset -> (segment base, position)
        self.target: dict | None = None

    # -- offsets ---------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        start = self.settings.low
        return {d.path: max(inputs.log_start_offset(d.path), start or 0) for d in self.dirs}

    def getDefaultReadLimit(self):
        if self.settings.max_records is not None:
            return ReadMaxRows(self.settings.max_records)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {d.path: self._walk(d.path, None) for d in self.dirs}

    def latestOffset(self, start: dict, limit) -> dict:
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        out = {}
        for d in self.dirs:
            begin = int(start.get(d.path, 0))
            cap = None if self.target is None else self.target[d.path]
            out[d.path] = self._walk(d.path, budget, begin=begin, cap=cap)
        return out

    def reportLatestOffset(self):
        return {d.path: self.cursors[d.path].next_offset for d in self.dirs if d.path in self.cursors}

    def _walk(self, directory: str, budget: int | None, *, begin: int | None = None, cap: int | None = None) -> int:
        """The end offset of whole batches available after ``begin`` (at most ``budget`` records past
        it, but at least one batch; never past ``cap``), recording batch boundaries on the way."""
        self._advance(directory)
        end = self.cursors[directory].next_offset if directory in self.cursors else 0
        if cap is not None:
            end = min(end, cap)
        if self.settings.high is not None:
            end = min(end, self.settings.high)
        if begin is None:
            return end
        if end <= begin:
            return begin  # nothing new: Spark sees the start again and runs no batch
        if budget is None or begin + max(budget, 1) >= end:
            return end
        later = [o for o in self.boundaries.get(directory, {}) if begin < o <= end]
        fits = [o for o in later if o <= begin + budget]
        return max(fits) if fits else min(later, default=end)

    def _advance(self, directory: str) -> None:
        """Walk batch headers written since the last call (no CRC: the executors check it)."""
        segments = inputs.segment_files(directory)
        if not segments:
            return
        cursor = self.cursors.get(directory)
        bounds = self.boundaries.setdefault(directory, {})
        if cursor is None:
            first = max(inputs.log_start_offset(directory), segments[0][0])
            base, path = _segment_for(segments, first)
            position, _ = inputs.segment_position(path, first)
            cursor = self.cursors[directory] = _Cursor(base, position, first)
            bounds[first] = (base, position)
        for base, path in segments:
            if base < cursor.segment_base:
                continue
            if base > cursor.segment_base:
                if cursor.next_offset < base:
                    return  # the previous segment is not complete yet
                cursor.segment_base, cursor.position = base, 0
            size = os.path.getsize(path)
            if size > cursor.position:
                with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
                    scan = batch.scan_batches(mm, cursor.position, size, verify_crc=False)
                for pos, last, width in zip(scan.positions.tolist(), scan.last_offsets.tolist(),
                                            scan.size_bytes.tolist(), strict=True):
                    bounds[last + 1] = (base, pos + width)
                if scan.batch_count:
                    cursor.next_offset = int(scan.last_offsets[-1]) + 1
                cursor.position = scan.valid_end
                del scan
            bounds.setdefault(cursor.next_offset, (base, cursor.position))

    def partitions(self, start: dict, end: dict):
        parts = []
        for d in self.dirs:
            low, high = int(start.get(d.path, 0)), int(end.get(d.path, 0))
            if high <= low:
                continue
            parts.extend(self._ranges(d, low, high))
        return parts

    def _ranges(self, d: inputs.LogDir, low: int, high: int) -> list[_SplitPartition]:
        """One partition per segment holding offsets in [low, high), with exact byte ranges."""
        segments = inputs.segment_files(d.path)
        out = []
        for k, (base, path) in enumerate(segments):
            next_base = segments[k + 1][0] if k + 1 < len(segments) else None
            if next_base is not None and next_base <= low:
                continue
            if base >= high:
                break
            start_pos = 0 if base >= low else self._position(d.path, path, base, low)
            end_pos = None
            if next_base is None or next_base > high:
                end_pos = self._position(d.path, path, base, high, end=True)
            split = inputs.Split(d.cluster, "log", path, start_pos, -1, max(base, low), high, False,
                                 inputs.log_start_offset(d.path))
            out.append(_SplitPartition(split, end_pos if end_pos is not None else os.path.getsize(path)))
        return out

    def _position(self, directory: str, path: str, base: int, offset: int, *, end: bool = False) -> int:
        """Byte position in a segment where the batch holding ``offset`` starts (``end``: where the
        batches below ``offset`` end). Known batch boundaries answer at once; else (after a restart
        from a checkpoint) the segment's headers are walked."""
        known = self.boundaries.get(directory, {}).get(offset)
        if known is not None and known[0] == base:
            return known[1]
        if end:
            return inputs.segment_end_position(path, offset)
        position, _ = inputs.segment_position(path, offset)
        return position

    def read(self, partition: _SplitPartition):
        if not isinstance(partition, _SplitPartition):
            return
        split = partition.split
        row_filter = RowFilter(None if self.settings.api_keys is None else frozenset(self.settings.api_keys),
                               split.first_offset, split.end_offset)
        yield from read_split(split, row_filter, on_corrupt=self.settings.on_corrupt,
                              schema=_arrow_schema(self.schema), end_position=partition.end_position)

    def commit(self, end: dict) -> None:
        """Forget batch boundaries below what Spark has processed."""
        for directory, offset in end.items():
            bounds = self.boundaries.get(directory)
            if bounds:
                for o in [o for o in bounds if o < int(offset)]:
                    del bounds[o]


def _segment_for(segments: list[tuple[int, str]], offset: int) -> tuple[int, str]:
    chosen = segments[0]
    for base, path in segments:
        if base <= offset:
            chosen = (base, path)
    return chosen


def _value_set(f) -> set | None:
    """The values an EqualTo or In filter admits; None for any other filter."""
    if isinstance(f, EqualTo):
        return {f.value}
    if isinstance(f, In):
        return set(f.value)
    return None
