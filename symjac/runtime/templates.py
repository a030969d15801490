"""Output layouts: how a kernel's flat outputs become what a transform returns.

A transform returns an array, a ``scipy.sparse`` matrix (``sparse=True``),
or tuples of those.  The *template* of a result records that structure as
plain data: ``None`` for an array, a :class:`SparseLayout` for a sparse
block, tuples of templates; :func:`fill` puts computed outputs into it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..diff.products import SymSparse
from ..trace.symarray import SymArray

#: indices fit in int32 below this many nonzeros (what SciPy itself chooses)
_INT32_NNZ = 2**31
#: the attributes a freshly constructed SciPy csr/csc matrix holds (SciPy 1.10-1.17); a matrix
#: with exactly these is cloned from a checked prototype instead of constructed (see wrap)
_MATRIX_ATTRIBUTES = frozenset({"_shape", "maxprint", "data", "indices", "indptr"})


@dataclass(frozen=True, eq=False)
class SparseLayout:
    """Turns a kernel's vector of nonzeros into a ``scipy.sparse`` matrix."""

    format: str  # "csr" or "csc"
    shape: tuple[int, int]
    indices: np.ndarray
    indptr: np.ndarray
    #: per data dtype, a matrix built by SciPy's constructor (never handed out), or None where
    #: cloning does not apply
    _prototypes: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, block: SymSparse) -> SparseLayout:
        """The layout of a symbolic sparse block's nonzeros."""
        csr = block.format == "csr"
        major, minor = (block.rows, block.cols) if csr else (block.cols, block.rows)
        n_major = block.shape2d[0] if csr else block.shape2d[1]
        index = np.int32 if block.size < _INT32_NNZ else np.int64
        # (the count of each row's entries by np.bincount: np.add.at took 40 ms for the 1.2 million
        # entries of a bundle adjustment's Jacobian, a tenth of its first call)
        indptr = np.zeros(n_major + 1, dtype=index)
        np.cumsum(np.bincount(np.asarray(major, dtype=np.intp), minlength=n_major), out=indptr[1:])
        return cls(block.format, block.shape2d, minor.astype(index), indptr)

    def wrap(self, data: np.ndarray):
        """A new matrix holding ``data`` (not copied) and copies of the pattern.

        SciPy's constructor checks the pattern on every call (~11 µs for a
        1,000-row tridiagonal matrix, a third of the whole call).  The pattern
        is fixed, so it is checked once, on a prototype, and each result is a
        copy of the prototype's attributes with its own arrays (~1.5 µs).
        """
        proto = self._prototypes.get(data.dtype, False)
        if proto is False:
            proto = self._prototypes[data.dtype] = self._prototype(data)
        if proto is None or type(data) is not np.ndarray or data.shape != proto.data.shape:
            return self._construct(data)
        matrix = object.__new__(type(proto))
        matrix.__dict__.update(proto.__dict__)
        matrix.data, matrix.indices, matrix.indptr = data, self.indices.copy(), self.indptr.copy()
        return matrix

    def _construct(self, data: np.ndarray):
        import scipy.sparse as sps

        cls = sps.csr_matrix if self.format == "csr" else sps.csc_matrix
        return cls((data, self.indices.copy(), self.indptr.copy()), shape=self.shape, copy=False)

    def _prototype(self, data: np.ndarray):
        proto = self._construct(np.zeros_like(data))
        same = (set(vars(proto)) == _MATRIX_ATTRIBUTES and proto.data.dtype == data.dtype
                and proto.indices.dtype == self.indices.dtype and proto.indptr.dtype == self.indptr.dtype)
        return proto if same else None

    def pattern(self):
        """The nonzero pattern, as a boolean sparse matrix."""
        return self.wrap(np.ones(self.indices.shape[0], dtype=bool))


def template_of(result):
    """The structure of a symbolic result (see the module docstring)."""
    if isinstance(result, SymArray):
        return None
    if isinstance(result, SymSparse):
        return SparseLayout.of(result)
    return tuple(template_of(r) for r in result)


def fill(template, outputs: Iterator):
    """The result with ``template``'s structure, from the outputs in order."""
    if template is None:
        return next(outputs)
    if isinstance(template, SparseLayout):
        return template.wrap(next(outputs))
    return tuple(fill(t, outputs) for t in template)


def patterns(template):
    """The nonzero patterns of a template's sparse blocks, nested like it."""
    if isinstance(template, SparseLayout):
        return template.pattern()
    return tuple(patterns(t) for t in template)
