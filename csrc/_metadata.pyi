from collections.abc import Buffer
from typing import Any

import numpy as np

IMPLEMENTATION: str
LIST_MAX_WIDTH: int

def walk_batches(buf: Buffer, start: int = 0, end: int | None = None, verify_crc: bool = True,
                 path: str | None = None) -> np.ndarray: ...
def sections_of(batches: np.ndarray) -> tuple[np.ndarray, int]: ...
def decode_sections(data: Buffer, sections: np.ndarray, path: str | None = None) -> dict[str, Any]: ...
