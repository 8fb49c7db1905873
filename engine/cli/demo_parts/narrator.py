"""What the demo prints: narration on stdout, progress bars on stderr, and the final table.

Output rules (the tools' rules, engine/cli/tools/common.py): stdout is plain text, never
coloured, flushed line by line so a pipe or a test reading it sees each line as it happens; bars
are drawn only on a terminal and without --quiet. --quiet prints the final table alone.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from kraftlog.engine.cli.tools.progress import ProgressBar

INDENT = "      "  # narration under a step heading
SUMMARY_NAME_WIDTH = 16
SUMMARY_VALUE_WIDTH = 12


@dataclass(frozen=True)
class SummaryRow:
    name: str  # stable: tests and readers look rows up by it
    value: str  # a number with its unit
    detail: str


@dataclass
class Narrator:
    quiet: bool
    progress: bool  # draw bars (a terminal, no --quiet)
    out: object = None
    rows: list[SummaryRow] = field(default_factory=list)

    def _print(self, text: str = "") -> None:
        print(text, file=self.out or sys.stdout, flush=True)

    def intro(self, text: str) -> None:
        if not self.quiet:
            self._print(text)

    def step(self, number: int, total: int, title: str) -> None:
        if not self.quiet:
            self._print()
            self._print(f"[{number}/{total}] {title}")

    def say(self, text: str) -> None:
        if not self.quiet:
            self._print(INDENT + text)

    def block(self, lines: list[str]) -> None:
        if not self.quiet:
            for line in lines:
                self._print(INDENT + "  " + line)

    def table(self, rows: list[list[str]]) -> None:
        """Columns padded to their widest cell, as Kafka's ToolsUtils.prettyPrintTable does."""
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        self.block(["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows])

    def bar(self, description: str, total: int) -> ProgressBar:
        return ProgressBar(self.progress, description, total=max(1, total))

    def record(self, name: str, value: str, detail: str) -> None:
        self.rows.append(SummaryRow(name, value, detail))

    def summary(self, heading: str) -> None:
        """The final table (printed with --quiet too), then ``demo: ok``."""
        if not self.quiet:
            self._print()
        self._print(heading)
        for r in self.rows:
            self._print(f"  {r.name:<{SUMMARY_NAME_WIDTH}}{r.value:>{SUMMARY_VALUE_WIDTH}}   {r.detail}")
        self._print("demo: ok")


def seconds(value_s: float) -> str:
    """'0.84 s', '0.051 s', '12.3 s'."""
    if value_s < 0.1:
        return f"{value_s:.3f} s"
    return f"{value_s:.2f} s" if value_s < 10 else f"{value_s:.1f} s"


def millis(value_s: float) -> str:
    """'0.93 ms', '12.4 ms'; below 0.1 ms in microseconds: '1.8 us'."""
    ms = value_s * 1000
    if ms < 0.1:
        return f"{ms * 1000:.1f} us"
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"


def megabytes(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:,.1f} MB"
