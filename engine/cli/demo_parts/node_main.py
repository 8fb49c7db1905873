"""A node process started by the demo: ``python -m ...node_main <demo pid> node run <args>`` (the
`kraftlog` CLI's arguments after the pid).

The node dies with the demo even when the demo itself is SIGKILLed (where no handler of ours
runs): PR_SET_PDEATHSIG asks Linux to send SIGKILL to this process when its parent goes. The
parent pid is passed in and checked after the call, because the parent may already have died
before the request was made. Elsewhere (no prctl) the demo's own cleanup is what stops the node.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:
        sys.exit(f"node: the demo (pid {parent_pid}) is gone; not starting")


def main(argv: list[str]) -> int:
    if not argv or not argv[0].isdigit():
        sys.exit("usage: python -m kraftlog.engine.cli.demo_parts.node_main <demo pid> <kraftlog arguments>")
    _die_with_parent(int(argv[0]))
    from kraftlog.engine.cli import main as cli

    return cli.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
