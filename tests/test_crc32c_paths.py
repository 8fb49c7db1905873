"""Proves every CRC-32C path of csrc/crc32c.c (vpclmul / pclmul folding, the sse42 `crc32`
instruction, slicing-by-8 tables) gives the `crc32c` package's result: on every length 0..4096,
at every alignment offset 0..63, on random lengths up to 4 MiB, and when continued across
random split points. The in-process tests go through kraftlog.engine.records.wire (native, or the
pure twin under KRAFTLOG_NO_EXTENSIONS=1); the per-path tests force each path the CPU has with
KRAFTLOG_CRC32C_PATH in a subprocess that loads the native module."""

from __future__ import annotations

import json
import os
import platform
import random
import subprocess
import sys

import crc32c as reference_crc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.engine.records import wire
from kraftlog.engine.records import wire_pure as pure

pytestmark = pytest.mark.twin

MAX_BYTES = 4 << 20          # the largest buffer the random tests draw
MAX_OFFSET = 64              # alignment offsets 0..63: every head the 64-byte-aligned loop can see
EXHAUSTIVE_BYTES = 4096      # every length up to here
# Lengths where a path changes its shape: rounds of 16/128/256 bytes, the 384/256-byte thresholds
# of the folding paths, the 768-byte and 12 KiB rounds of the `crc32` path, and their neighbours.
BOUNDARY_LENGTHS = sorted({b + d for b in (0, 16, 64, 128, 256, 319, 384, 448, 512, 768, 1024, 4096,
                                           3 * 4096, 65536) for d in (-17, -1, 0, 1, 15, 63) if b + d >= 0})

POOL = random.Random(0x5EED).randbytes(MAX_BYTES + MAX_OFFSET)


def _native_paths() -> list[str]:
    """The paths this CPU can run, read from /proc/cpuinfo (not from the code under test)."""
    paths = ["table"]
    if platform.machine() not in ("x86_64", "AMD64"):
        return paths
    flags: set[str] = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if "sse4_2" in flags:
        paths.append("sse42")
        if "pclmulqdq" in flags:
            paths.append("pclmul")
            if {"avx512f", "avx512vl", "avx512bw", "vpclmulqdq"} <= flags:
                paths.append("vpclmul")
    return paths


def test_every_length_up_to_4096_matches_the_package():
    """Each length 0..4096, at offset 0 and at a length-dependent offset, equals the package."""
    view = memoryview(POOL)
    for n in range(EXHAUSTIVE_BYTES + 1):
        for off in (0, (n * 37) % MAX_OFFSET):
            data = view[off:off + n]
            assert wire.crc32c(data) == reference_crc.crc32c(data), (n, off)


def test_every_alignment_offset_matches_the_package():
    """Each offset 0..63 of the buffer start, on every boundary length, equals the package."""
    view = memoryview(POOL)
    for off in range(MAX_OFFSET):
        for n in BOUNDARY_LENGTHS:
            data = view[off:off + n]
            assert wire.crc32c(data) == reference_crc.crc32c(data), (n, off)


def test_continuation_from_a_nonzero_crc_matches_the_package():
    """A running CRC fed in as the start value gives the package's continued CRC on every boundary length."""
    view = memoryview(POOL)
    for n in BOUNDARY_LENGTHS:
        start = reference_crc.crc32c(view[:n % 97 + 1])
        data = view[5:5 + n]
        assert wire.crc32c(data, start) == reference_crc.crc32c(data, start), n


@settings(max_examples=60)
@given(st.integers(0, MAX_BYTES), st.integers(0, MAX_OFFSET - 1), st.integers(0, 2**32 - 1))
def test_random_lengths_up_to_4mib_match_the_package_and_the_twin(n, off, start):
    """Random length, offset and start value: native (or twin) == package == the twin module."""
    data = memoryview(POOL)[off:off + n]
    expected = reference_crc.crc32c(data, start)
    assert wire.crc32c(data, start) == expected
    assert pure.crc32c(data, start) == expected


