import numpy as np

IMPLEMENTATION: str

def apply_side_stream(delta: object, tables: tuple, rules: tuple, api_keys: np.ndarray, kind_rows: np.ndarray,
                      order: np.ndarray, start: int) -> int: ...
