"""Proves the code in the docs runs: the ```python blocks of README.md and of each docs/*.md execute
in order, one namespace per document, as written (paths under /tmp/ go to a temporary dir)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", [d for d in DOCS if BLOCK.search(d.read_text())], ids=lambda d: d.name)
def test_doc_examples_run(doc, tmp_path):
    namespace = {"__name__": "__doc_example__"}
    for code in BLOCK.findall(doc.read_text()):
        code = code.replace('"/tmp/', f'"{tmp_path}/')
        exec(compile(code, f"<{doc.name} example>", "exec"), namespace)
