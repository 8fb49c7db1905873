"""Proves the kio installed is one whose internals kraftlog still relies on, and fails naming the
piece that changed: kraftlog does not only call kio's request/response classes, it walks their
dataclass fields and field metadata (the length guard, the older-version converter, the tagged
fields of our Metadata answer), reads `__flexible__`, and calls kio's serial and index functions.
pyproject.toml bounds kio's minor version; this is what to run before raising that bound."""

from __future__ import annotations

import dataclasses
import datetime
import io
import re
from importlib import metadata

import pytest

from kraftlog.raft import wire

KIO_REQUIREMENT = re.compile(r"^kio\s*(?P<spec>[^;]*)$")


def _served() -> list[tuple[int, int, type, type]]:
    """(api key, version, request type, response type) of every API a node answers."""
    from kraftlog.engine.node.node import NODE_CONTROLLER_APIS

    rows = {(a.key, a.version): (a.request, a.response) for a in wire.APIS.values()}
    rows[(wire.PRODUCE_API.key, wire.PRODUCE_API.version)] = (wire.PRODUCE_API.request, wire.PRODUCE_API.response)
    for key, (version, req, resp) in NODE_CONTROLLER_APIS.items():
        rows[(key, version)] = (req, resp)
    return [(k, v, req, resp) for (k, v), (req, resp) in sorted(rows.items())]


SERVED = _served()


def _changed(piece: str, relied_on_by: str, detail: object = "") -> str:
    return f"kio {metadata.version('kio')} changed {piece} (relied on by {relied_on_by}){': ' if detail else ''}{detail}"


def test_the_installed_kio_is_within_the_declared_bound():
    (spec,) = [m["spec"] for line in metadata.requires("kraftlog") or [] if (m := KIO_REQUIREMENT.match(line))]
    assert "<" in spec, f"kio's requirement {spec!r} has no upper bound: the internals below may change in any release"
    upper = tuple(int(p) for p in re.search(r"<\s*([\d.]+)", spec).group(1).split("."))
    installed = tuple(int(p) for p in re.findall(r"\d+", metadata.version("kio"))[:len(upper)])
    assert installed < upper, f"kio {metadata.version('kio')} is outside {spec}"


def test_serial_and_index_functions():
    from kio import index
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_reader, entity_writer

    header = RequestHeader(request_api_key=52, request_api_version=2, correlation_id=7, client_id="c")
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, header)
    read, size = entity_reader(RequestHeader)(out.getvalue(), 0)
    assert (read, size) == (header, len(out.getvalue())), _changed(
        "kio.serial.entity_reader/entity_writer (reader returns (value, bytes read))", "raft/wire.py, engine/node/node.py")
    for key, version, req, resp in SERVED:
        assert index.load_request_schema(key, version) is req, _changed(
            "kio.index.load_request_schema", "raft/aio/transport.py, engine/protocol/older_versions.py", (key, version))
        assert index.load_response_schema(key, version) is resp, _changed(
            "kio.index.load_response_schema", "engine/protocol/older_versions.py", (key, version))


@pytest.mark.parametrize("entity", sorted({t for _, _, req, resp in SERVED for t in (req, resp)},
                                          key=lambda t: t.__module__), ids=lambda t: t.__module__.split("schema.")[-1])
def test_every_served_type_is_a_dataclass_the_length_guard_can_walk(entity):
    from kraftlog.raft.aio import transport

    assert dataclasses.is_dataclass(entity), _changed("entities as dataclasses", "raft/aio/transport.py", entity)
    assert isinstance(entity.__flexible__, bool), _changed("the __flexible__ class attribute", "raft/wire.py")
    try:
        transport._plan(entity)  # kafka_type / tag field metadata, entity fields without kafka_type
    except (TypeError, KeyError, AttributeError) as exc:
        pytest.fail(_changed("the dataclass field metadata (kafka_type, tag)", "raft/aio/transport.py's length guard",
                             f"{entity.__module__}.{entity.__name__}: {exc}"))


def test_request_headers_carry_client_id():
    from kio.schema.request_header.v1.header import RequestHeader as V1
    from kio.schema.request_header.v2.header import RequestHeader as V2

    for header in (V1, V2):
        assert "client_id" in {f.name for f in dataclasses.fields(header)}, _changed(
            "RequestHeader.client_id", "raft/aio/transport.py (always a non-flexible nullable string)", header)


def test_a_tagged_field_declared_in_metadata_is_written_and_read():
    """engine/protocol/metadata_response.py adds tagged fields to kio's types by declaring them."""
    from kio.serial import entity_reader, entity_writer

    from kraftlog.engine.protocol.metadata_response import EpochMetadataResponse

    answer = EpochMetadataResponse(throttle_time=datetime.timedelta(0), brokers=(), cluster_id=None,
                                   controller_id=1, topics=(), metadata_offset=41)
    out = io.BytesIO()
    entity_writer(EpochMetadataResponse)(out, answer)
    read, _ = entity_reader(EpochMetadataResponse)(out.getvalue(), 0)
    assert read.metadata_offset == 41, _changed("writing/reading tagged fields declared by field metadata",
                                               "engine/protocol/metadata_response.py", read)


def test_primitive_and_error_names():
    import kio.static.primitive as primitive
    from kio.schema.errors import ErrorCode

    for name in ("i8", "i16", "i32", "i64", "u16", "Records", "i32Timedelta"):
        assert hasattr(primitive, name), _changed(f"kio.static.primitive.{name}", "engine/, raft/wire.py")
    assert ErrorCode.none == 0, _changed("kio.schema.errors.ErrorCode", "engine/")
    assert issubclass(primitive.i32Timedelta, datetime.timedelta), _changed(
        "i32Timedelta as a timedelta", "engine/protocol/older_versions.py (_zero)")
