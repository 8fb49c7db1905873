"""`kraftlog log dump`: Kafka's ``kafka-dump-log --cluster-metadata-decoder`` output, or JSON lines.

Text lines follow Kafka's DumpLogSegments word for word, so scripts written for one read the other:

    Dumping <file>
    Log starting offset: <base offset>                (a .log; a .checkpoint says
                                                       "Snapshot end offset: N, epoch: E")
    baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1
      producerEpoch: -1 partitionLeaderEpoch: 1 isTransactional: false isControl: true
      deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 94 magic: 2
      compresscodec: none crc: 3041316433 isvalid: true              (one line per batch)
    | offset: 0 CreateTime: 1700000000000 keySize: 4 valueSize: 19 sequence: -1 headerKeys: []
      LeaderChange: {"version":0,"leaderId":1,...}                     (control records)
    | offset: 1 CreateTime: ... headerKeys: [] payload: {"type":"FEATURE_LEVEL_RECORD",...}
    Found 37 invalid bytes at the end of <file name>, from position 1234

Walking the file: a batch is taken when its 61-byte header is there, its magic is 2 and its
length fits in the file (Kafka's FileLogInputStream rule); its CRC and records are then checked
(``isvalid``), and the records of an invalid batch are not decoded: one line says why. The walk
stops at the first header that cannot be a batch; everything from there on is reported as invalid
bytes. ``.index`` / ``.timeindex`` files print their entries ("offset: O position: P",
"timestamp: T offset: O").
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

from kraftlog.engine.cli.tools import segments
from kraftlog.engine.cli.tools.common import ToolError, exists
from kraftlog.engine.layout import SNAPSHOT_FILE_NAME
from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.compression import CODEC_NAMES
from kraftlog.engine.records.layout import (
    CODEC_MASK,
    CONTROL_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from kraftlog.errors import CorruptRecordError, UndecodableRecordError

SUFFIXES = (".log", ".checkpoint", ".index", ".timeindex")
DELETE_HORIZON_BIT = 0x40
INT32_MAX = (1 << 31) - 1
# Kafka's ControlRecordType names and the word DumpLogSegments prints before each decoded body.
CONTROL_LABELS = {2: " LeaderChange: ", 3: " SnapshotHeader ", 4: " SnapshotFooter ", 5: " KRaftVersion ",
                  6: " KRaftVoters "}
CONTROL_NAMES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


def check_files(paths: list[str]) -> None:
    """Refuse before printing anything: a missing file, a directory, an unknown kind of file."""
    for path in paths:
        if not exists(path):
            raise ToolError(f"{path} does not exist")
        if os.path.isdir(path):
            raise ToolError(f"{path} is a directory; dump takes files (e.g. {path}/00000000000000000000.log), "
                            f"verify takes directories")
        if not path.endswith(SUFFIXES):
            raise ToolError(f"cannot dump {path}: not a .log, .checkpoint, .index or .timeindex file")


def _json(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _increment_sequence(sequence: int, delta: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap at int32 max back to 0."""
    if sequence > INT32_MAX - delta:
        return delta - (INT32_MAX - sequence) - 1
    return sequence + delta


