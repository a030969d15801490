"""Concatenated blocks: a flat index into several arrays laid end to end,
and back.

Derivatives are computed over the flattened concatenation of every output
(and every differentiated input); results are handed out per array.  The
same bookkeeping splits a kernel's output buffer into its outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Offsets:
    """Where each block starts in the concatenation of blocks of ``sizes`` entries.

    >>> o = Offsets([2, 3])
    >>> o.locate(3), o.bounds(1), o.total
    ((1, 1), (2, 5), 5)
    """

    def __init__(self, sizes: Sequence[int]):
        self.starts = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))]).astype(np.int64)
        self.total = int(self.starts[-1])

    def __len__(self) -> int:
        return len(self.starts) - 1

    def locate(self, flat: int) -> tuple[int, int]:
        """``(block, offset inside the block)`` of flat index ``flat``."""
        k = int(np.searchsorted(self.starts, flat, side="right")) - 1
        return k, int(flat - self.starts[k])

    def bounds(self, k: int) -> tuple[int, int]:
        """The half-open range ``[start, stop)`` of block ``k``."""
        return int(self.starts[k]), int(self.starts[k + 1])

    def split(self, buf: np.ndarray) -> list[np.ndarray]:
        """Views of ``buf``'s last axis, one per block."""
        return [buf[..., self.starts[k] : self.starts[k + 1]] for k in range(len(self))]
