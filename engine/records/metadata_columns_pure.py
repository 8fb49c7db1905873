"""Pure-Python twin of kraftlog._metadata: the hot metadata records into column arrays.

Same functions, same checks in the same order, same error messages and positions as the native
module (csrc/_metadata.pyx, whose docstring has the byte layouts). It is the slow path: a Python
loop per record, lists turned into numpy arrays at the end. Public module: metadata_columns.
"""

from __future__ import annotations

import struct

import numpy as np

from kraftlog.engine.records.layout import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER,
    HEADER_BAD_MAGIC,
    HEADER_NEGATIVE,
    HEADER_OFFSET_OVERFLOW,
    HEADER_OK,
    HEADER_SHORT_LENGTH,
    HEADER_SIZE,
    HEADER_TRUNCATED,
    check_header_bytes,
)
from kraftlog.engine.records.wire import crc32c
from kraftlog.errors import CorruptRecordError

IMPLEMENTATION = "pure"

MIN_RECORD_BYTES = 7
FRAME_VERSION = 1
UVARINT32_MAX_BYTES = 5
VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10
INT16_MAX = 0x7FFF
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
STRING_MAX_BYTES = 0x7FFF
LIST_MAX_WIDTH = 64  # the native module's LIST_COLUMN_MAX_WIDTH
_U64 = (1 << 64) - 1

S_START, S_END, S_BASE_OFFSET, S_RECORD_COUNT, S_CONTROL = range(5)

K_OTHER, K_TOPIC, K_PARTITION, K_CHANGE, K_REMOVE, K_CONFIG, K_FEATURE, K_FENCE, K_BROKER_CHANGE, \
    K_REGISTER, K_PRODUCER_IDS, K_ACL, K_QUOTA, K_SCRAM, K_TOKEN, K_COUNT = range(16)

_I8 = struct.Struct(">b")
_F64 = struct.Struct(">d")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U64BE = struct.Struct(">QQ")


class _Fail(Exception):
    """A decoding failure inside a record: where, which field, what (with {a} / {b} numbers)."""

    def __init__(self, pos: int, field: str, what: str, a: int = 0, b: int = 0):
        super().__init__(what)
        self.pos, self.field, self.what, self.a, self.b = pos, field, what, a, b


def _message(fail: _Fail, offset: int, api_key: int, version: int) -> str:
    what = fail.what.replace("{a}", str(fail.a)).replace("{b}", str(fail.b))
    head = f"record at offset {offset}" if offset >= 0 else "record"
    if api_key >= 0:
        head += f" (apiKey {api_key} v{version})"
    return f"{head}: {fail.field}: {what}" if fail.field else f"{head}: {what}"


# ---- readers: (buf, pos, end, ...) -> (value..., next pos); raise _Fail --------------------------

def _uvar(buf, pos, end, field):
    value = shift = 0
    p = pos
    for _ in range(UVARINT32_MAX_BYTES):
        if p >= end:
            raise _Fail(pos, field, "unsigned varint runs past the end of the record")
        b = buf[p]
        p += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, p
        shift += 7
    raise _Fail(pos, field, "unsigned varint is longer than 5 bytes")


def _svar(buf, pos, end, max_bytes, field):
    value = shift = 0
    p = pos
    for _ in range(max_bytes):
        if p >= end:
            raise _Fail(pos, field, "varint runs past the end")
        b = buf[p]
        p += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            value &= _U64
            return (value >> 1) ^ -(value & 1), p
        shift += 7
    raise _Fail(pos, field, "varint is longer than its maximum size")


def _fixed(st, buf, pos, end, field):
    if end - pos < st.size:
        raise _Fail(pos, field, "runs past the end of the record")
    return st.unpack_from(buf, pos)[0], pos + st.size


def _uuid(buf, pos, end, field):
    if end - pos < 16:
        raise _Fail(pos, field, "runs past the end of the record")
    return _U64BE.unpack_from(buf, pos), pos + 16


def _len(buf, pos, end, nullable, field):
    raw, nxt = _uvar(buf, pos, end, field)
    if raw == 0 and not nullable:
        raise _Fail(pos, field, "null in a non-nullable field")
    return raw - 1, nxt


def _array(buf, pos, end, elem_bytes, nullable, field):
    """(count or -1, where the elements start, next pos)."""
    n, p = _len(buf, pos, end, nullable, field)
    if n < 0:
        return n, p, p
    if n > end - p:
        raise _Fail(pos, field, "array count exceeds the bytes left in the record")
    if n * elem_bytes > end - p:
        raise _Fail(pos, field, "array runs past the end of the record")
    return n, p, p + n * elem_bytes


def _int32s(buf, at, n):
    return list(struct.unpack_from(f">{n}i", buf, at)) if n > 0 else []


def _string(buf, pos, end, nullable, field):
    """(byte length or -1, where the bytes start, next pos)."""
    n, p = _len(buf, pos, end, nullable, field)
    if n < 0:
        return n, p, p
    if n > end - p:
        raise _Fail(pos, field, "string runs past the end of the record")
    if n > STRING_MAX_BYTES:
        raise _Fail(pos, field, "string is longer than 32767 bytes")
    try:
        bytes(buf[p:p + n]).decode("utf-8")
    except UnicodeDecodeError:
        raise _Fail(pos, field, "string is not UTF-8") from None
    return n, p, p + n


def _bytes(buf, pos, end, field):
    """Compact bytes (not nullable): the bytes and next pos."""
    n, p = _len(buf, pos, end, False, field)
    if n > end - p:
        raise _Fail(pos, field, "bytes run past the end of the record")
    return bytes(buf[p:p + n]), p + n


def _tag_count(buf, pos, end):
    count, p = _uvar(buf, pos, end, "tagged fields")
    if count > end - p:
        raise _Fail(pos, "tagged fields", "more tagged fields than bytes left in the record")
    return count, p


def _tag(buf, pos, end):
    """(tag, value start, value end); the next tag starts at value end."""
    tag, p = _uvar(buf, pos, end, "tagged fields")
    size, p = _uvar(buf, p, end, "tagged fields")
    if size > end - p:
        raise _Fail(pos, "tagged fields", "tagged field {a} runs past the end of the record", a=tag)
    return tag, p, p + size


