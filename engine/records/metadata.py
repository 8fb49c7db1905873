"""Generic codec of metadata records and KRaft control records, driven by the schema table.

Metadata record value (the record key is null):

    frameVersion  uvarint   always 1 (0 was the 2.8 preview format, refused)
    apiKey        uvarint   which record (schema.BY_API_KEY), <= 0x7fff
    version       uvarint   the record's version, <= 0x7fff
    body          the record's fields at that version (below); nothing may follow it

Control record (batch with the control bit set):

    key:   version int16 (0; a higher one is read as 0, as Kafka does), type int16 (schema.CONTROL_TYPES)
    value: the body at its version; every control body starts with its own Version int16 field,
           which is the version it was written at

Body of a struct at version v, fields in schema order, skipping fields absent at v:

    int8/int16/int32/int64, uint16/uint32, float64   big-endian, fixed size; bool is one byte (!= 0)
    uuid              16 bytes, most significant first
    flexible versions (v >= flexibleVersions):
      string/bytes    uvarint length+1 (0 = null), then the bytes (strings in UTF-8, <= 0x7fff bytes)
      array           uvarint count+1 (0 = null), then the elements
      tagged fields   after the untagged ones: uvarint count, then per field in ascending tag order
                      uvarint tag, uvarint size, the value (encoded as above); a tagged field is
                      written only when it differs from its default
    older versions:
      string          int16 length (-1 = null);  bytes / array: int32 length or count (-1 = null)

Values: ints are int, float64 float, bool bool, strings str, bytes bytes, UUIDs uuid.UUID, arrays
lists, structs dicts keyed by the schema's field names. Decoding fills every field of the schema,
with its default where the version lacks it. Tagged fields of unknown tags are kept, raw, under
the key UNKNOWN_TAGS of the struct they were found in ({tag: bytes}) and written back on encode,
so a record round-trips byte for byte.

Each (record, version) is compiled once, at import, into a plan of reader and writer closures;
decoding a record is then a walk over that plan with no per-field lookups.
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from kraftlog.engine.records.schema import (
    BY_API_KEY,
    CONTROL_BY_NAME,
    CONTROL_TYPES,
    RECORD_TYPES,
    STRUCT_DEFAULT,
    ZERO_UUID,
    FieldSchema,
    RecordSchema,
    camel_case,
    uuid_to_kafka,
)
from kraftlog.engine.records.wire import decode_uvarint, encode_uvarint
from kraftlog.errors import CorruptRecordError, KraftlogError

FRAME_VERSION = 1
CONTROL_KEY_VERSION = 0
CONTROL_KEY = struct.Struct(">hh")  # version int16, type int16
UNKNOWN_TAGS = "_unknown_tagged_fields"  # struct dict key: {tag: raw bytes} of tags the version lacks
MAX_STRING_BYTES = 0x7FFF  # Kafka refuses longer strings (their length is a short in old versions)
MAX_UVARINT_BYTES = 5  # lengths, counts, tags and frame fields are 32-bit unsigned varints
_MISSING = object()


class UnknownRecordTypeError(CorruptRecordError):
    """A record whose apiKey (or control type) is not in the schema table."""

    def __init__(self, message: str, *, api_key: int, version: int | None = None,
                 position: int | None = None, path: str | None = None):
        super().__init__(message, position=position, path=path)
        self.api_key = api_key
        self.version = version


class UnsupportedRecordVersionError(UnknownRecordTypeError):
    """A known record type at a version outside its validVersions."""


class FieldsLostError(KraftlogError):
    """Encoding at this version would drop fields that hold non-default values."""

    def __init__(self, record_type: str, version: int, fields: list[str]):
        super().__init__(f"{record_type} v{version} cannot carry {', '.join(fields)} "
                         "(they hold non-default values)")
        self.record_type = record_type
        self.version = version
        self.fields = fields


@dataclass(slots=True)
class MetadataRecord:
    """One decoded metadata or control record (the slow path: a dict per record)."""

    record_type: str          # schema name, e.g. "PartitionRecord" or "LeaderChangeMessage"
    version: int
    data: dict[str, Any]
    api_key: int = -1         # metadata apiKey, or the control type when control is True
    control: bool = False

    @property
    def schema(self) -> RecordSchema:
        return (CONTROL_BY_NAME if self.control else RECORD_TYPES)[self.record_type]

    def fields_lost(self, version: int) -> list[str]:
        return fields_lost(self.schema, self.data, version)


# ---- primitive readers and writers ------------------------------------------------------------
# A reader is read(buf, pos, end) -> (value, next pos); buf is indexable (bytes or a memoryview of
# unsigned bytes) and never read at or past end. A writer is write(out: bytearray, value).

_FIXED = {
    "int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"), "uint16": struct.Struct(">H"), "uint32": struct.Struct(">I"),
    "float64": struct.Struct(">d"),
}
_I16 = _FIXED["int16"]
_I32 = _FIXED["int32"]


_INT32_ARRAYS: dict[int, struct.Struct] = {}
MAX_CACHED_INT32_ARRAY = 4096  # replica lists are short; longer arrays compile their format each time


def _int32s(n: int) -> struct.Struct:
    """The Struct of n big-endian int32, cached for the short lengths replica lists have."""
    st = _INT32_ARRAYS.get(n)
    if st is None:
        st = struct.Struct(f">{n}i")
        if n <= MAX_CACHED_INT32_ARRAY:
            _INT32_ARRAYS[n] = st
    return st


def _corrupt(path: str, what: str, position: int) -> CorruptRecordError:
    return CorruptRecordError(f"{path}: {what}", position=position)


def _read_uvarint(buf, pos: int, end: int) -> tuple[int, int]:
    if pos < end:
        b = buf[pos]
        if b < 0x80:  # one-byte fast path: every small length, count and tag
            return b, pos + 1
    return decode_uvarint(buf, pos, MAX_UVARINT_BYTES)


def _write_uvarint(out: bytearray, value: int) -> None:
    if value < 0x80:
        out.append(value)
    else:
        out += encode_uvarint(value)


def _bool_codec(path: str):
    # One byte; Kafka reads any non-zero byte as true and writes 1.
    def read(buf, pos, end):
        if pos >= end:
            raise _corrupt(path, "bool runs past the end", pos)
        return buf[pos] != 0, pos + 1

    def write(out, value):
        if not isinstance(value, bool):
            raise ValueError(f"{path}: {value!r} is not a bool")
        out.append(1 if value else 0)
    return read, write


def _fixed_codec(type_: str, path: str):
    st = _FIXED[type_]
    size, unpack, pack = st.size, st.unpack_from, st.pack

    def read(buf, pos, end):
        nxt = pos + size
        if nxt > end:
            raise _corrupt(path, f"{type_} runs past the end", pos)
        return unpack(buf, pos)[0], nxt

    def write(out, value):
        try:
            out += pack(value)
        except struct.error as exc:
            raise ValueError(f"{path}: {value!r} is not a valid {type_} ({exc})") from None
    return read, write


def _uuid_codec(path: str):
    def read(buf, pos, end):
        nxt = pos + 16
        if nxt > end:
            raise _corrupt(path, "uuid runs past the end", pos)
        return uuid.UUID(bytes=bytes(buf[pos:nxt])), nxt

    def write(out, value):
        if not isinstance(value, uuid.UUID):
            raise ValueError(f"{path}: {value!r} is not a uuid.UUID")
        out += value.bytes
    return read, write


def _length_codec(path: str, flexible: bool, wide: bool):
    """Length prefix of a string / bytes / array: (read -> length or -1 for null, write)."""
    if flexible:
        def read(buf, pos, end):
            n, pos = _read_uvarint(buf, pos, end)
            return n - 1, pos

        def write(out, n):
            _write_uvarint(out, n + 1)
        return read, write
    st = _I32 if wide else _I16

    def read_fixed(buf, pos, end):
        if pos + st.size > end:
            raise _corrupt(path, "length runs past the end", pos)
        return st.unpack_from(buf, pos)[0], pos + st.size

    def write_fixed(out, n):
        out += st.pack(n)
    return read_fixed, write_fixed


def _blob_codec(type_: str, path: str, flexible: bool, nullable: bool):
    """string or bytes: a length prefix (see _length_codec), then the bytes."""
    is_string = type_ == "string"
    read_len, write_len = _length_codec(path, flexible, wide=not is_string)

    def read(buf, pos, end):
        start = pos
        n, pos = read_len(buf, pos, end)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise _corrupt(path, f"null or negative length {n} in a non-nullable {type_}", start)
        nxt = pos + n
        if nxt > end:
            raise _corrupt(path, f"{type_} of {n} bytes runs past the end", start)
        if not is_string:
            return bytes(buf[pos:nxt]), nxt
        if n > MAX_STRING_BYTES:
            raise _corrupt(path, f"string of {n} bytes is longer than {MAX_STRING_BYTES}", start)
        try:
            return str(buf[pos:nxt], "utf-8"), nxt
        except UnicodeDecodeError as exc:
            raise _corrupt(path, f"string is not UTF-8 ({exc.reason})", start) from None

    def write(out, value):
        if value is None:
            if not nullable:
                raise ValueError(f"{path}: null in a non-nullable {type_}")
            write_len(out, -1)
            return
        if is_string:
            if not isinstance(value, str):
                raise ValueError(f"{path}: {value!r} is not a str")
            value = value.encode("utf-8")
            if len(value) > MAX_STRING_BYTES:
                raise ValueError(f"{path}: string of {len(value)} bytes is longer than {MAX_STRING_BYTES}")
        elif not isinstance(value, bytes | bytearray | memoryview):
            raise ValueError(f"{path}: {value!r} is not bytes")
        write_len(out, len(value))
        out += value
    return read, write


def _array_codec(field: FieldSchema, path: str, version: int, flexible: bool, nullable: bool):
    read_len, write_len = _length_codec(path, flexible, wide=True)
    elem_type = field.element_type
    if field.is_struct:
        plan = _StructPlan(field.fields, version, flexible, path + "[]")
        read_elem, write_elem = plan.read, plan.write
    else:
        read_elem, write_elem = _scalar_codec(elem_type, path + "[]", flexible, nullable=False)
    int32s = elem_type == "int32"  # the common case (replica lists): one unpack for the whole array

    def read(buf, pos, end):
        start = pos
        n, pos = read_len(buf, pos, end)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise _corrupt(path, f"null or negative count {n} in a non-nullable array", start)
        if n > end - pos:  # every element takes at least one byte
            raise _corrupt(path, f"array of {n} elements cannot fit in {end - pos} bytes", start)
        if int32s:
            nxt = pos + 4 * n
            if nxt > end:
                raise _corrupt(path, f"array of {n} int32 runs past the end", start)
            return list(_int32s(n).unpack_from(buf, pos)), nxt
        items = []
        append = items.append
        for _ in range(n):
            value, pos = read_elem(buf, pos, end)
            append(value)
        return items, pos

    def write(out, value):
        if value is None:
            if not nullable:
                raise ValueError(f"{path}: null in a non-nullable array")
            write_len(out, -1)
            return
        write_len(out, len(value))
        if int32s:
            try:
                out += _int32s(len(value)).pack(*value)
            except struct.error as exc:
                raise ValueError(f"{path}: not a list of int32 ({exc})") from None
            return
        for item in value:
            write_elem(out, item)
    return read, write


def _scalar_codec(type_: str, path: str, flexible: bool, nullable: bool):
    if type_ == "bool":
        return _bool_codec(path)
    if type_ in _FIXED:
        return _fixed_codec(type_, path)
    if type_ == "uuid":
        return _uuid_codec(path)
    if type_ in ("string", "bytes"):
        return _blob_codec(type_, path, flexible, nullable)
    raise NotImplementedError(f"{path}: type {type_} is not supported by the codec")


def _field_codec(field: FieldSchema, path: str, version: int, flexible: bool):
    nullable = field.nullable_in(version)
    if field.is_array:
        return _array_codec(field, path, version, flexible, nullable)
    if field.is_struct:
        if nullable:  # Kafka marks a nullable struct with an int8 prefix; no schema here needs it
            raise NotImplementedError(f"{path}: nullable structs are not supported")
        plan = _StructPlan(field.fields, version, flexible, path)
        return plan.read, plan.write
    return _scalar_codec(field.type, path, flexible, nullable)


# ---- defaults ---------------------------------------------------------------------------------

def default_value(field: FieldSchema) -> Any:
    """A fresh default value of ``field`` (lists and dicts are new objects each call)."""
    d = field.default
    if d is STRUCT_DEFAULT:
        return {f.name: default_value(f) for f in field.fields}
    if d == () and field.is_array:
        return []
    return d


def is_default(field: FieldSchema, value: Any) -> bool:
    """True when ``value`` equals the field's default (an empty list equals the default ())."""
    d = field.default
    if d is None:
        return value is None
    if field.is_array:
        return value is not None and len(value) == 0
    if d is STRUCT_DEFAULT:
        return (value is not None and not value.get(UNKNOWN_TAGS)
                and all(f.name not in value or is_default(f, value[f.name]) for f in field.fields))
    return value == d


