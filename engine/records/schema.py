"""The schema table of every metadata record and KRaft control record, as Python values.

The facts live in ``schema_table.py`` in a compact notation (see its docstring); this module
parses that text once, at import, into frozen ``RecordSchema`` / ``FieldSchema`` values that the
generic codec (``metadata.py``) compiles into per-version plans.

Versions are ``(lowest, highest)`` tuples; an open range "N+" is ``(N, MAX_VERSION)``; "none" is
``None``. Defaults are Python values: int, float, bool, str, bytes, uuid.UUID, None (null), ``()``
for an empty array, ``STRUCT_DEFAULT`` for a struct whose fields all take their defaults.
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass
from typing import Any

from kraftlog.engine.records.schema_table import CONTROL_TABLE, CONTROL_TYPE_NAMES, METADATA_TABLE

MAX_VERSION = 0x7FFF  # versions are int16 on the wire; "N+" reaches up to here
ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID, printed "AAAAAAAAAAAAAAAAAAAAAA"

Versions = tuple[int, int]

# Fixed-size and variable-size primitive types the codec knows.
INT_TYPES = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
             "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
             "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1)}
PRIMITIVE_TYPES = frozenset(INT_TYPES) | {"bool", "float64", "string", "bytes", "uuid"}


class _StructDefault:
    """Marker default of a struct field: a struct whose every field holds its own default."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "STRUCT_DEFAULT"


STRUCT_DEFAULT = _StructDefault()


def in_versions(version: int, versions: Versions | None) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def parse_versions(text: str) -> Versions | None:
    """Kafka's version-range spelling: "3", "0-2", "1+", "none"."""
    if text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), MAX_VERSION
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


@dataclass(frozen=True, slots=True)
class FieldSchema:
    name: str
    type: str                                # "int32", "[]int32", "[]BrokerEndpoint", "KRaftVersionFeature"
    versions: Versions
    nullable_versions: Versions | None = None
    tag: int | None = None
    tagged_versions: Versions | None = None
    default: Any = None                      # parsed; see the module docstring
    fields: tuple[FieldSchema, ...] = ()     # the struct's fields (struct and struct-array types)
    about: str = ""

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """The type of one element of an array field, else the field's own type."""
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """True for a struct field and for an array of structs."""
        return self.element_type not in PRIMITIVE_TYPES

    def present_in(self, version: int) -> bool:
        return in_versions(version, self.versions)

    def nullable_in(self, version: int) -> bool:
        return in_versions(version, self.nullable_versions)

    def tagged_in(self, version: int) -> bool:
        return in_versions(version, self.tagged_versions)


@dataclass(frozen=True, slots=True)
class RecordSchema:
    name: str                                # "PartitionRecord"
    api_key: int                             # metadata apiKey, or the control type of a control record
    valid_versions: Versions
    flexible_from: int | None                # None: no flexible version
    fields: tuple[FieldSchema, ...]
    kind: str = "metadata"                   # "metadata" or "control"

    @property
    def json_type(self) -> str:
        """The type name kafka-dump-log prints: PARTITION_RECORD, or LEADER_CHANGE for controls."""
        if self.kind == "control":
            return CONTROL_TYPE_NAMES[self.api_key]
        return kafka_snake_case(self.name).upper()

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def has_version(self, version: int) -> bool:
        return in_versions(version, self.valid_versions)

    def field(self, name: str) -> FieldSchema:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")


def kafka_snake_case(name: str) -> str:
    """Kafka's generator rule: an underscore before a capital that follows a non-capital."""
    out, prev_upper = [], True
    for c in name:
        if c.isupper():
            if not prev_upper:
                out.append("_")
            out.append(c.lower())
            prev_upper = True
        else:
            out.append(c)
            prev_upper = False
    return "".join(out)


def camel_case(name: str) -> str:
    """Kafka's JSON field name: the schema name with its first letter lowered (KRaftVersion -> kRaftVersion)."""
    return name[:1].lower() + name[1:]


