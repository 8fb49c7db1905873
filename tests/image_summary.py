"""Everything an image says, as plain values: the equality the image, loader and snapshot tests use."""

from __future__ import annotations

from kraftlog.engine.image.image import MetadataImage


def summary(image: MetadataImage) -> dict:
    topics = image.topics
    return {
        "topics": {name: (topics.topic(name), tuple(topics.partitions_of(name))) for name in topics.topic_names()},
        "brokers": dict(image.cluster.brokers), "controllers": dict(image.cluster.controllers),
        "configs": {k: dict(v) for k, v in image.configs.items()},
        "features": (image.features.metadata_version, dict(image.features.finalized)),
        "producer_ids": image.producer_ids,
        "quotas": {k: dict(v) for k, v in image.client_quotas.items()},
    }
