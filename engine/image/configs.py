"""What a ConfigRecord does to its resource's configs (Kafka's ConfigurationsDelta), written once
for MetadataDelta.replay_config (image.py) and the topic-stream pass's pure twin (index_pure.py).
Its own module because the twin cannot import image.py: image.py -> topics.py -> index ->
index_pure. (The native pass's put_config in csrc/_image.pyx mirrors it, as a native function
mirrors its twin.)"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

TOPIC_RESOURCE_TYPE = 2  # Kafka's ConfigResource.Type.TOPIC id (ConfigRecord.ResourceType)


def edited_config(current: Mapping[str, str] | None, name: str, value: str | None) -> Mapping[str, str] | None:
    """A resource's configs (``current``, None when it has none) after a ConfigRecord sets
    ``name`` to ``value`` (None deletes it): ``current`` itself when that changes nothing (so a
    delta holds only real changes), None when no config is left (the resource's key goes), else a
    new read-only mapping."""
    if value is None:
        if current is None or name not in current:
            return current
    elif current is not None and current.get(name) == value:
        return current
    updated = {} if current is None else dict(current)
    if value is None:
        del updated[name]
    else:
        updated[name] = value
    return MappingProxyType(updated) if updated else None
