"""Older versions of the client APIs, served by converting to and from the one version the
handlers speak (the "served" version of each API, engine/controller/controller.py's tables).

A client negotiates the highest version both sides know (ApiVersions). Kafka's own clients speak
the newest versions; older clients (aiokafka: Metadata up to v5, CreateTopics up to v3, DeleteTopics
up to v3) stop short of them. Rather than a handler per version, a request at version N is read
with kio's type for N and converted to the served version's type field by field, and the answer
converted back to kio's response type for N, field by field, all generated from kio's schemas:

    request  vN --(kio reader, header v1 or v2)--> entity --to_served()--> served version --> handler
    response served version --from_served()--> entity vN --(kio writer, header v0 or v1)--> client

Field by field, by name, recursively through nested structs and arrays: a field the target does
not have is dropped (an answer to an older version has fewer fields: a v5 Metadata answer has no
leader epochs and no tagged fields); a field the source does not have takes its schema default,
else Kafka's zero value (false, 0, null when nullable, an empty array). The one rename between the
versions served here is DeleteTopics' ``topic_names`` (v0-v5, strings) -> ``topics`` (v6, name +
topic id).

The ranges follow Kafka 4.0's baselines (KIP-896 removed older versions): Metadata v4-v12,
CreateTopics v2-v7, DeleteTopics v1-v6, CreatePartitions v0-v3, ElectLeaders v0-v2 (v0 has no
ElectionType: its zero value, PREFERRED, is what v0 means). The other APIs keep one version.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import types
import typing
import uuid

from kio.index import load_request_schema, load_response_schema
from kio.schema.delete_topics.v6 import request as kdelete_req
from kio.schema.errors import ErrorCode

from kraftlog.engine.protocol.apis import (
    API_CREATE_PARTITIONS,
    API_CREATE_TOPICS,
    API_DELETE_TOPICS,
    API_ELECT_LEADERS,
    API_METADATA,
)

OLDEST: dict[int, int] = {API_METADATA: 4, API_CREATE_TOPICS: 2, API_DELETE_TOPICS: 1, API_CREATE_PARTITIONS: 0,
                          API_ELECT_LEADERS: 0}


def version_range(api_key: int, served: int) -> tuple[int, int]:
    """(min, max) version of ``api_key`` whose served version is ``served``."""
    return OLDEST.get(api_key, served), served


def request_type(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


def response_type(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


def to_served(api_key: int, body, served_type: type):
    """A request read at an older version, as the served version's kio entity."""
    if api_key == API_DELETE_TOPICS and hasattr(body, "topic_names"):
        topics = tuple(kdelete_req.DeleteTopicState(name=n, topic_id=_NO_TOPIC_ID) for n in body.topic_names)
        return kdelete_req.DeleteTopicsRequest(topics=topics, timeout=body.timeout)
    return convert(body, served_type)


def from_served(answer, target_type: type):
    """The served version's answer, as the older version's kio entity."""
    return convert(answer, target_type)


_NO_TOPIC_ID = uuid.UUID(int=0)  # DeleteTopicState.TopicId when a name is given (Kafka's Uuid.ZERO_UUID)


def convert(value, target_type: type):
    """``value`` (a kio entity) as an entity of ``target_type``, field by field (see the module
    docstring)."""
    kwargs = {}
    for f, kind in _fields(target_type):
        if hasattr(value, f.name):
            kwargs[f.name] = _convert_value(getattr(value, f.name), kind)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _zero(f.type)
    return target_type(**kwargs)


def _convert_value(value, kind):
    """``kind``: None (a plain value), an entity type, or ("array", entity type)."""
    if value is None or kind is None:
        return value
    if isinstance(kind, tuple):
        return tuple(convert(v, kind[1]) for v in value)
    return convert(value, kind)


@functools.cache
def _fields(entity_type: type) -> tuple[tuple[dataclasses.Field, object], ...]:
    return tuple((f, _kind(f.type)) for f in dataclasses.fields(entity_type))


def _kind(tp):
    base = _strip_none(tp)
    if typing.get_origin(base) is tuple:
        element = typing.get_args(base)[0]
        return ("array", element) if dataclasses.is_dataclass(element) else None
    return base if dataclasses.is_dataclass(base) else None


def _strip_none(tp):
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _zero(tp):
    """Kafka's zero value for a field the source version does not have and that has no default."""
    if _strip_none(tp) is not tp:
        return None  # nullable
    base = typing.get_origin(tp) or tp
    if base is tuple:
        return ()
    if base is bool:
        return False
    if isinstance(base, type) and issubclass(base, datetime.timedelta):
        return datetime.timedelta(0)  # kio's i32Timedelta/i64Timedelta take plain timedeltas
    if isinstance(base, type) and issubclass(base, ErrorCode):
        return ErrorCode.none
    if base is uuid.UUID:
        return _NO_TOPIC_ID
    if isinstance(base, type) and issubclass(base, str):
        return ""
    if isinstance(base, type) and issubclass(base, int):
        return 0
    raise TypeError(f"no zero value for a field of type {tp!r}")
