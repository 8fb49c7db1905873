"""Proves the leader-epoch cache follows Kafka's LeaderEpochFileCache rules (assign, truncation,
OffsetsForLeaderEpoch end offsets) against a brute-force model, and persists exactly Kafka's
leader-epoch-checkpoint text format, atomically."""

from __future__ import annotations

import errno

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlog.engine.log.epoch_cache import CHECKPOINT_NAME, LeaderEpochCache
from kraftlog.engine.log.errors import LogCorruptionError
from kraftlog.engine.log.fs import FaultFileSystem, RealFileSystem


def model_end_offset(entries, requested, log_end):
    """OffsetsForLeaderEpoch by brute force over (epoch, start) entries."""
    if requested == -1 or not entries:
        return (-1, -1)
    if requested == entries[-1][0]:
        return (requested, log_end)
    higher = [e for e in entries if e[0] > requested]
    if not higher:
        return (-1, -1)
    lower = [e for e in entries if e[0] <= requested]
    return (lower[-1][0] if lower else requested, higher[0][1])


def test_checkpoint_text_format(tmp_path):
    """The file is '0', the count, then 'epoch startOffset' lines (Kafka's CheckpointFile v0)."""
    cache = LeaderEpochCache(RealFileSystem(), str(tmp_path))
    cache.assign(1, 0)
    cache.assign(3, 57)
    assert (tmp_path / CHECKPOINT_NAME).read_text() == "0\n2\n1 0\n3 57\n"
    assert LeaderEpochCache(RealFileSystem(), str(tmp_path)).entries() == [(1, 0), (3, 57)]
    assert not (tmp_path / (CHECKPOINT_NAME + ".tmp")).exists()


def test_assign_replaces_conflicting_entries(tmp_path):
    cache = LeaderEpochCache(RealFileSystem(), str(tmp_path))
    assert cache.assign(2, 10)
    assert not cache.assign(2, 15)  # same epoch, later offset: nothing new
    assert cache.assign(3, 10)  # epoch 2 never wrote a record: replaced
    assert cache.entries() == [(3, 10)]
    cache.assign(4, 20)
    cache.assign(5, 15)  # a start before epoch 4's: epoch 4 is no longer true
    assert cache.entries() == [(3, 10), (5, 15)]


def test_end_offset_for_known_cases(tmp_path):
    cache = LeaderEpochCache(RealFileSystem(), str(tmp_path))
    assert cache.end_offset_for(1, 100) == (-1, -1)
    for epoch, start in [(2, 5), (4, 30), (7, 60)]:
        cache.assign(epoch, start)
    assert cache.end_offset_for(7, 99) == (7, 99)  # latest epoch: the log end
    assert cache.end_offset_for(4, 99) == (4, 60)
    assert cache.end_offset_for(5, 99) == (4, 60)  # unknown epoch 5: the largest below it
    assert cache.end_offset_for(1, 99) == (1, 5)  # below every known epoch: first start offset
    assert cache.end_offset_for(8, 99) == (-1, -1)
    assert cache.end_offset_for(-1, 99) == (-1, -1)


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 200)), max_size=25), st.integers(-1, 22),
       st.integers(0, 250))
def test_matches_the_model(tmp_path_factory, assigns, requested, cut):
    """After any assign sequence the entries stay strictly increasing and answers match the model."""
    cache = LeaderEpochCache(RealFileSystem(), str(tmp_path_factory.mktemp("ec")))
    model: list[tuple[int, int]] = []
    for epoch, start in assigns:
        cache.assign(epoch, start)
        if model and model[-1][0] == epoch and model[-1][1] <= start:
            continue
        model = [e for e in model if e[0] < epoch and e[1] < start] + [(epoch, start)]
    assert cache.entries() == model
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(model, model[1:], strict=False))
    assert cache.end_offset_for(requested, 300) == model_end_offset(model, requested, 300)
    cache.truncate_from_end(cut)
    model = [e for e in model if e[1] < cut]
    assert cache.entries() == model
    assert LeaderEpochCache(RealFileSystem(), cache.path.rsplit("/", 1)[0]).entries() == model


def test_truncate_from_start_moves_the_first_entry(tmp_path):
    cache = LeaderEpochCache(RealFileSystem(), str(tmp_path))
    for epoch, start in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, start)
    cache.truncate_from_start(15)
    assert cache.entries() == [(2, 15), (3, 20)]
    assert cache.epoch_for_offset(16) == 2 and cache.epoch_for_offset(25) == 3 and cache.epoch_for_offset(3) is None


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\n1 0\n", "0\n1\nx y\n", "0\n2\n3 5\n2 9\n"])
def test_corrupt_checkpoint_names_file_and_line(tmp_path, text):
    (tmp_path / CHECKPOINT_NAME).write_text(text)
    with pytest.raises(LogCorruptionError, match=CHECKPOINT_NAME) as err:
        LeaderEpochCache(RealFileSystem(), str(tmp_path))
    assert err.value.path.endswith(CHECKPOINT_NAME)


def test_failed_rename_keeps_the_old_checkpoint(tmp_path):
    """A crash-equivalent failure during the atomic write leaves the previous file intact."""
    fs = FaultFileSystem()
    cache = LeaderEpochCache(fs, str(tmp_path))
    cache.assign(1, 0)
    fs.fail("rename", errno=errno.EIO)
    with pytest.raises(OSError):
        cache.assign(2, 10)
    assert (tmp_path / CHECKPOINT_NAME).read_text() == "0\n1\n1 0\n"
