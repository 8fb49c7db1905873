"""Proves the durable replace helpers: the new bytes land whole under the final name, no temp file
is left behind, and a failed write leaves the old file untouched."""

from __future__ import annotations

import os

import pytest

from kraftlog import durable


def test_write_atomically_replaces_the_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "quorum-state"
    path.write_bytes(b"old")
    durable.write_atomically(path, b"new contents" * 1000)
    assert path.read_bytes() == b"new contents" * 1000
    assert os.listdir(tmp_path) == ["quorum-state"]


def test_a_write_that_fails_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "meta.properties"
    path.write_bytes(b"old")

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable.os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        durable.write_atomically(path, b"new")
    assert path.read_bytes() == b"old"


def test_replace_durably_moves_a_written_file_over_the_final_name(tmp_path):
    part, final = tmp_path / "x.checkpoint.part", tmp_path / "x.checkpoint"
    part.write_bytes(b"snapshot")
    durable.replace_durably(part, final)
    assert final.read_bytes() == b"snapshot" and not part.exists()