# ---- one struct at one version ----------------------------------------------------------------

class _StructPlan:
    """The compiled layout of one struct (a record body or a nested struct) at one version."""

    __slots__ = ("path", "flexible", "regular", "tagged_read", "tagged_write", "fill", "known",
                 "can_lose", "read", "write")

    def __init__(self, fields: tuple[FieldSchema, ...], version: int, flexible: bool, path: str):
        self.path = path
        self.flexible = flexible
        self.regular = []       # (name, read, write, field) in wire order
        self.tagged_read = {}   # tag -> (name, read)
        self.tagged_write = []  # (tag, name, write, field), ascending tag
        self.fill = []          # (field) filled with its default when the bytes did not carry it
        self.known = frozenset([f.name for f in fields] + [UNKNOWN_TAGS])
        self.can_lose = False   # some field here or below is absent at this version
        for f in fields:
            if not f.present_in(version):
                self.fill.append(f)
                self.can_lose = True
                continue
            read, write = _field_codec(f, f"{path}.{f.name}", version, flexible)
            self.can_lose |= _subtree_can_lose(f, version)
            if flexible and f.tagged_in(version):
                self.tagged_read[f.tag] = (f.name, read)
                self.tagged_write.append((f.tag, f.name, write, f))
                self.fill.append(f)
            else:
                self.regular.append((f.name, read, write, f))
        self.tagged_write.sort(key=lambda entry: entry[0])
        self.read = self._read_flexible if flexible else self._read_plain
        self.write = self._write

    # -- decode --
    def _read_plain(self, buf, pos, end):
        data = {}
        for name, read, _, _ in self.regular:
            data[name], pos = read(buf, pos, end)
        for f in self.fill:
            data[f.name] = default_value(f)
        return data, pos

    def _read_flexible(self, buf, pos, end):
        data = {}
        for name, read, _, _ in self.regular:
            data[name], pos = read(buf, pos, end)
        pos = self._read_tags(buf, pos, end, data)
        for f in self.fill:
            if f.name not in data:
                data[f.name] = default_value(f)
        return data, pos

    def _read_tags(self, buf, pos, end, data):
        start = pos
        count, pos = _read_uvarint(buf, pos, end)
        if count > end - pos:  # each tagged field takes at least two bytes
            raise _corrupt(self.path, f"{count} tagged fields cannot fit in {end - pos} bytes", start)
        for _ in range(count):
            tag_at = pos
            tag, pos = _read_uvarint(buf, pos, end)
            size, pos = _read_uvarint(buf, pos, end)
            nxt = pos + size
            if nxt > end:
                raise _corrupt(self.path, f"tagged field {tag} of {size} bytes runs past the end", tag_at)
            entry = self.tagged_read.get(tag)
            if entry is None:
                data.setdefault(UNKNOWN_TAGS, {})[tag] = bytes(buf[pos:nxt])
            else:
                name, read = entry
                data[name], used = read(buf, pos, nxt)
                if used != nxt:
                    raise _corrupt(self.path, f"tagged field {name} (tag {tag}) declares {size} bytes "
                                   f"but its value takes {used - pos}", tag_at)
            pos = nxt
        return pos

    # -- encode --
    def _write(self, out, data):
        if not isinstance(data, dict):
            raise ValueError(f"{self.path}: {data!r} is not a dict")
        if not data.keys() <= self.known:
            unknown = sorted(set(data) - self.known)
            raise ValueError(f"{self.path}: no such field(s) {unknown}")
        get = data.get
        for name, _, write, f in self.regular:
            value = get(name, _MISSING)
            write(out, default_value(f) if value is _MISSING else value)
        if self.flexible:
            self._write_tags(out, get(UNKNOWN_TAGS), get)

    def _write_tags(self, out, unknown, get):
        entries = []
        for tag, name, write, f in self.tagged_write:
            value = get(name, _MISSING)
            if value is _MISSING or is_default(f, value):
                continue
            body = bytearray()
            write(body, value)
            entries.append((tag, body))
        if unknown:
            taken = {tag for tag, _ in entries}
            clash = taken.intersection(unknown)
            if clash:
                raise ValueError(f"{self.path}: unknown tagged fields {sorted(clash)} clash with known ones")
            entries.extend(unknown.items())
            entries.sort(key=lambda entry: entry[0])
        _write_uvarint(out, len(entries))
        for tag, body in entries:
            _write_uvarint(out, tag)
            _write_uvarint(out, len(body))
            out += body


