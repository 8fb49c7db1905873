"""Progress bars for long tool work (replaying a log, generating a workload), on stderr.

A bar is drawn only when it is enabled (``common.show_progress``: no --quiet, stderr is a
terminal); otherwise every method is a no-op and rich is not even imported, so piped output and
test runs stay byte-clean. The bar is transient: it disappears when the work ends and the command
prints its own one-line summary.
"""

from __future__ import annotations

import time

REFRESH_PER_S = 8  # rich redraws at most this often; updates in between only store numbers


class ProgressBar:
    """``with ProgressBar(enabled, "replaying", total=n) as bar: bar.update(done, detail)``."""

    def __init__(self, enabled: bool, description: str, *, total: int | None):
        self.enabled = enabled
        self.description = description
        self.total = total
        self.started = time.perf_counter()
        self._progress = None
        self._task = None

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
                console=Console(stderr=True), transient=True, refresh_per_second=REFRESH_PER_S)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.description, total=self.total, detail="")
        return self

    def update(self, completed: int, detail: str = "") -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, detail=detail)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
            self._progress = None

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started


def rate(count: int, elapsed_s: float) -> str:
    """'1,234,567 records/s' (or '-' before anything was timed)."""
    if elapsed_s <= 0:
        return "- records/s"
    return f"{count / elapsed_s:,.0f} records/s"