def _tag_done(used, sub_end, tag_at, tag):
    if used != sub_end:
        raise _Fail(tag_at, "tagged fields", "tagged field {a} declares more bytes than its value takes", a=tag)


def _skip_tags(buf, pos, end):
    """(number of tagged fields, next pos): every tag treated as unknown."""
    count, p = _tag_count(buf, pos, end)
    for _ in range(count):
        _, _, p = _tag(buf, p, end)
    return count, p


# ---- record framing ---------------------------------------------------------------------------

def _kind_of(api_key: int, version: int) -> int:
    if api_key == 3:
        return K_PARTITION if version <= 2 else K_OTHER
    if api_key == 2:
        return K_TOPIC if version == 0 else K_OTHER
    if api_key == 5:
        return K_CHANGE if version <= 2 else K_OTHER
    if api_key == 4:
        return K_CONFIG if version == 0 else K_OTHER
    if api_key == 9:
        return K_REMOVE if version == 0 else K_OTHER
    if api_key in (7, 8):
        return K_FENCE if version == 0 else K_OTHER
    if api_key == 12:
        return K_FEATURE if version == 0 else K_OTHER
    if api_key == 17:
        return K_BROKER_CHANGE if version <= 2 else K_OTHER
    if api_key == 0:
        return K_REGISTER if version <= 3 else K_OTHER
    if api_key == 15:
        return K_PRODUCER_IDS if version == 0 else K_OTHER
    if api_key in (18, 19):
        return K_ACL if version == 0 else K_OTHER
    if api_key == 14:
        return K_QUOTA if version == 0 else K_OTHER
    if api_key in (11, 22):
        return K_SCRAM if version == 0 else K_OTHER
    if api_key in (10, 26):
        return K_TOKEN if version == 0 else K_OTHER
    return K_OTHER


def _read_frame(buf, pos, end):
    frame, p = _uvar(buf, pos, end, "frame")
    if frame != FRAME_VERSION:
        raise _Fail(pos, "frame", "metadata record frame version {a}; only 1 is known", a=frame)
    key_at = p
    api_key, p = _uvar(buf, p, end, "apiKey")
    version, p = _uvar(buf, p, end, "version")
    if api_key > INT16_MAX or version > INT16_MAX:
        raise _Fail(key_at, "apiKey", "apiKey or version exceeds int16")
    return api_key, version, p


def _read_record(buf, pos, end):
    """(offsetDelta, value position, value length, next pos) of the record at ``pos``."""
    start = pos
    length, p = _svar(buf, pos, end, VARINT_MAX_BYTES, "record length")
    if length < 0 or length > end - p:
        raise _Fail(start, "record length", "record length {a} does not fit in the batch", a=length)
    end = p + length
    if end - p < 1:
        raise _Fail(p, "record attributes", "runs past the end of the record")
    p += 1
    _, p = _svar(buf, p, end, VARLONG_MAX_BYTES, "timestampDelta")
    delta, p = _svar(buf, p, end, VARINT_MAX_BYTES, "offsetDelta")
    skip, p = _svar(buf, p, end, VARINT_MAX_BYTES, "key length")
    if skip < -1 or skip > end - p:
        raise _Fail(p, "key", "record key length is invalid")
    if skip > 0:
        p += skip
    value_n, p = _svar(buf, p, end, VARINT_MAX_BYTES, "value length")
    if value_n < 0:
        raise _Fail(p, "value", "metadata record has a null or negative-length value")
    if value_n > end - p:
        raise _Fail(p, "value", "record value runs past the end of the record")
    value_at = p
    p += value_n
    headers, p = _svar(buf, p, end, VARINT_MAX_BYTES, "header count")
    if headers < 0 or headers > end - p:
        raise _Fail(p, "headers", "record header count is invalid")
    for _ in range(headers):
        skip, p = _svar(buf, p, end, VARINT_MAX_BYTES, "header key length")
        if skip < 0 or skip > end - p:
            raise _Fail(p, "headers", "record header key length is invalid")
        p += skip
        skip, p = _svar(buf, p, end, VARINT_MAX_BYTES, "header value length")
        if skip < -1 or skip > end - p:
            raise _Fail(p, "headers", "record header value length is invalid")
        if skip > 0:
            p += skip
    if p != end:
        raise _Fail(p, "record length", "{a} byte(s) left over inside the record", a=end - p)
    return delta, value_at, value_n, end


# ---- walk_batches -----------------------------------------------------------------------------

def _header_problem(view, pos: int, stop: int, code: int, size: int) -> str:
    """The text walk_batches raises for a header problem (csrc/_metadata.pyx words it the same)."""
    if code == HEADER_TRUNCATED:
        return f"truncated batch header: {stop - pos} of {HEADER_SIZE} bytes"
    if code == HEADER_BAD_MAGIC:
        return f"unsupported batch magic {HEADER.unpack_from(view, pos)[3]}"
    if code == HEADER_SHORT_LENGTH:
        return f"batch length {HEADER.unpack_from(view, pos)[1]} is smaller than a header"
    if code == HEADER_NEGATIVE:
        return "negative lastOffsetDelta or recordCount"
    if code == HEADER_OFFSET_OVERFLOW:
        return "batch offsets overflow int64"
    return f"truncated batch: {stop - pos} of {size} bytes"


def walk_batches(buf, start: int = 0, end: int | None = None, verify_crc: bool = True, path=None):
    """Header of every batch in buf[start:end] as int64[b, 8] (see the native docstring)."""
    view = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    stop = len(view) if end is None else end
    if not 0 <= start <= stop <= len(view):
        raise ValueError(f"region [{start}, {stop}) is outside the buffer of {len(view)} bytes")
    rows = []
    pos = start
    while pos < stop:
        code, size = check_header_bytes(view, pos, stop)
        if code != HEADER_OK:
            raise CorruptRecordError(_header_problem(view, pos, stop, code, size), position=pos, path=path)
        (base, _, epoch, _, _, attributes, last_delta, _, max_ts, _, _, _, count) = HEADER.unpack_from(view, pos)
        rows.append((pos, size, base, last_delta, epoch, max_ts, attributes, count))
        pos += size
    if verify_crc:
        for pos, size, *_ in rows:
            stored = struct.unpack_from(">I", view, pos + CRC_OFFSET)[0]
            computed = crc32c(view[pos + ATTRIBUTES_OFFSET:pos + size])
            if computed != stored:
                raise CorruptRecordError(f"batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}",
                                         position=pos, path=path)
    return np.array(rows, dtype=np.int64).reshape(-1, 8)