def _subtree_can_lose(field: FieldSchema, version: int) -> bool:
    return any(not f.present_in(version) or _subtree_can_lose(f, version) for f in field.fields)


class _RecordPlan:
    __slots__ = ("schema", "version", "body")

    def __init__(self, schema: RecordSchema, version: int):
        self.schema = schema
        self.version = version
        self.body = _StructPlan(schema.fields, version, schema.is_flexible(version), schema.name)


def _compile(schemas) -> dict[int, dict[int, _RecordPlan]]:
    plans = {}
    for s in schemas:
        lo, hi = s.valid_versions
        plans[s.api_key] = {v: _RecordPlan(s, v) for v in range(lo, hi + 1)}
    return plans


_METADATA_PLANS = _compile(BY_API_KEY.values())
_CONTROL_PLANS = _compile(CONTROL_TYPES.values())


# ---- lookups ----------------------------------------------------------------------------------

def _schema(name_or_key) -> RecordSchema:
    """A metadata schema by name or apiKey, or a control schema by its name; programmer errors raise."""
    if isinstance(name_or_key, RecordSchema):
        return name_or_key
    if isinstance(name_or_key, int):
        if name_or_key not in BY_API_KEY:
            raise ValueError(f"no metadata record has apiKey {name_or_key}")
        return BY_API_KEY[name_or_key]
    found = RECORD_TYPES.get(name_or_key) or CONTROL_BY_NAME.get(name_or_key)
    if found is None:
        raise ValueError(f"no metadata or control record is named {name_or_key!r}")
    return found


