"""Pure-Python twin of kraftlog._side (csrc/_side.pyx): the side stream of a decoded region in one
pass, in log order, each record applied from its row of the decoded columns; same function, same
arguments, same stops (see the native module's docstring). Chosen in engine/image/side.py.

The rows are read as the generic codec's fields (engine/records/column_fields.py, which the Spark
rows print too) and given to the MetadataDelta replay_* method of their type, the one the generic
replay calls; the native pass builds the same state without the fields dicts.
"""

from __future__ import annotations

from kraftlog.engine.image.image import (
    CONTROLLED_SHUTDOWN_IN,
    CONTROLLED_SHUTDOWN_NONE,
    FENCING_FENCE,
    FENCING_NONE,
    FENCING_UNFENCE,
)
from kraftlog.engine.records import column_fields

IMPLEMENTATION = "pure"

# apiKey -> the decoder's table holding its records (MetadataColumns' names; a table holding a
# record and its removal, or fences and unfences, tells them apart by a column)
TABLE_OF_API_KEY = {17: "broker_changes", 7: "fence", 8: "fence", 0: "broker_registrations", 15: "producer_ids",
                    12: "features", 14: "client_quotas", 18: "acls", 19: "acls", 11: "scram", 22: "scram",
                    10: "delegation_tokens", 26: "delegation_tokens"}
_REPLAY_ERROR = 2  # rules: (BrokerRegistration, Endpoint, MetadataReplayError)
# the decoder's broker_changes.fenced (-1 none, 0 unfence, 1 fence) as Kafka's fencing change enum
_FENCING_OF_COLUMN = {-1: FENCING_NONE, 0: FENCING_UNFENCE, 1: FENCING_FENCE}


def apply_side_stream(delta, tables: tuple, rules: tuple, api_keys, kind_rows, order, start: int) -> int:
    """kraftlog._side.apply_side_stream: ``order[start:]`` applied until the first record not
    applied; returns where that is in ``order``."""
    n = len(order)
    if not 0 <= start <= n:
        raise ValueError(f"start {start} is outside the {n} records")
    if len(tables) != 9 or len(rules) != 3:
        raise ValueError("9 tables and 3 rules")
    if len(api_keys) != len(kind_rows):
        raise ValueError("api_keys and kind_rows go together")
    replay_error = rules[_REPLAY_ERROR]
    by_kind = {table.kind: table for table in tables}
    pos = start
    while pos < n:
        i = int(order[pos])
        if not 0 <= i < len(api_keys):
            break
        table = by_kind.get(TABLE_OF_API_KEY.get(int(api_keys[i])))
        if table is None:
            break
        row = int(kind_rows[i])
        # kind_rows points into ``other`` for a version the columns do not decode: record_index tells
        if not (0 <= row < len(table.record_index) and int(table.record_index[row]) == i
                and not bool(table.extras[row])):
            break
        try:
            replay_row(delta, table, row)
        except replay_error:
            break  # raised before any write: the loader replays it on its own, which reports it
        pos += 1
    return pos


def replay_row(delta, table, row: int) -> None:
    """Row ``row`` of side-stream ``table`` (a whole row: no extras) replayed into ``delta``; a
    record that fails raises MetadataReplayError before writing anything. The twin's step, and the
    loader's replay of a record either pass handed back."""
    _APPLY[table.kind](delta, table, row)


def _broker_change(delta, bc, row: int) -> None:
    in_shutdown = CONTROLLED_SHUTDOWN_IN if int(bc.in_controlled_shutdown[row]) == 1 else CONTROLLED_SHUTDOWN_NONE
    delta.replay_broker_change(int(bc.broker_id[row]), int(bc.broker_epoch[row]),
                               _FENCING_OF_COLUMN[int(bc.fenced[row])], in_shutdown)


def _fence(delta, e, row: int) -> None:
    delta.replay_fence(int(e.broker_id[row]), int(e.broker_epoch[row]), bool(e.fenced[row]))


def _register_broker(delta, r, row: int) -> None:
    delta.replay_register_broker(column_fields.register_broker(r, row)[1])


def _producer_ids(delta, pi, row: int) -> None:
    delta.replay_producer_ids(int(pi.next_producer_id[row]), int(pi.broker_id[row]), int(pi.broker_epoch[row]))


def _feature_level(delta, f, row: int) -> None:
    delta.replay_feature_level(column_fields.text(f.feature_blob, f.name_offsets, row), int(f.feature_level[row]))


def _client_quota(delta, q, row: int) -> None:
    _, fields = column_fields.client_quota(q, row)
    delta.replay_client_quota([(e["EntityType"], e["EntityName"]) for e in fields["Entity"]], fields["Key"],
                              fields["Value"], fields["Remove"])


# the tables holding a record and its removal (``removed``): the row's fields (column_fields), the
# MetadataDelta method replaying the record, the one replaying its removal and the fields it takes
_REMOVABLE = {"acls": (column_fields.acl, "replay_acl", "replay_remove_acl", ("Id",)),
              "scram": (column_fields.scram, "replay_scram", "replay_remove_scram", ("Name", "Mechanism")),
              "delegation_tokens": (column_fields.token, "replay_token", "replay_remove_token", ("TokenId",))}


def _removable(delta, t, row: int) -> None:
    """An ACL, SCRAM credential or delegation token, or (removed) its removal."""
    fields_of, replay, remove, key = _REMOVABLE[t.kind]
    _, fields = fields_of(t, row)
    if bool(t.removed[row]):
        getattr(delta, remove)(*(fields[name] for name in key))
    else:
        getattr(delta, replay)(fields)


_APPLY = {"broker_changes": _broker_change, "fence": _fence, "broker_registrations": _register_broker,
          "producer_ids": _producer_ids, "features": _feature_level, "client_quotas": _client_quota, "acls": _removable,
          "scram": _removable, "delegation_tokens": _removable}
