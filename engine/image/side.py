"""The side stream's native pass (kraftlog._side, csrc/_side.pyx) or its pure twin (side_pure.py):
broker registrations and changes, fences, producer ids, feature levels, client quotas, ACLs,
SCRAM credentials and delegation tokens applied from their decoded column rows in one call, in
log order, until the first record the pass does not apply (the loader replays that one on its
own and calls again from the next)."""

from __future__ import annotations

import numpy as np

from kraftlog._accel import select
from kraftlog.engine.image import side_pure
from kraftlog.engine.image.image import BrokerRegistration, Endpoint, MetadataDelta
from kraftlog.engine.image.topics import MetadataReplayError

_impl = select("kraftlog._side", "kraftlog.engine.image.side_pure")
IMPLEMENTATION: str = _impl.IMPLEMENTATION
apply_side_stream = _impl.apply_side_stream
# One record from its row, raising the typed error: the twin's step, which the loader uses for a
# record the pass handed back (so it is replayed from its columns, not decoded again).
replay_row = side_pure.replay_row
TABLE_OF_API_KEY: dict[int, str] = side_pure.TABLE_OF_API_KEY

# the decoder's tables the pass reads, in the order it takes them (MetadataColumns' names)
SIDE_TABLES = ("broker_changes", "fence", "broker_registrations", "producer_ids", "features", "client_quotas",
               "acls", "scram", "delegation_tokens")
# what the pass builds with, and the error it hands a record back on (raised before any write)
RULES = (BrokerRegistration, Endpoint, MetadataReplayError)


def side_tables(cols) -> tuple:
    """The decoded region's tables as apply_side_stream takes them."""
    return tuple(getattr(cols, name) for name in SIDE_TABLES)


def apply(delta: MetadataDelta, tables: tuple, api_keys: np.ndarray, kind_rows: np.ndarray, order: np.ndarray,
          start: int) -> int:
    """The side-stream records ``order[start:]`` (int64 record indexes, in log order) applied to
    ``delta`` until the first one the pass does not apply; returns where it stopped in ``order``."""
    return apply_side_stream(delta, tables, RULES, api_keys, kind_rows, order, start)