def _plan(schema: RecordSchema, version: int) -> _RecordPlan:
    plans = (_CONTROL_PLANS if schema.kind == "control" else _METADATA_PLANS)[schema.api_key]
    plan = plans.get(version)
    if plan is None:
        lo, hi = schema.valid_versions
        raise ValueError(f"{schema.name} has no version {version} (valid {lo}-{hi})")
    return plan


def _control_schema(control_type) -> RecordSchema:
    if isinstance(control_type, int):
        if control_type not in CONTROL_TYPES:
            raise ValueError(f"no control record has type {control_type}")
        return CONTROL_TYPES[control_type]
    for s in CONTROL_TYPES.values():
        if control_type in (s.name, s.json_type):
            return s
    raise ValueError(f"no control record is named {control_type!r}")


def _view(buf, end: int | None):
    """Something indexable by byte whose length is ``end``: bytes as-is, else a memoryview."""
    if isinstance(buf, bytes) and (end is None or end == len(buf)):
        return buf
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if end is not None:
        if not 0 <= end <= len(view):
            raise ValueError(f"end {end} is outside the buffer of {len(view)} bytes")
        view = view[:end]
    return view


# ---- public API -------------------------------------------------------------------------------

def encode_body(name_or_key, version: int, data: dict, *, allow_loss: bool = False) -> bytes:
    """The fields of a record at ``version``, without frame (a control record's value is this)."""
    schema = _schema(name_or_key)
    plan = _plan(schema, version)
    if plan.body.can_lose and not allow_loss:
        lost = fields_lost(schema, data, version)
        if lost:
            raise FieldsLostError(schema.name, version, lost)
    out = bytearray()
    plan.body.write(out, data)
    return bytes(out)