@settings(max_examples=60)
@given(st.integers(0, 1 << 20), st.integers(0, MAX_OFFSET - 1),
       st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6))
def test_crc_continued_across_random_splits_equals_the_whole(n, off, cut_fractions):
    """Feeding the buffer in pieces cut at random points gives the package's CRC of the whole."""
    data = memoryview(POOL)[off:off + n]
    cuts = sorted({0, n, *(int(f * n) for f in cut_fractions)})
    crc = 0
    for a, b in zip(cuts, cuts[1:], strict=False):
        crc = wire.crc32c(data[a:b], crc)
    assert crc == reference_crc.crc32c(data)


# Run in a subprocess with KRAFTLOG_CRC32C_PATH set: checks the forced path against the package on
# every length 0..4096 (offset varying with the length), every offset on boundary lengths, random
# lengths up to 4 MiB and random splits; prints the path the library reports and the mismatches.
_CHILD = r"""
import ctypes, importlib.util, json, random, sys
import crc32c as reference_crc
from kraftlog.engine.records import wire

max_bytes, max_offset, exhaustive, boundaries, seed = json.loads(sys.argv[1])
lib = ctypes.CDLL(importlib.util.find_spec("kraftlog._wire").origin)
lib.kl_crc32c_path.restype = ctypes.c_char_p
rng = random.Random(seed)
pool = memoryview(rng.randbytes(max_bytes + max_offset))
cases = [(n, (n * 37) % max_offset) for n in range(exhaustive + 1)]
cases += [(n, off) for off in range(max_offset) for n in boundaries]
cases += [(rng.randrange(max_bytes + 1), rng.randrange(max_offset)) for _ in range(24)]
bad = []
for n, off in cases:
    data = pool[off:off + n]
    start = rng.choice((0, rng.getrandbits(32)))
    if wire.crc32c(data, start) != reference_crc.crc32c(data, start):
        bad.append(["whole", n, off])
    cuts = sorted({0, n, *(rng.randrange(n + 1) for _ in range(3))})
    crc = 0
    for a, b in zip(cuts, cuts[1:]):
        crc = wire.crc32c(data[a:b], crc)
    if crc != reference_crc.crc32c(data):
        bad.append(["split", n, off, cuts])
print(json.dumps({"path": lib.kl_crc32c_path().decode(), "implementation": wire.IMPLEMENTATION,
                  "cases": len(cases), "bad": bad[:10]}))
"""


def _run_child(forced: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "KRAFTLOG_NO_EXTENSIONS"}
    env["KRAFTLOG_CRC32C_PATH"] = forced
    args = json.dumps([MAX_BYTES, MAX_OFFSET, EXHAUSTIVE_BYTES, BOUNDARY_LENGTHS, 7])
    out = subprocess.run([sys.executable, "-c", _CHILD, args], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("forced", _native_paths())
def test_each_path_the_cpu_has_matches_the_package(forced):
    """With KRAFTLOG_CRC32C_PATH forcing one path, the native library reports that path and
    every length, offset, start value and split gives the package's CRC."""
    result = _run_child(forced)
    assert result["implementation"] == "native"
    assert result["path"] == forced
    assert result["cases"] > EXHAUSTIVE_BYTES
    assert result["bad"] == []


def test_an_unknown_path_leaves_the_fastest_one():
    """A value that names no path falls back to the automatic choice: the fastest path the CPU has."""
    assert _run_child("no-such-path")["path"] == _native_paths()[-1]


def test_the_hardware_flag_matches_the_cpu():
    """crc32c_hardware() says True exactly when the CPU has SSE4.2 (native) or the package uses hardware (twin)."""
    expected = "sse42" in _native_paths() if wire.IMPLEMENTATION == "native" else bool(reference_crc.hardware_based)
    assert wire.crc32c_hardware() is expected


def test_pool_is_not_degenerate():
    """The shared random pool really varies (a zero pool would hide lane-mixing mistakes)."""
    assert len(set(POOL[:4096])) > 200