def parse_default(text: str | None, type_: str, nullable: bool, where: str) -> Any:
    """A default as Kafka spells it in the JSON (None when absent) -> its Python value."""
    if text is not None and text == "null":
        if not nullable:
            raise ValueError(f"{where}: default null on a field that is never nullable")
        return None
    if type_.startswith("[]"):
        if text:
            raise ValueError(f"{where}: an array default can only be null or empty")
        return ()
    if type_ in INT_TYPES:
        value = int(text, 16) if text and text.lower().startswith("0x") else int(text or 0)
        lo, hi = INT_TYPES[type_]
        if not lo <= value <= hi:
            raise ValueError(f"{where}: default {value} does not fit {type_}")
        return value
    if type_ == "bool":
        if text not in (None, "", "true", "false"):
            raise ValueError(f"{where}: bad bool default {text!r}")
        return text == "true"
    if type_ == "float64":
        return float(text or 0.0)
    if type_ == "string":
        return text or ""
    if type_ == "bytes":
        if text:
            raise ValueError(f"{where}: a bytes default can only be null or empty")
        return b""
    if type_ == "uuid":
        return uuid_from_kafka(text) if text else ZERO_UUID
    if text:
        raise ValueError(f"{where}: a struct default can only be null or empty")
    return STRUCT_DEFAULT


