"""`kraftlog demo`: the guided tour.

Until the cluster lands (issue: the main job), the tour shows what this build has: which hot
paths run natively, and a round trip through the wire primitives checked against an
independent CRC-32C implementation (the `crc32c` package).
"""

from __future__ import annotations

import argparse
import os


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true", help="print only the final summary")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import crc32c as reference

    from kraftlog import __version__, _accel
    from kraftlog.engine.records import wire

    payload = os.urandom(1 << 20)
    ours, theirs = wire.crc32c(payload), reference.crc32c(payload)
    if ours != theirs:
        raise SystemExit(f"kraftlog demo: CRC-32C mismatch: ours {ours:#010x}, crc32c package {theirs:#010x}")
    if not args.quiet:
        print(f"kraftlog {__version__}")
        for name, status in _accel.load_all_native().items():
            print(f"  {name:<24} {status}")
        print(f"  CRC-32C of 1 MiB: {ours:#010x} (matches the crc32c package; hardware: {wire.crc32c_hardware()})")
        print("The cluster tour (controllers, brokers, failover, replay) arrives with the demo issue.")
    print("demo: ok")
    return 0