# ---- decode_sections --------------------------------------------------------------------------

class _Tables:
    """Row lists per table while decoding; numpy at the end."""

    def __init__(self):
        self.other = []
        self.topics = {"record_index": [], "topic_id": [], "name": [], "extras": []}
        self.partitions = {k: [] for k in ("record_index", "topic_id", "partition_id", "leader", "leader_epoch",
                                           "partition_epoch", "leader_recovery_state", "replicas", "replica_count",
                                           "isr", "isr_count", "directories", "directory_count", "extras")}
        self.changes = {k: [] for k in ("record_index", "topic_id", "partition_id", "leader",
                                        "leader_recovery_state", "isr", "isr_count", "replicas",
                                        "replica_count", "extras", *MORE_LIST_COLUMNS)}
        self.removes = {"record_index": [], "topic_id": [], "extras": []}
        self.configs = {k: [] for k in ("record_index", "resource_type", "resource_name", "name", "value",
                                        "value_null", "extras")}
        self.features = {"record_index": [], "name": [], "feature_level": [], "extras": []}
        self.fence = {k: [] for k in ("record_index", "broker_id", "broker_epoch", "fenced", "extras")}
        self.bchanges = {k: [] for k in ("record_index", "broker_id", "broker_epoch", "fenced",
                                         "in_controlled_shutdown", "extras")}
        self.regs = {k: [] for k in ("record_index", "broker_id", "broker_epoch", "incarnation_id", "fenced",
                                     "in_controlled_shutdown", "is_migrating_zk_broker", "rack", "rack_null",
                                     "endpoint_end", "feature_end", "log_dir_end", "extras")}
        self.endpoints = {k: [] for k in ("endpoint_name", "endpoint_host", "endpoint_port",
                                          "endpoint_security_protocol")}
        self.broker_features = {k: [] for k in ("feature_name", "feature_min_version", "feature_max_version")}
        self.log_dirs = []
        self.pids = {k: [] for k in ("record_index", "broker_id", "broker_epoch", "next_producer_id", "extras")}
        self.acls = {k: [] for k in ("record_index", "acl_id", "removed", "resource_type", "resource_name",
                                     "pattern_type", "principal", "host", "operation", "permission_type", "extras")}
        self.quotas = {k: [] for k in ("record_index", "key", "value", "remove", "entity_end", "extras")}
        self.entities = {"entity_type": [], "entity_name": [], "entity_name_null": []}
        self.scram = {k: [] for k in ("record_index", "removed", "name", "mechanism", "salt", "stored_key",
                                      "server_key", "iterations", "extras")}
        self.tokens = {k: [] for k in ("record_index", "removed", "owner", "requester", "token_id", "renewer_end",
                                       "issue_timestamp_ms", "max_timestamp_ms", "expiration_timestamp_ms", "extras")}
        self.renewers = []
        # widths as the native pass 1 sizes them: the longest list any occurrence carried
        self.widths = {"p_rep": 1, "p_isr": 1, "c_rep": 1, "c_isr": 1, **dict.fromkeys(MORE_LIST_COLUMNS, 0)}

    def widen(self, key, n):
        if n > self.widths[key]:
            self.widths[key] = n


def _body_topic(t, buf, p, end, version, i):
    n, at, p = _string(buf, p, end, False, "Name")
    tid, p = _uuid(buf, p, end, "TopicId")
    count, p = _skip_tags(buf, p, end)
    r = t.topics
    r["record_index"].append(i)
    r["name"].append(bytes(buf[at:at + n]))
    r["topic_id"].append(tid)
    r["extras"].append(count > 0)
    return p