def encode_record(name_or_api_key, version: int, data: dict, *, allow_loss: bool = False) -> bytes:
    """The framed value of a metadata record. Fields the data omits take their defaults.

    Raises FieldsLostError when ``data`` holds a non-default value in a field ``version`` lacks,
    unless ``allow_loss`` (an UNSAFE_DOWNGRADE that has already reported fields_lost).
    """
    schema = _schema(name_or_api_key)
    if schema.kind != "metadata":
        raise ValueError(f"{schema.name} is a control record: use encode_control")
    plan = _plan(schema, version)
    if plan.body.can_lose and not allow_loss:
        lost = fields_lost(schema, data, version)
        if lost:
            raise FieldsLostError(schema.name, version, lost)
    out = bytearray()
    _write_uvarint(out, FRAME_VERSION)
    _write_uvarint(out, schema.api_key)
    _write_uvarint(out, version)
    plan.body.write(out, data)
    return bytes(out)


def decode_record(buf, pos: int = 0, end: int | None = None) -> MetadataRecord:
    """Decode the framed metadata record value in buf[pos:end] (end: the end of buf)."""
    view = _view(buf, end)
    end = len(view)
    if not 0 <= pos <= end:
        raise ValueError(f"position {pos} is outside the value's {end} bytes")
    start = pos
    frame, pos = _read_uvarint(view, pos, end)
    if frame != FRAME_VERSION:
        why = " (the KRaft 2.8 preview format, not supported)" if frame == 0 else ""
        raise CorruptRecordError(f"metadata record frame version {frame}{why}; only 1 is known", position=start)
    key_at = pos
    api_key, pos = _read_uvarint(view, pos, end)
    version, pos = _read_uvarint(view, pos, end)
    if api_key > 0x7FFF or version > 0x7FFF:
        raise CorruptRecordError(f"metadata record apiKey {api_key} / version {version} exceed int16",
                                 position=key_at)
    plans = _METADATA_PLANS.get(api_key)
    if plans is None:
        raise UnknownRecordTypeError(f"unknown metadata record apiKey {api_key}", api_key=api_key,
                                     version=version, position=key_at)
    plan = plans.get(version)
    if plan is None:
        s = BY_API_KEY[api_key]
        raise UnsupportedRecordVersionError(
            f"{s.name} version {version} is not supported (valid {s.valid_versions[0]}-{s.valid_versions[1]})",
            api_key=api_key, version=version, position=key_at)
    data, pos = plan.body.read(view, pos, end)
    if pos != end:
        raise CorruptRecordError(f"{end - pos} byte(s) of garbage after {plan.schema.name}", position=pos)
    return MetadataRecord(plan.schema.name, version, data, api_key, False)


