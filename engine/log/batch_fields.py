"""The per-batch fields ``check_batches`` describes an append with, read as a run.

check_batches (engine/log/index.py) writes CHECK_FIELDS int64 per batch into the log's scratch
array: position, size, base offset, last offset delta, max timestamp, partition leader epoch.
An append then needs three facts of the run (does it continue the log, its max timestamp, where
new epochs start) and the segment needs its sparse index entries. A follower catching up appends
runs of 4,096 small batches, where a Python loop over the fields cost ~1 us a batch (~80% of a
catch-up's time); numpy does a run in tens of microseconds. A leader's or a caught-up follower's
append is one batch, where numpy's fixed cost (~15 us) is the larger: runs of up to
SMALL_RUN_BATCHES take the loop. Both paths give the same answers (tests/test_batch_fields.py).
The index entries of a longer run are written by the native index_run (Segment.commit_batches),
tested equal to index_entries here (tests/test_log_index.py).
"""

from __future__ import annotations

from kraftlog.engine.log.errors import InvalidAppendError
from kraftlog.engine.log.index import CHECK_FIELDS
from kraftlog.engine.records.layout import SMALL_RUN_BATCHES

_POSITION, _SIZE, _BASE, _DELTA, _TIMESTAMP, _EPOCH = range(CHECK_FIELDS)


def continue_log(fields, n: int, position: int, expected: int, latest_epoch: int | None):
    """Check that batches 0..n-1 continue the log at ``expected``, and move their positions by
    ``position`` (where the run will sit in the segment), in place. Returns (last offset, max
    timestamp (-1 if none), [(epoch, start offset)] for each epoch above ``latest_epoch`` and the
    epochs before it in the run). Raises InvalidAppendError naming the first batch that does
    not continue the one before."""
    run = _continue_loop if n <= SMALL_RUN_BATCHES else _continue_vectorised
    return run(fields, n, position, expected, -1 if latest_epoch is None else latest_epoch)


def _discontinuous(i: int, base: int, expected: int) -> InvalidAppendError:
    return InvalidAppendError(f"batch {i} starts at offset {base}, expected {expected} "
                              f"(appends must continue the log end offset)")


def _continue_loop(fields, n: int, position: int, expected: int, latest: int):
    max_ts, epochs = -1, []
    for i in range(n):
        k = i * CHECK_FIELDS
        fields[k + _POSITION] += position
        base = fields[k + _BASE]
        if base != expected:
            raise _discontinuous(i, base, expected)
        max_ts = max(max_ts, fields[k + _TIMESTAMP])
        epoch = fields[k + _EPOCH]
        if epoch >= 0 and epoch > latest:
            epochs.append((epoch, base))
            latest = epoch
        expected = base + fields[k + _DELTA] + 1
    return expected - 1, max_ts, epochs


def _continue_vectorised(fields, n: int, position: int, expected: int, latest: int):
    import numpy as np

    f = np.frombuffer(fields, np.int64, n * CHECK_FIELDS).reshape(n, CHECK_FIELDS)
    bases = f[:, _BASE]
    ends = bases + f[:, _DELTA] + 1
    starts = np.concatenate(([expected], ends[:-1]))  # where each batch must start
    wrong = np.flatnonzero(bases != starts)
    if wrong.size:
        i = int(wrong[0])
        raise _discontinuous(i, int(bases[i]), int(starts[i]))
    f[:, _POSITION] += position
    epochs = f[:, _EPOCH]
    before = np.maximum.accumulate(np.concatenate(([latest], epochs[:-1])))  # the latest epoch before each
    new = np.flatnonzero((epochs >= 0) & (epochs > before))
    max_ts = max(-1, int(f[:, _TIMESTAMP].max()))
    return int(ends[-1]) - 1, max_ts, [(int(epochs[i]), int(bases[i])) for i in new.tolist()]


def index_entries(fields, n: int, interval_bytes: int, since_bytes: int, max_ts: int, max_ts_offset: int):
    """Kafka's sparse index rule over batches 0..n-1 (positions already in the segment; a short run:
    longer ones take the native index_run): a batch gets an offset index entry (its last offset
    -> its position) and a time index candidate (the max timestamp so far and the first offset
    that reached it) when more than ``interval_bytes`` were written since the last entry. Returns
    ([(last offset, position, max timestamp, its offset)], bytes since the last entry, max
    timestamp, its offset)."""
    return _entries_loop(fields, n, interval_bytes, since_bytes, max_ts, max_ts_offset)


def _entries_loop(fields, n: int, interval: int, since: int, max_ts: int, max_ts_offset: int):
    entries = []
    for k in range(0, n * CHECK_FIELDS, CHECK_FIELDS):
        last, ts = fields[k + _BASE] + fields[k + _DELTA], fields[k + _TIMESTAMP]
        if ts > max_ts:
            max_ts, max_ts_offset = ts, last
        if since > interval:
            entries.append((last, fields[k + _POSITION], max_ts, max_ts_offset))
            since = 0
        since += fields[k + _SIZE]
    return entries, since, max_ts, max_ts_offset