def uuid_from_kafka(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString: 22 characters of unpadded base64url."""
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16:
        raise ValueError(f"not a Kafka uuid: {text!r}")
    return uuid.UUID(bytes=raw)


def uuid_to_kafka(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: unpadded base64url of the 16 bytes (most significant first)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


# ---- the notation parser ----------------------------------------------------------------------

_HEADER = re.compile(r"^(?P<name>[A-Za-z]\w*) (?P<number>\d+) v(?P<valid>\S+) flex(?P<flex>\S+)$")
_TYPE = re.compile(r"^(\[\])?([a-z]\w*|[A-Z]\w*)$")


def _lines(text: str) -> list[tuple[int, list[str], int]]:
    """(indent, tokens, line number) of each non-blank line, comments removed."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent % 2:
            raise ValueError(f"schema table line {number}: indentation must be a multiple of 2")
        out.append((indent, line.split(), number))
    return out


def _parse_field(tokens: list[str], number: int, children: tuple[FieldSchema, ...],
                 commons: dict[str, tuple[FieldSchema, ...]]) -> FieldSchema:
    where = f"schema table line {number}"
    if len(tokens) < 3:
        raise ValueError(f"{where}: expected <Field> <type> <versions> ...")
    name, type_, versions_text, *attrs = tokens
    if not _TYPE.match(type_):
        raise ValueError(f"{where}: bad type {type_!r}")
    versions = parse_versions(versions_text)
    if versions is None:
        raise ValueError(f"{where}: a field must exist in some version")
    nullable = tagged = tag = None
    default_text = None
    for attr in attrs:
        if attr.startswith("null"):
            nullable = parse_versions(attr[4:]) if attr[4:] else versions
        elif attr.startswith("tag"):
            number_text, _, tv = attr[3:].partition("@")
            tag, tagged = int(number_text), parse_versions(tv) if tv else versions
        elif attr.startswith("="):
            default_text = attr[1:]
        else:
            raise ValueError(f"{where}: unknown attribute {attr!r}")
    element = type_[2:] if type_.startswith("[]") else type_
    if element in PRIMITIVE_TYPES:
        if children:
            raise ValueError(f"{where}: a {type_} field cannot have nested fields")
    elif not children:
        if element not in commons:
            raise ValueError(f"{where}: struct {element} has no fields and no &{element} block")
        children = commons[element]
    elif element[:1].islower():
        raise ValueError(f"{where}: unknown type {type_!r}")
    default = parse_default(default_text, type_, nullable is not None, where)
    return FieldSchema(name, type_, versions, nullable, tag, tagged, default, children)


def _parse_block(lines, i: int, indent: int, commons: dict) -> tuple[tuple[FieldSchema, ...], int]:
    """Fields at exactly ``indent`` starting at lines[i]; returns (fields, index after them)."""
    fields = []
    while i < len(lines) and lines[i][0] == indent:
        _, tokens, number = lines[i]
        i += 1
        children: tuple[FieldSchema, ...] = ()
        if i < len(lines) and lines[i][0] == indent + 2:
            children, i = _parse_block(lines, i, indent + 2, commons)
        if i < len(lines) and lines[i][0] > indent:
            raise ValueError(f"schema table line {lines[i][2]}: unexpected indentation")
        if tokens[0].startswith("&"):
            if not children or len(tokens) != 2:
                raise ValueError(f"schema table line {number}: expected &<Struct> <versions> and fields")
            commons[tokens[0][1:]] = children
            continue
        fields.append(_parse_field(tokens, number, children, commons))
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ValueError(f"schema table near line {lines[i - 1][2]}: duplicate field names {names}")
    return tuple(fields), i


def parse_schema_table(text: str, kind: str = "metadata") -> dict[str, RecordSchema]:
    """Parse a table in the notation of schema_table.py into RecordSchemas by name."""
    lines = _lines(text)
    records: dict[str, RecordSchema] = {}
    i = 0
    while i < len(lines):
        indent, tokens, number = lines[i]
        header = _HEADER.match(" ".join(tokens))
        if indent or not header:
            raise ValueError(f"schema table line {number}: expected '<Record> <number> v<versions> flex<versions>'")
        fields, i = _parse_block(lines, i + 1, 2, {})
        valid = parse_versions(header["valid"])
        flex = parse_versions(header["flex"])
        if valid is None or (flex is not None and flex[1] != MAX_VERSION):
            raise ValueError(f"schema table line {number}: bad valid/flexible versions")
        schema = RecordSchema(header["name"], int(header["number"]), valid,
                              None if flex is None else flex[0], fields, kind)
        _check_tags(schema, number)
        records[schema.name] = schema
    return records


def _check_tags(schema: RecordSchema, number: int) -> None:
    """Tags must be unique per struct and only where the record is flexible (Kafka's own rules)."""
    def walk(fields: tuple[FieldSchema, ...]) -> None:
        tags = [f.tag for f in fields if f.tag is not None]
        if len(set(tags)) != len(tags):
            raise ValueError(f"schema table line {number}: duplicate tags in {schema.name}")
        for f in fields:
            if f.tagged_versions is not None and (
                    schema.flexible_from is None or f.tagged_versions[0] < schema.flexible_from):
                raise ValueError(f"schema table line {number}: {f.name} tagged outside flexible versions")
            walk(f.fields)
    walk(schema.fields)


RECORD_TYPES: dict[str, RecordSchema] = parse_schema_table(METADATA_TABLE, "metadata")
BY_API_KEY: dict[int, RecordSchema] = {s.api_key: s for s in RECORD_TYPES.values()}
CONTROL_BY_NAME: dict[str, RecordSchema] = parse_schema_table(CONTROL_TABLE, "control")
CONTROL_TYPES: dict[int, RecordSchema] = {s.api_key: s for s in CONTROL_BY_NAME.values()}
assert len(BY_API_KEY) == len(RECORD_TYPES) and len(CONTROL_TYPES) == len(CONTROL_BY_NAME)
assert set(CONTROL_TYPES) == set(CONTROL_TYPE_NAMES)

__all__ = [
    "BY_API_KEY", "CONTROL_BY_NAME", "CONTROL_TYPES", "CONTROL_TYPE_NAMES", "MAX_VERSION", "RECORD_TYPES",
    "STRUCT_DEFAULT", "ZERO_UUID", "FieldSchema", "RecordSchema", "camel_case", "in_versions",
    "kafka_snake_case", "parse_default", "parse_schema_table", "parse_versions", "uuid_from_kafka",
    "uuid_to_kafka",
]