def _body_partition(t, buf, p, end, version, i):
    extras = False
    pid, p = _fixed(_I32, buf, p, end, "PartitionId")
    tid, p = _uuid(buf, p, end, "TopicId")
    n, at, p = _array(buf, p, end, 4, False, "Replicas")
    replicas = _int32s(buf, at, n)
    n, at, p = _array(buf, p, end, 4, False, "Isr")
    isr = _int32s(buf, at, n)
    n, _, p = _array(buf, p, end, 4, False, "RemovingReplicas")
    extras |= n > 0
    n, _, p = _array(buf, p, end, 4, False, "AddingReplicas")
    extras |= n > 0
    leader, p = _fixed(_I32, buf, p, end, "Leader")
    leader_epoch, p = _fixed(_I32, buf, p, end, "LeaderEpoch")
    partition_epoch, p = _fixed(_I32, buf, p, end, "PartitionEpoch")
    directories = b""
    if version >= 1:
        n, at, p = _array(buf, p, end, 16, False, "Directories")
        if any(buf[at:at + 16 * n]):  # DirectoryId.MIGRATING is the zero UUID
            if n != len(replicas) or n > LIST_MAX_WIDTH:
                extras = True  # the generic path refuses the record (or holds the wide list)
            else:
                directories = bytes(buf[at:at + 16 * n])
    lrs = 0
    count, p = _tag_count(buf, p, end)
    for _ in range(count):
        tag_at = p
        tag, q, p = _tag(buf, p, end)
        if tag == 0:
            lrs, used = _fixed(_I8, buf, q, p, "LeaderRecoveryState")
            _tag_done(used, p, tag_at, tag)
        elif tag in (1, 2) and version >= 2:
            n, _, used = _array(buf, q, p, 4, True, "EligibleLeaderReplicas" if tag == 1 else "LastKnownElr")
            _tag_done(used, p, tag_at, tag)
            extras |= n >= 0
        else:
            extras = True
    t.widen("p_rep", len(replicas))
    t.widen("p_isr", len(isr))
    extras |= len(replicas) > LIST_MAX_WIDTH or len(isr) > LIST_MAX_WIDTH
    r = t.partitions
    for key, value in (("record_index", i), ("topic_id", tid), ("partition_id", pid), ("leader", leader),
                       ("leader_epoch", leader_epoch), ("partition_epoch", partition_epoch),
                       ("leader_recovery_state", lrs), ("replicas", replicas),
                       ("replica_count", min(len(replicas), INT16_MAX)), ("isr", isr),
                       ("isr_count", min(len(isr), INT16_MAX)), ("directories", directories),
                       ("directory_count", len(directories) // 16), ("extras", extras)):
        r[key].append(value)
    return p


_CHANGE_FIELDS = {3: "RemovingReplicas", 4: "AddingReplicas", 6: "EligibleLeaderReplicas", 7: "LastKnownElr"}
# The change lists past ISR and replicas, in columns (the native module's MORE_LIST_COLUMNS), by tag
MORE_LIST_COLUMNS = ("removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr")
_MORE_LIST_OF_TAG = dict(zip((3, 4, 6, 7), MORE_LIST_COLUMNS, strict=True))


def _body_change(t, buf, p, end, version, i):
    extras = False
    pid, p = _fixed(_I32, buf, p, end, "PartitionId")
    tid, p = _uuid(buf, p, end, "TopicId")
    leader, lrs, isr, replicas = -2, -1, None, None
    more = dict.fromkeys(MORE_LIST_COLUMNS)
    count, p = _tag_count(buf, p, end)
    for _ in range(count):
        tag_at = p
        tag, q, p = _tag(buf, p, end)
        if tag in (0, 2):
            n, at, used = _array(buf, q, p, 4, True, "Isr" if tag == 0 else "Replicas")
            values = None if n < 0 else _int32s(buf, at, n)
            if values is not None:
                t.widen("c_isr" if tag == 0 else "c_rep", n)
                extras |= n > LIST_MAX_WIDTH
            if tag == 0:
                isr = values
            else:
                replicas = values
        elif tag == 1:
            leader, used = _fixed(_I32, buf, q, p, "Leader")
        elif tag in (3, 4) or (tag in (6, 7) and version >= 2):
            n, at, used = _array(buf, q, p, 4, True, _CHANGE_FIELDS[tag])
            column = _MORE_LIST_OF_TAG[tag]
            more[column] = None if n < 0 else _int32s(buf, at, n)
            if n >= 0:
                t.widen(column, n)
                extras |= n > LIST_MAX_WIDTH
        elif tag == 8 and version >= 1:
            n, _, used = _array(buf, q, p, 16, True, "Directories")
            extras |= n >= 0
        elif tag == 5:
            lrs, used = _fixed(_I8, buf, q, p, "LeaderRecoveryState")
        else:
            extras = True
            continue
        _tag_done(used, p, tag_at, tag)
    r = t.changes
    for key, value in (("record_index", i), ("topic_id", tid), ("partition_id", pid), ("leader", leader),
                       ("leader_recovery_state", lrs), ("isr", isr or []),
                       ("isr_count", -1 if isr is None else min(len(isr), INT16_MAX)),
                       ("replicas", replicas or []),
                       ("replica_count", -1 if replicas is None else min(len(replicas), INT16_MAX)),
                       ("extras", extras), *more.items()):
        r[key].append(value)
    return p


def _body_remove(t, buf, p, end, version, i):
    tid, p = _uuid(buf, p, end, "TopicId")
    count, p = _skip_tags(buf, p, end)
    r = t.removes
    r["record_index"].append(i)
    r["topic_id"].append(tid)
    r["extras"].append(count > 0)
    return p


def _body_config(t, buf, p, end, version, i):
    rtype, p = _fixed(_I8, buf, p, end, "ResourceType")
    n, at, p = _string(buf, p, end, False, "ResourceName")
    rname = bytes(buf[at:at + n])
    n, at, p = _string(buf, p, end, False, "Name")
    name = bytes(buf[at:at + n])
    n, at, p = _string(buf, p, end, True, "Value")
    value = None if n < 0 else bytes(buf[at:at + n])
    count, p = _skip_tags(buf, p, end)
    r = t.configs
    for key, v in (("record_index", i), ("resource_type", rtype), ("resource_name", rname), ("name", name),
                   ("value", value or b""), ("value_null", value is None), ("extras", count > 0)):
        r[key].append(v)
    return p


def _body_feature(t, buf, p, end, version, i):
    n, at, p = _string(buf, p, end, False, "Name")
    name = bytes(buf[at:at + n])
    level, p = _fixed(_I16, buf, p, end, "FeatureLevel")
    count, p = _skip_tags(buf, p, end)
    r = t.features
    for key, v in (("record_index", i), ("name", name), ("feature_level", level), ("extras", count > 0)):
        r[key].append(v)
    return p


def _body_fence(t, buf, p, end, fenced, i):
    broker, p = _fixed(_I32, buf, p, end, "Id")
    epoch, p = _fixed(_I64, buf, p, end, "Epoch")
    count, p = _skip_tags(buf, p, end)
    r = t.fence
    for key, v in (("record_index", i), ("broker_id", broker), ("broker_epoch", epoch), ("fenced", fenced),
                   ("extras", count > 0)):
        r[key].append(v)
    return p


def _body_producer_ids(t, buf, p, end, version, i):
    broker, p = _fixed(_I32, buf, p, end, "BrokerId")
    epoch, p = _fixed(_I64, buf, p, end, "BrokerEpoch")
    next_id, p = _fixed(_I64, buf, p, end, "NextProducerId")
    count, p = _skip_tags(buf, p, end)
    r = t.pids
    for key, v in (("record_index", i), ("broker_id", broker), ("broker_epoch", epoch), ("next_producer_id", next_id),
                   ("extras", count > 0)):
        r[key].append(v)
    return p


def _body_acl(t, buf, p, end, removed, i):
    """AccessControlEntryRecord v0 or (removed: no field after Id) RemoveAccessControlEntryRecord v0."""
    acl_id, p = _uuid(buf, p, end, "Id")
    row = {"record_index": i, "acl_id": acl_id, "removed": removed, "resource_type": 0, "resource_name": b"",
           "pattern_type": 0, "principal": b"", "host": b"", "operation": 0, "permission_type": 0}
    if not removed:
        row["resource_type"], p = _fixed(_I8, buf, p, end, "ResourceType")
        n, at, p = _string(buf, p, end, False, "ResourceName")
        row["resource_name"] = bytes(buf[at:at + n])
        row["pattern_type"], p = _fixed(_I8, buf, p, end, "PatternType")
        n, at, p = _string(buf, p, end, False, "Principal")
        row["principal"] = bytes(buf[at:at + n])
        n, at, p = _string(buf, p, end, False, "Host")
        row["host"] = bytes(buf[at:at + n])
        row["operation"], p = _fixed(_I8, buf, p, end, "Operation")
        row["permission_type"], p = _fixed(_I8, buf, p, end, "PermissionType")
    count, p = _skip_tags(buf, p, end)
    row["extras"] = count > 0
    for key, v in row.items():
        t.acls[key].append(v)
    return p


def _body_quota(t, buf, p, end, version, i):
    count, p, _ = _array(buf, p, end, 0, False, "Entity")
    extras = False
    e = t.entities
    for _ in range(count):
        n, at, p = _string(buf, p, end, False, "EntityType")
        e["entity_type"].append(bytes(buf[at:at + n]))
        n, at, p = _string(buf, p, end, True, "EntityName")
        e["entity_name"].append(b"" if n < 0 else bytes(buf[at:at + n]))
        e["entity_name_null"].append(n < 0)
        tags, p = _skip_tags(buf, p, end)
        extras = extras or tags > 0
    n, at, p = _string(buf, p, end, False, "Key")
    key = bytes(buf[at:at + n])
    value, p = _fixed(_F64, buf, p, end, "Value")
    remove, p = _fixed(_I8, buf, p, end, "Remove")
    tags, p = _skip_tags(buf, p, end)
    r = t.quotas
    for k, v in (("record_index", i), ("key", key), ("value", value), ("remove", remove != 0),
                 ("entity_end", len(e["entity_type"])), ("extras", extras or tags > 0)):
        r[k].append(v)
    return p


def _body_scram(t, buf, p, end, removed, i):
    """UserScramCredentialRecord v0 or (removed: Name and Mechanism only) its removal."""
    n, at, p = _string(buf, p, end, False, "Name")
    row = {"record_index": i, "removed": removed, "name": bytes(buf[at:at + n]), "mechanism": 0,
           "salt": b"", "stored_key": b"", "server_key": b"", "iterations": 0}
    row["mechanism"], p = _fixed(_I8, buf, p, end, "Mechanism")
    if not removed:
        row["salt"], p = _bytes(buf, p, end, "Salt")
        row["stored_key"], p = _bytes(buf, p, end, "StoredKey")
        row["server_key"], p = _bytes(buf, p, end, "ServerKey")
        row["iterations"], p = _fixed(_I32, buf, p, end, "Iterations")
    count, p = _skip_tags(buf, p, end)
    row["extras"] = count > 0
    for key, v in row.items():
        t.scram[key].append(v)
    return p


def _text(buf, p, end, field):
    n, at, p = _string(buf, p, end, False, field)
    return bytes(buf[at:at + n]), p


def _body_token(t, buf, p, end, removed, i):
    """DelegationTokenRecord v0 or (removed: TokenId only) RemoveDelegationTokenRecord v0."""
    row = {"record_index": i, "removed": removed, "owner": b"", "requester": b"", "issue_timestamp_ms": 0,
           "max_timestamp_ms": 0, "expiration_timestamp_ms": 0}
    if not removed:
        row["owner"], p = _text(buf, p, end, "Owner")
        row["requester"], p = _text(buf, p, end, "Requester")
        count, p, _ = _array(buf, p, end, 0, False, "Renewers")
        for _ in range(count):
            renewer, p = _text(buf, p, end, "Renewers")
            t.renewers.append(renewer)
        for key, field in (("issue_timestamp_ms", "IssueTimestamp"), ("max_timestamp_ms", "MaxTimestamp"),
                           ("expiration_timestamp_ms", "ExpirationTimestamp")):
            row[key], p = _fixed(_I64, buf, p, end, field)
    row["renewer_end"] = len(t.renewers)
    row["token_id"], p = _text(buf, p, end, "TokenId")
    count, p = _skip_tags(buf, p, end)
    row["extras"] = count > 0
    for key, v in row.items():
        t.tokens[key].append(v)
    return p


_FENCING = {1: 1, -1: 0, 0: -1}  # Fenced on the wire -> column (-1 none, 0 unfence, 1 fence)


def _body_broker_change(t, buf, p, end, version, i):
    extras = False
    broker, p = _fixed(_I32, buf, p, end, "BrokerId")
    epoch, p = _fixed(_I64, buf, p, end, "BrokerEpoch")
    fenced = ics = -1
    count, p = _tag_count(buf, p, end)
    for _ in range(count):
        tag_at = p
        tag, q, p = _tag(buf, p, end)
        if tag == 0:
            b, used = _fixed(_I8, buf, q, p, "Fenced")
            fenced = _FENCING.get(b, -1)
            extras |= b not in _FENCING
        elif tag == 1 and version >= 1:
            b, used = _fixed(_I8, buf, q, p, "InControlledShutdown")
            ics = 1 if b == 1 else -1
            extras |= b not in (0, 1)
        elif tag == 2 and version >= 2:
            _, _, used = _array(buf, q, p, 16, False, "LogDirs")
            extras = True
        else:
            extras = True
            continue
        _tag_done(used, p, tag_at, tag)
    r = t.bchanges
    for key, v in (("record_index", i), ("broker_id", broker), ("broker_epoch", epoch), ("fenced", fenced),
                   ("in_controlled_shutdown", ics), ("extras", extras)):
        r[key].append(v)
    return p


_U16 = struct.Struct(">H")


def _register_endpoints(t, buf, p, end):
    """EndPoints []BrokerEndpoint into the flat endpoint list: (any unknown tags, next pos)."""
    count, p, _ = _array(buf, p, end, 0, False, "EndPoints")
    extras = False
    e = t.endpoints
    for _ in range(count):
        name, p = _text(buf, p, end, "EndPoints.Name")
        host, p = _text(buf, p, end, "EndPoints.Host")
        port, p = _fixed(_U16, buf, p, end, "EndPoints.Port")
        protocol, p = _fixed(_I16, buf, p, end, "EndPoints.SecurityProtocol")
        tags, p = _skip_tags(buf, p, end)
        extras = extras or tags > 0
        for key, v in (("endpoint_name", name), ("endpoint_host", host), ("endpoint_port", port),
                       ("endpoint_security_protocol", protocol)):
            e[key].append(v)
    return extras, p


def _register_features(t, buf, p, end):
    """Features []BrokerFeature into the flat feature list: (any unknown tags, next pos)."""
    count, p, _ = _array(buf, p, end, 0, False, "Features")
    extras = False
    f = t.broker_features
    for _ in range(count):
        name, p = _text(buf, p, end, "Features.Name")
        low, p = _fixed(_I16, buf, p, end, "Features.MinSupportedVersion")
        high, p = _fixed(_I16, buf, p, end, "Features.MaxSupportedVersion")
        tags, p = _skip_tags(buf, p, end)
        extras = extras or tags > 0
        for key, v in (("feature_name", name), ("feature_min_version", low), ("feature_max_version", high)):
            f[key].append(v)
    return extras, p


def _body_register(t, buf, p, end, version, i):
    """RegisterBrokerRecord v0-3 (layout in the native body_register); a repeated LogDirs tag
    replaces the row's log dirs, as the generic codec keeps the last occurrence."""
    broker, p = _fixed(_I32, buf, p, end, "BrokerId")
    zk = 0
    if version >= 2:
        zk, p = _fixed(_I8, buf, p, end, "IsMigratingZkBroker")
    incarnation, p = _uuid(buf, p, end, "IncarnationId")
    epoch, p = _fixed(_I64, buf, p, end, "BrokerEpoch")
    endpoint_tags, p = _register_endpoints(t, buf, p, end)
    feature_tags, p = _register_features(t, buf, p, end)
    n, at, p = _string(buf, p, end, True, "Rack")
    rack = None if n < 0 else bytes(buf[at:at + n])
    fenced, p = _fixed(_I8, buf, p, end, "Fenced")
    ics = 0
    if version >= 1:
        ics, p = _fixed(_I8, buf, p, end, "InControlledShutdown")
    extras = endpoint_tags or feature_tags
    first_dir = len(t.log_dirs)
    count, p = _tag_count(buf, p, end)
    for _ in range(count):
        tag_at = p
        tag, q, p = _tag(buf, p, end)
        if tag == 0 and version >= 3:
            n, at, used = _array(buf, q, p, 16, False, "LogDirs")
            _tag_done(used, p, tag_at, tag)
            del t.log_dirs[first_dir:]
            t.log_dirs.extend(_U64BE.unpack_from(buf, at + 16 * k) for k in range(n))
        else:
            extras = True
    r = t.regs
    for key, v in (("record_index", i), ("broker_id", broker), ("broker_epoch", epoch),
                   ("incarnation_id", incarnation), ("fenced", fenced != 0), ("in_controlled_shutdown", ics != 0),
                   ("is_migrating_zk_broker", zk != 0), ("rack", rack or b""), ("rack_null", rack is None),
                   ("endpoint_end", len(t.endpoints["endpoint_name"])),
                   ("feature_end", len(t.broker_features["feature_name"])), ("log_dir_end", len(t.log_dirs)),
                   ("extras", extras)):
        r[key].append(v)
    return p


_BODIES = {K_TOPIC: _body_topic, K_PARTITION: _body_partition, K_CHANGE: _body_change,
           K_REMOVE: _body_remove, K_CONFIG: _body_config, K_FEATURE: _body_feature,
           K_BROKER_CHANGE: _body_broker_change, K_REGISTER: _body_register, K_PRODUCER_IDS: _body_producer_ids,
           K_QUOTA: _body_quota}


def _raise(fail: _Fail, offset: int, api_key: int, version: int, section: int, path):
    exc = CorruptRecordError(_message(fail, offset, api_key, version), position=fail.pos, path=path)
    exc.section = section
    raise exc from None


def _pass1(view, sec, path):
    """Per-record columns and kinds, as the native pass 1 (framing and frame headers only)."""
    offsets, api_keys, versions, value_pos, value_len, kinds = [], [], [], [], [], []
    for s in range(len(sec)):
        start, end, base, expect, control = (int(v) for v in sec[s])
        if control:
            continue
        pos, found = start, 0
        while pos < end:
            offset = api_key = version = -1
            try:
                if found == expect:
                    raise _Fail(pos, "", "more records than the batch's recordCount {a}", a=expect)
                rec_at = pos
                delta, value_at, value_n, pos = _read_record(view, pos, end)
                if not INT64_MIN <= base + delta <= INT64_MAX:
                    raise _Fail(rec_at, "offsetDelta", "record offset overflows int64")
                offset = base + delta
                api_key, version, _ = _read_frame(view, value_at, value_at + value_n)
            except _Fail as fail:
                _raise(fail, offset, -1, -1, s, path)
            offsets.append(offset)
            api_keys.append(api_key)
            versions.append(version)
            value_pos.append(value_at)
            value_len.append(value_n)
            kinds.append(_kind_of(api_key, version))
            found += 1
        if found != expect:
            _raise(_Fail(start, "", "the batch's recordCount is {a} but its records section holds {b}",
                         a=expect, b=found), -1, -1, -1, s, path)
    return offsets, api_keys, versions, value_pos, value_len, kinds


def sections_of(batches):
    """(sections, first_coded): the records sections of walk_batches' table and the first batch
    whose codec bits are not 0, or -1 (same contract as the native function)."""
    t = np.asarray(batches, dtype=np.int64).reshape(-1, 8)
    pos, size, base, attributes, count = t[:, 0], t[:, 1], t[:, 2], t[:, 6], t[:, 7]
    sections = np.stack([pos + HEADER_SIZE, pos + size, base, count, (attributes & CONTROL_BIT) != 0], axis=1)
    coded = np.flatnonzero(attributes & CODEC_MASK)
    return sections.astype(np.int64), int(coded[0]) if len(coded) else -1


def decode_sections(data, sections, path=None):
    """Decode the records sections into column arrays (same contract as the native function)."""
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    sec = np.asarray(sections, dtype=np.int64).reshape(-1, 5)
    for s in range(len(sec)):
        if not 0 <= sec[s, S_START] <= sec[s, S_END] <= len(view):
            raise ValueError(f"section {s} lies outside the buffer")
    offsets, api_keys, versions, value_pos, value_len, kinds = _pass1(view, sec, path)
    rows = [0] * K_COUNT
    kind_rows = []
    for kind in kinds:
        kind_rows.append(rows[kind])
        rows[kind] += 1
    t = _Tables()
    for i, kind in enumerate(kinds):
        if kind == K_OTHER:
            t.other.append(i)
            continue
        start, end = value_pos[i], value_pos[i] + value_len[i]
        try:
            api_key, version, p = _read_frame(view, start, end)
            if kind == K_FENCE:
                p = _body_fence(t, view, p, end, api_key == 7, i)
            elif kind == K_ACL:
                p = _body_acl(t, view, p, end, api_key == 19, i)
            elif kind == K_SCRAM:
                p = _body_scram(t, view, p, end, api_key == 22, i)
            elif kind == K_TOKEN:
                p = _body_token(t, view, p, end, api_key == 26, i)
            else:
                p = _BODIES[kind](t, view, p, end, version, i)
            if p != end:
                raise _Fail(p, "", "{a} byte(s) of garbage after the record body", a=end - p)
        except _Fail as fail:
            _raise(fail, offsets[i], api_keys[i], versions[i], -1, path)
    out = {"offsets": np.array(offsets, np.int64), "api_keys": np.array(api_keys, np.int16),
           "versions": np.array(versions, np.int16), "kind_rows": np.array(kind_rows, np.int32),
           "value_pos": np.array(value_pos, np.int64), "value_len": np.array(value_len, np.int32)}
    out.update(_finish(t))
    return out


# ---- lists -> numpy ---------------------------------------------------------------------------

def _ids(rows) -> np.ndarray:
    return np.array(rows, dtype=np.uint64).reshape(-1, 2)


def _padded(lists, width) -> np.ndarray:
    out = np.full((len(lists), width), -1, dtype=np.int32)
    for r, values in enumerate(lists):
        k = min(len(values), width)
        out[r, :k] = values[:k]
    return out


def _padded_bytes(rows, width) -> np.ndarray:
    out = np.zeros((len(rows), width), dtype=np.uint8)
    for r, value in enumerate(rows):
        if value:
            out[r, :len(value)] = np.frombuffer(value, np.uint8)
    return out


def _counts(lists) -> np.ndarray:
    """A change list's counts (-1: null); as the native module, a shared -1 when every one is null."""
    if all(v is None for v in lists):
        return np.broadcast_to(np.int16(-1), (len(lists),))
    return np.array([-1 if v is None else min(len(v), INT16_MAX) for v in lists], np.int16)


def _blob(strings) -> tuple[np.ndarray, bytes]:
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in strings], dtype=np.int64)
    return offsets, b"".join(strings)