class Dumper:
    """Writes one file's dump to ``write`` (text or JSON lines)."""

    def __init__(self, write: Callable[[str], object], *, json_lines: bool, batches_only: bool, max_bytes: int | None):
        self.write = write
        self.json_lines = json_lines
        self.batches_only = batches_only
        self.max_bytes = max_bytes

    def emit(self, text: str, obj: dict) -> None:
        self.write((_json(obj) if self.json_lines else text) + "\n")

    # -- files --------------------------------------------------------------------------------------------------

    def dump(self, path: str) -> None:
        name = os.path.basename(path)
        if not self.json_lines:
            self.write(f"Dumping {path}\n")
        if path.endswith((".index", ".timeindex")):
            self._dump_index(path)
            return
        head: dict = {"kind": "file", "file": path}
        if name.endswith(".log"):
            stem = name.split(".")[0]
            if stem.isdigit():
                head["logStartOffset"] = int(stem)
                self._file_line(f"Log starting offset: {int(stem)}", head)
        elif name == "bootstrap.checkpoint":
            self._file_line("KRaft bootstrap snapshot", head)
        else:
            m = SNAPSHOT_FILE_NAME.match(name)
            if m:
                head["snapshotEndOffset"], head["snapshotEpoch"] = int(m.group(1)), int(m.group(2))
                self._file_line(f"Snapshot end offset: {int(m.group(1))}, epoch: {int(m.group(2))}", head)
        buf = segments.map_file(path)
        end = len(buf) if self.max_bytes is None else min(len(buf), self.max_bytes)
        position = self._batches(buf, end, path)
        if position < len(buf) and self.max_bytes is None:
            n = len(buf) - position
            self.emit(f"Found {n} invalid bytes at the end of {name}, from position {position}",
                      {"kind": "invalid_bytes", "file": path, "position": position, "bytes": n})

    def dump_snapshot_stream(self, stream, label: str, end_offset: int, epoch: int) -> None:
        """The lines ``dump`` prints for a .checkpoint file, for a snapshot stream held in memory
        (``label`` names it, e.g. store#id). The caller has verified the stream, so no invalid
        bytes can follow its batches."""
        if not self.json_lines:
            self.write(f"Dumping {label}\n")
        self._file_line(f"Snapshot end offset: {end_offset}, epoch: {epoch}",
                        {"kind": "file", "file": label, "snapshotEndOffset": end_offset, "snapshotEpoch": epoch})
        self._batches(stream, len(stream), label)

    def _file_line(self, text: str, obj: dict) -> None:
        if self.json_lines:
            self.write(_json(obj) + "\n")
        else:
            self.write(text + "\n")

    def _batches(self, buf, end: int, path: str) -> int:
        position = 0
        last_offset = None
        while end - position >= HEADER_SIZE:
            length = int.from_bytes(buf[position + 8:position + 12], "big", signed=True)
            if length < MIN_BATCH_LENGTH or buf[position + 16] != MAGIC or position + LOG_OVERHEAD + length > end:
                break
            header = BatchHeader._make(HEADER.unpack_from(buf, position))
            try:
                batch_codec.validate_batch(buf, position)
                problem = None
            except CorruptRecordError as exc:
                problem = exc.reason
            self._batch_line(header, position, problem, path)
            if not self.batches_only:
                last_offset = self._records(buf, position, header, problem, path, last_offset)
            position += LOG_OVERHEAD + length
        return position

    # -- batches and records --------------------------------------------------------------------------------------

    def _batch_line(self, h: BatchHeader, position: int, problem: str | None, path: str) -> None:
        last_sequence = -1 if h.base_sequence == -1 else _increment_sequence(h.base_sequence, h.last_offset_delta)
        ts_type = "LogAppendTime" if h.attributes & TIMESTAMP_TYPE_BIT else "CreateTime"
        horizon = h.base_timestamp if h.attributes & DELETE_HORIZON_BIT else None
        codec_name = CODEC_NAMES.get(h.attributes & CODEC_MASK, f"unknown({h.attributes & CODEC_MASK})")
        fields = {"baseOffset": h.base_offset, "lastOffset": h.last_offset, "count": h.record_count,
                  "baseSequence": h.base_sequence, "lastSequence": last_sequence, "producerId": h.producer_id,
                  "producerEpoch": h.producer_epoch, "partitionLeaderEpoch": h.partition_leader_epoch,
                  "isTransactional": bool(h.attributes & TRANSACTIONAL_BIT),
                  "isControl": bool(h.attributes & CONTROL_BIT), "deleteHorizonMs": horizon,
                  "position": position, ts_type: h.max_timestamp, "size": h.size_bytes, "magic": h.magic,
                  "compresscodec": codec_name, "crc": h.crc, "isvalid": problem is None}
        if self.json_lines:
            fields["timestampType"], fields["maxTimestamp"] = ts_type, fields.pop(ts_type)
            obj = {"kind": "batch", "file": path, **fields}
            if problem is not None:
                obj["error"] = problem
            self.write(_json(obj) + "\n")
            return
        fields["deleteHorizonMs"] = "OptionalLong.empty" if horizon is None else f"OptionalLong[{horizon}]"
        self.write(" ".join(f"{k}: {_bool(v) if isinstance(v, bool) else v}" for k, v in fields.items()) + "\n")

    def _records(self, buf, position: int, h: BatchHeader, problem: str | None, path: str,
                 last_offset: int | None) -> int | None:
        if problem is not None:
            self.emit(f"| invalid batch, records not decoded: {problem}",
                      {"kind": "invalid_batch", "file": path, "position": position, "error": problem})
            return last_offset
        ts_type = "LogAppendTime" if h.attributes & TIMESTAMP_TYPE_BIT else "CreateTime"
        control = bool(h.attributes & CONTROL_BIT)
        try:
            records = list(batch_codec.iter_records(buf, position))
        except UndecodableRecordError as exc:  # a CRC-valid batch whose records do not parse (a writer's bug)
            self.emit(f"| invalid batch, records not decoded: {exc.reason}",
                      {"kind": "invalid_batch", "file": path, "position": position, "error": exc.reason})
            return last_offset
        for record in records:
            if last_offset is not None and record.offset != last_offset + 1:
                self.emit(f"Non-consecutive offsets: {last_offset} is followed by {record.offset}",
                          {"kind": "non_consecutive", "file": path, "offset": last_offset, "next": record.offset})
            last_offset = record.offset
            self._record_line(record, h, ts_type, control, path)
        return last_offset

    def _record_line(self, record, h: BatchHeader, ts_type: str, control: bool, path: str) -> None:
        sequence = -1 if h.base_sequence == -1 else _increment_sequence(h.base_sequence, record.offset - h.base_offset)
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        header_keys = [k for k, _ in record.headers]
        text = (f"| offset: {record.offset} {ts_type}: {record.timestamp_ms} keySize: {key_size} "
                f"valueSize: {value_size} sequence: {sequence} headerKeys: [{','.join(header_keys)}]")
        obj = {"kind": "record", "file": path, "offset": record.offset, "timestampType": ts_type,
               "timestamp": record.timestamp_ms, "keySize": key_size, "valueSize": value_size,
               "sequence": sequence, "headerKeys": header_keys}
        if control:
            suffix, obj["control"] = _control(record)
        else:
            suffix, payload = _payload(record)
            obj["payload" if isinstance(payload, dict) else "payloadError"] = payload
        self.emit(text + suffix, obj)

    # -- index files ----------------------------------------------------------------------------------------------

    def _dump_index(self, path: str) -> None:
        stem = os.path.basename(path).split(".")[0]
        base = int(stem) if stem.isdigit() else 0
        is_offset = path.endswith(".index")
        entries = segments._read_entries(path, segments.OFFSET_ENTRY if is_offset else segments.TIME_ENTRY)
        if isinstance(entries, str):
            raise ToolError(f"{path}: {entries}")
        if not len(entries):
            self.emit(f"{path} is empty.", {"kind": "index_empty", "file": path})
            return
        for e in entries:
            if is_offset:
                offset, pos = base + int(e["rel"]), int(e["pos"])
                self.emit(f"offset: {offset} position: {pos}",
                          {"kind": "index_entry", "file": path, "offset": offset, "position": pos})
            else:
                ts, offset = int(e["ts"]), base + int(e["rel"])
                self.emit(f"timestamp: {ts} offset: {offset}",
                          {"kind": "time_index_entry", "file": path, "timestamp": ts, "offset": offset})


