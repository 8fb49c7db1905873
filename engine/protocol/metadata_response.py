"""The Metadata v12 answer as our nodes write it: kio's types plus two tagged fields of our own.

They ride on the v12 answer as tagged fields (KIP-482: a reader skips tags it does not
know, so Kafka clients read the answer unchanged)::

    MetadataResponseTopic  tag 10000 (TOPIC_EPOCH_TAG)      int64  the topic's KIP-232 topic epoch:
                           the offset of its last create or partition addition (omitted when -1)
    MetadataResponse       tag 10001 (METADATA_OFFSET_TAG)  int64  the offset of the last record in
                           the image that answered (omitted when -1): how recent this node is

    tagged fields of a flexible struct, after its last regular field:
        count uvarint, then per field in tag order: tag uvarint, size uvarint, value
        (10000 = 0x90 0x4e as uvarint, size 8, int64 big-endian)

kio writes tagged fields that a dataclass declares (field metadata ``tag``), so the two types
below are kio's v12 types plus one declared field each: ``wire.frame_response`` encodes them as
it encodes any kio body. kio's *reader* refuses tags its type does not declare (KeyError
"Unknown tagged field tag"), so a kio reader of these answers must use ``EpochMetadataResponse``;
kafka-python (and Kafka's Java client) skip them.
"""

from __future__ import annotations

import dataclasses

from kio.schema.metadata.v12 import response as kmetadata_resp
from kio.static.primitive import i64

from kraftlog.engine.image.topics import TOPIC_EPOCH_TAG

METADATA_OFFSET_TAG = 10_001
NO_EPOCH = -1  # a tagged field left at its default is not written


def _tagged_int64(tag: int) -> dataclasses.Field:
    return dataclasses.field(default=i64(NO_EPOCH), metadata={"kafka_type": "int64", "tag": tag})


# make_dataclass, not a class statement: kio reads each field's type object, and this module's
# `from __future__ import annotations` would leave class-statement annotations as strings.
EpochMetadataResponseTopic = dataclasses.make_dataclass(
    "EpochMetadataResponseTopic", [("topic_epoch", i64, _tagged_int64(TOPIC_EPOCH_TAG))],
    bases=(kmetadata_resp.MetadataResponseTopic,), frozen=True, slots=True, kw_only=True)
EpochMetadataResponseTopic.__doc__ = "kio's v12 MetadataResponseTopic + the topic epoch (tag 10000)."
EpochMetadataResponseTopic.__module__ = __name__

# `topics` is re-declared with the new element type (it keeps its place among the fields)
EpochMetadataResponse = dataclasses.make_dataclass(
    "EpochMetadataResponse",
    [("topics", tuple[EpochMetadataResponseTopic, ...], dataclasses.field()),
     ("metadata_offset", i64, _tagged_int64(METADATA_OFFSET_TAG))],
    bases=(kmetadata_resp.MetadataResponse,), frozen=True, slots=True, kw_only=True)
EpochMetadataResponse.__doc__ = "kio's v12 MetadataResponse + the answering image's offset (tag 10001)."
EpochMetadataResponse.__module__ = __name__