def encode_control(control_type, version: int, data: dict, *, allow_loss: bool = False) -> tuple[bytes, bytes]:
    """(key, value) of a control record; ``control_type`` is 2..6 or a control record's name.

    The body's Version field is the message version: it defaults to ``version`` and must equal it.
    """
    schema = _control_schema(control_type)
    stated = data.get("Version", version)
    if stated != version:
        raise ValueError(f"{schema.name}: Version field {stated} differs from the version {version}")
    body = encode_body(schema, version, {**data, "Version": version}, allow_loss=allow_loss)
    return CONTROL_KEY.pack(CONTROL_KEY_VERSION, schema.api_key), body


def control_type_of(key) -> int:
    """The control type in a control record key (Kafka's ControlRecordType.parseTypeId)."""
    view = _view(key, None)
    if len(view) < CONTROL_KEY.size:
        raise CorruptRecordError(f"control record key of {len(view)} bytes; at least 4 expected", position=0)
    key_version, control_type = CONTROL_KEY.unpack_from(view, 0)
    if key_version < 0:
        raise CorruptRecordError(f"control record key version {key_version} is negative", position=0)
    return control_type


def decode_control(key, value, version: int | None = None) -> MetadataRecord:
    """Decode a control record. Its version is the body's leading Version int16 unless given."""
    control_type = control_type_of(key)
    plans = _CONTROL_PLANS.get(control_type)
    if plans is None:
        raise UnknownRecordTypeError(f"control record type {control_type} is not a KRaft control record",
                                     api_key=control_type, position=2)
    view = _view(value, None)
    end = len(view)
    if version is None:
        if end < 2:
            raise CorruptRecordError("control record value is too short for its Version field", position=0)
        version = _I16.unpack_from(view, 0)[0]
    plan = plans.get(version)
    if plan is None:
        s = CONTROL_TYPES[control_type]
        raise UnsupportedRecordVersionError(
            f"{s.name} version {version} is not supported (valid {s.valid_versions[0]}-{s.valid_versions[1]})",
            api_key=control_type, version=version, position=0)
    data, pos = plan.body.read(view, 0, end)
    if pos != end:
        raise CorruptRecordError(f"{end - pos} byte(s) of garbage after {plan.schema.name}", position=pos)
    return MetadataRecord(plan.schema.name, version, data, control_type, True)