def _payload(record) -> tuple[str, dict | str]:
    """(' payload: ...' text, the JSON object or the error text), as Kafka's metadata parser."""
    if record.value is None:
        error = f"Error at {record.offset}, skipping. the record has no value"
        return f" payload: {error}", error
    try:
        data = codec.to_json(codec.decode_record(record.value))
    except CorruptRecordError as exc:
        error = f"Error at {record.offset}, skipping. {exc.reason}"
        return f" payload: {error}", error
    return f" payload: {_json(data)}", data


def _control(record) -> tuple[str, dict]:
    key = record.key or b""
    control_type = int.from_bytes(key[2:4], "big", signed=True) if len(key) >= 4 else -1
    name = CONTROL_NAMES.get(control_type, "UNKNOWN")
    value = record.value or b""
    if control_type in (0, 1):  # end transaction marker: version i16, coordinatorEpoch i32
        epoch = int.from_bytes(value[2:6], "big", signed=True) if len(value) >= 6 else -1
        return f" endTxnMarker: {name} coordinatorEpoch: {epoch}", {"type": name, "coordinatorEpoch": epoch}
    if control_type not in CONTROL_LABELS:
        return f" controlType: {name}({control_type})", {"type": name, "controlType": control_type}
    try:
        decoded = codec.to_json(codec.decode_control(key, value))
    except CorruptRecordError as exc:
        return (f" controlType: {name}({control_type}) error: {exc.reason}",
                {"type": name, "error": exc.reason})
    return CONTROL_LABELS[control_type] + _json(decoded["data"]), decoded


def dump_files(paths: list[str], *, json_lines: bool, batches_only: bool, max_bytes: int | None) -> None:
    check_files(paths)
    dumper = Dumper(sys.stdout.write, json_lines=json_lines, batches_only=batches_only, max_bytes=max_bytes)
    for path in paths:
        dumper.dump(path)
    if max_bytes is None:
        # everything is printed first (as Kafka's tool does); then a snapshot cut short is an error
        from kraftlog.engine.cli.tools.imageload import check_checkpoint

        for path in paths:
            if path.endswith(".checkpoint"):
                sys.stdout.flush()
                check_checkpoint(path, segments.map_file(path))