def _flags(rows) -> np.ndarray:
    return np.array(rows, dtype=np.bool_)


def _finish(t: _Tables) -> dict:
    w = {k: min(v, LIST_MAX_WIDTH) for k, v in t.widths.items()}
    topics = t.topics
    name_offsets, name_blob = _blob(topics["name"])
    p = t.partitions
    c = t.changes
    g = t.configs
    rn_off, rn_blob = _blob(g["resource_name"])
    nm_off, nm_blob = _blob(g["name"])
    va_off, va_blob = _blob(g["value"])
    f = t.features
    f_off, f_blob = _blob(f["name"])
    e = t.fence
    b = t.bchanges
    r = t.regs
    registrations = {
        "record_index": np.array(r["record_index"], np.int32), "broker_id": np.array(r["broker_id"], np.int32),
        "broker_epoch": np.array(r["broker_epoch"], np.int64), "incarnation_id": _ids(r["incarnation_id"]),
        "fenced": _flags(r["fenced"]), "in_controlled_shutdown": _flags(r["in_controlled_shutdown"]),
        "is_migrating_zk_broker": _flags(r["is_migrating_zk_broker"]), "rack_null": _flags(r["rack_null"]),
        "extras": _flags(r["extras"]), "endpoint_end": np.array(r["endpoint_end"], np.int64),
        "feature_end": np.array(r["feature_end"], np.int64), "log_dir_end": np.array(r["log_dir_end"], np.int64),
        "endpoint_port": np.array(t.endpoints["endpoint_port"], np.uint16),
        "endpoint_security_protocol": np.array(t.endpoints["endpoint_security_protocol"], np.int16),
        "feature_min_version": np.array(t.broker_features["feature_min_version"], np.int16),
        "feature_max_version": np.array(t.broker_features["feature_max_version"], np.int16),
        "log_dirs": _ids(t.log_dirs)}
    strings = {"rack": r["rack"], "endpoint_name": t.endpoints["endpoint_name"],
               "endpoint_host": t.endpoints["endpoint_host"], "feature_name": t.broker_features["feature_name"]}
    at = 0
    for prefix, rows in strings.items():
        offsets, blob = _blob(rows)
        registrations[prefix + "_offsets"] = offsets + at
        at += len(blob)
    registrations["broker_blob"] = b"".join(b"".join(rows) for rows in strings.values())
    a = t.acls
    an_off, an_blob = _blob(a["resource_name"])
    pr_off, pr_blob = _blob(a["principal"])
    ho_off, ho_blob = _blob(a["host"])
    q, qe = t.quotas, t.entities
    key_off, key_blob = _blob(q["key"])
    et_off, et_blob = _blob(qe["entity_type"])
    en_off, en_blob = _blob(qe["entity_name"])
    sc = t.scram
    scram = {"record_index": np.array(sc["record_index"], np.int32), "removed": _flags(sc["removed"]),
             "mechanism": np.array(sc["mechanism"], np.int8), "iterations": np.array(sc["iterations"], np.int32),
             "extras": _flags(sc["extras"])}
    at = 0
    for prefix in ("name", "salt", "stored_key", "server_key"):
        offsets, blob = _blob(sc[prefix])
        scram[prefix + "_offsets"] = offsets + at
        at += len(blob)
    scram["scram_blob"] = b"".join(b"".join(sc[prefix]) for prefix in ("name", "salt", "stored_key", "server_key"))
    dt = t.tokens
    tokens = {"record_index": np.array(dt["record_index"], np.int32), "removed": _flags(dt["removed"]),
              "renewer_end": np.array(dt["renewer_end"], np.int64), "extras": _flags(dt["extras"]),
              **{k: np.array(dt[k], np.int64) for k in ("issue_timestamp_ms", "max_timestamp_ms",
                                                        "expiration_timestamp_ms")}}
    strings = {"owner": dt["owner"], "requester": dt["requester"], "token_id": dt["token_id"], "renewer": t.renewers}
    at = 0
    for prefix, rows in strings.items():
        offsets, blob = _blob(rows)
        tokens[prefix + "_offsets"] = offsets + at
        at += len(blob)
    tokens["token_blob"] = b"".join(b"".join(rows) for rows in strings.values())
    return {
        "other": {"record_index": np.array(t.other, np.int32)},
        "topics": {"record_index": np.array(topics["record_index"], np.int32), "topic_id": _ids(topics["topic_id"]),
                   "extras": _flags(topics["extras"]), "name_offsets": name_offsets, "name_blob": name_blob},
        "partitions": {
            "record_index": np.array(p["record_index"], np.int32), "topic_id": _ids(p["topic_id"]),
            "partition_id": np.array(p["partition_id"], np.int32), "leader": np.array(p["leader"], np.int32),
            "leader_epoch": np.array(p["leader_epoch"], np.int32),
            "partition_epoch": np.array(p["partition_epoch"], np.int32),
            "leader_recovery_state": np.array(p["leader_recovery_state"], np.int8),
            "replicas": _padded(p["replicas"], w["p_rep"]), "replica_count": np.array(p["replica_count"], np.int16),
            "isr": _padded(p["isr"], w["p_isr"]), "isr_count": np.array(p["isr_count"], np.int16),
            "directories": _padded_bytes(p["directories"], w["p_rep"] * 16),
            "directory_count": np.array(p["directory_count"], np.int16),
            "extras": _flags(p["extras"])},
        "partition_changes": {
            "record_index": np.array(c["record_index"], np.int32), "topic_id": _ids(c["topic_id"]),
            "partition_id": np.array(c["partition_id"], np.int32), "leader": np.array(c["leader"], np.int32),
            "leader_recovery_state": np.array(c["leader_recovery_state"], np.int8),
            "isr": _padded(c["isr"], w["c_isr"]), "isr_count": np.array(c["isr_count"], np.int16),
            "replicas": _padded(c["replicas"], w["c_rep"]), "replica_count": np.array(c["replica_count"], np.int16),
            "extras": _flags(c["extras"]),
            **{name: _padded([v or [] for v in c[name]], w[name]) for name in MORE_LIST_COLUMNS},
            **{name + "_count": _counts(c[name]) for name in MORE_LIST_COLUMNS}},
        "remove_topics": {"record_index": np.array(t.removes["record_index"], np.int32),
                          "topic_id": _ids(t.removes["topic_id"]), "extras": _flags(t.removes["extras"])},
        "configs": {
            "record_index": np.array(g["record_index"], np.int32),
            "resource_type": np.array(g["resource_type"], np.int8),
            "value_null": _flags(g["value_null"]), "extras": _flags(g["extras"]),
            "resource_name_offsets": rn_off, "name_offsets": nm_off + len(rn_blob),
            "value_offsets": va_off + len(rn_blob) + len(nm_blob), "config_blob": rn_blob + nm_blob + va_blob},
        "features": {"record_index": np.array(f["record_index"], np.int32),
                     "feature_level": np.array(f["feature_level"], np.int16), "extras": _flags(f["extras"]),
                     "name_offsets": f_off, "feature_blob": f_blob},
        "fence": {"record_index": np.array(e["record_index"], np.int32),
                  "broker_id": np.array(e["broker_id"], np.int32),
                  "broker_epoch": np.array(e["broker_epoch"], np.int64), "fenced": _flags(e["fenced"]),
                  "extras": _flags(e["extras"])},
        "broker_changes": {"record_index": np.array(b["record_index"], np.int32),
                           "broker_id": np.array(b["broker_id"], np.int32),
                           "broker_epoch": np.array(b["broker_epoch"], np.int64),
                           "fenced": np.array(b["fenced"], np.int8),
                           "in_controlled_shutdown": np.array(b["in_controlled_shutdown"], np.int8),
                           "extras": _flags(b["extras"])},
        "broker_registrations": registrations,
        "producer_ids": {
            "record_index": np.array(t.pids["record_index"], np.int32),
            "broker_id": np.array(t.pids["broker_id"], np.int32),
            "broker_epoch": np.array(t.pids["broker_epoch"], np.int64),
            "next_producer_id": np.array(t.pids["next_producer_id"], np.int64), "extras": _flags(t.pids["extras"])},
        "acls": {
            "record_index": np.array(a["record_index"], np.int32), "acl_id": _ids(a["acl_id"]),
            "removed": _flags(a["removed"]), "extras": _flags(a["extras"]),
            **{k: np.array(a[k], np.int8) for k in ("resource_type", "pattern_type", "operation", "permission_type")},
            "resource_name_offsets": an_off, "principal_offsets": pr_off + len(an_blob),
            "host_offsets": ho_off + len(an_blob) + len(pr_blob), "acl_blob": an_blob + pr_blob + ho_blob},
        "client_quotas": {
            "record_index": np.array(q["record_index"], np.int32), "value": np.array(q["value"], np.float64),
            "remove": _flags(q["remove"]), "entity_end": np.array(q["entity_end"], np.int64),
            "extras": _flags(q["extras"]), "key_offsets": key_off, "key_blob": key_blob,
            "entity_type_offsets": et_off, "entity_name_offsets": en_off + len(et_blob),
            "entity_name_null": _flags(qe["entity_name_null"]), "entity_blob": et_blob + en_blob},
        "scram": scram,
        "delegation_tokens": tokens,
    }
