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


def full_summary(image: MetadataImage) -> dict:
    """``summary`` plus every other sub-image, the counts, and each live topic reached by its id
    (the id index must agree with the name index)."""
    topics = image.topics
    by_id = {}
    for name in topics.topic_names():
        view = topics.topic(name)
        by_id[view.topic_id] = (topics.topic_by_id(view.topic_id),
                                tuple(topics.partition_by_id(view.topic_id, p) for p in range(view.partition_count)))
    return {**summary(image), "acls": {k: dict(v) for k, v in image.acls.items()},
            "scram": {k: dict(v) for k, v in image.scram.items()},
            "tokens": {k: dict(v) for k, v in image.delegation_tokens.items()},
            "zk_migration_state": image.zk_migration_state, "by_id": by_id,
            "counts": (topics.live_topics, topics.partition_count)}