def fields_lost(name, data: dict, version: int) -> list[str]:
    """Fields of ``data`` holding non-default values that ``version`` of the record cannot carry.

    Nested fields are named by path: ``Voters[2].VoterDirectoryId``. Unknown tagged fields are not
    counted: they are carried as they are. This is what an image written at a lower
    metadata.version loses (KIP-1155 downgrade).
    """
    schema = _schema(name)
    if not schema.has_version(version):
        lo, hi = schema.valid_versions
        raise ValueError(f"{schema.name} has no version {version} (valid {lo}-{hi})")
    return _lost(schema.fields, data, version, "")


def _lost(fields: tuple[FieldSchema, ...], data: dict, version: int, prefix: str) -> list[str]:
    out = []
    for f in fields:
        value = data.get(f.name, _MISSING)
        if value is _MISSING:
            continue
        path = prefix + f.name
        if not f.present_in(version):
            if not is_default(f, value):
                out.append(path)
        elif f.fields and value is not None:
            if f.is_array:
                for i, item in enumerate(value):
                    out.extend(_lost(f.fields, item, version, f"{path}[{i}]."))
            else:
                out.extend(_lost(f.fields, value, version, path + "."))
    return out


def to_json(record: MetadataRecord) -> dict:
    """The record as kafka-dump-log --cluster-metadata-decoder prints it.

    {"type": "PARTITION_RECORD", "version": 1, "data": {...}}: field names in camelCase, only the
    fields the version has, tagged fields only when not default, UUIDs in Kafka's base64url form,
    bytes in base64. Control records use Kafka's ControlRecordType names (LEADER_CHANGE, ...).
    """
    schema = record.schema
    return {"type": schema.json_type, "version": record.version,
            "data": _json_struct(schema.fields, record.data, record.version)}


def _json_struct(fields: tuple[FieldSchema, ...], data: dict, version: int) -> dict:
    out = {}
    for f in fields:
        if not f.present_in(version):
            continue
        value = data.get(f.name, _MISSING)
        if value is _MISSING:
            value = default_value(f)
        if f.tagged_in(version) and is_default(f, value):
            continue
        out[camel_case(f.name)] = _json_value(f, value, version)
    return out


def _json_value(f: FieldSchema, value: Any, version: int) -> Any:
    if value is None:
        return None
    if f.is_array:
        if f.fields:
            return [_json_struct(f.fields, item, version) for item in value]
        return [_json_scalar(f.element_type, item) for item in value]
    if f.fields:
        return _json_struct(f.fields, value, version)
    return _json_scalar(f.type, value)


def _json_scalar(type_: str, value: Any) -> Any:
    if type_ == "uuid":
        return uuid_to_kafka(value)
    if type_ == "bytes":
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


__all__ = [
    "CONTROL_KEY", "FRAME_VERSION", "UNKNOWN_TAGS", "ZERO_UUID", "FieldsLostError", "MetadataRecord",
    "UnknownRecordTypeError", "UnsupportedRecordVersionError", "control_type_of", "decode_control",
    "decode_record", "default_value", "encode_body", "encode_control", "encode_record", "fields_lost",
    "is_default", "to_json",
]
