"""The primitive table: one row per NumPy operation symjac can trace.

A row says how a NumPy callable builds nodes: its name, the callables, its
kind (the docs' section), the build function and a docs line.  Callables that
trace straight to one node type are bound by that type's record
(``ir/ops.py``: its ``numpy`` field) and get their rows from it; the rows
written here are *composite*: built from node builders (``deg2rad = a * (pi / 180)``,
``var``, ``clip``, reductions, contractions, structure).  Derivatives are the
records' business, never a row's.

Adding an operation means adding a row (or a record).  ``tests/test_primitives.py``
fails if a row has no test case, and ``supported_operations()`` lists the rows
for the docs.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import sympy as sp

from .._errors import UnsupportedOperationError
from ..ir import graph as g
from ..ir import ops as _ops
from . import arrayops as ops
from . import (
    assembly,
    indexing,  # noqa: F401 (x[np.argmax(x)]: registers how traced positions index)
    logic,
    norms,
    order,
    signal,
)
from . import composites as cmp
from . import library as lib
from .arrayops import (
    elementwise,
    float_dtype,
    result_dtype,
    truth,
    ufunc_builder,
)
from .symarray import (
    ARRAY_TIER_ONLY,
    FUNCTIONS,
    LATE_UFUNCS,
    LIBRARY_FUNCTIONS,
    PRIMITIVES,
    UFUNC_METHODS,
    UFUNCS,
    SymArray,
    add_ufunc_methods,
    as_elems,
    from_object_array,
)


@dataclass(frozen=True)
class SciPyUfunc:
    """A SciPy ufunc symjac traces, named without importing SciPy: NumPy hands it
    to ``__array_ufunc__``, where it is bound to its row the first time it is seen."""

    name: str

    @property
    def __name__(self) -> str:
        return self.name

    def resolve(self):
        special = sys.modules.get("scipy.special")
        return getattr(special, self.name, None) if special is not None else None


@dataclass(frozen=True)
class SciPyFunction:
    """A SciPy Python function symjac traces (``scipy.signal.convolve``), named without
    importing SciPy: traced code sees the row's build in its place (``substitutes.py``)."""

    module: str
    name: str

    @property
    def __name__(self) -> str:
        return self.name

    def resolve(self):
        module = sys.modules.get(self.module)
        return getattr(module, self.name, None) if module is not None else None


@dataclass(frozen=True)
class UfuncMethod:
    """A method of a NumPy ufunc (``np.maximum.accumulate``): NumPy hands it to
    ``__array_ufunc__`` with the method's name."""

    ufunc: np.ufunc
    method: str

    @property
    def __name__(self) -> str:
        return f"{self.ufunc.__name__}.{self.method}"


@dataclass(frozen=True)
class Primitive:
    """One traceable NumPy operation."""

    name: str
    numpy: tuple
    kind: str
    build: Callable
    doc: str


# ----- scalar node builders ---------------------------------------------------------



def _max(a, b):
    return _ops.BY_HEAD[sp.Max].node(a, b)  # the record folds constants as NumPy (NaN wins)


def _min(a, b):
    return _ops.BY_HEAD[sp.Min].node(a, b)


def _where(c, a, b):
    return g.select([(a, truth(c)), (b, g.TRUE)])


def _float_result(*dtypes):
    return float_dtype(result_dtype(np.add, *dtypes))


def _logical(head):
    def build(*operands, **kwargs):
        return elementwise(lambda *a: g.logical(head, *(truth(x) for x in a)), operands, np.dtype(bool))

    return build


def _bitwise_as_logical(name, head):
    def build(*operands, **kwargs):
        dtypes = [as_elems(o)[1] for o in operands]
        if any(np.dtype(d) != np.dtype(bool) for d in dtypes if d is not bool):
            raise UnsupportedOperationError(
                f"np.{name} on non-boolean traced values: bitwise integer arithmetic is "
                "not traceable. For masks combine comparisons: (x > 0) & (x < 1)."
            )
        return _logical(head)(*operands)

    return build


# ----- array-level builders -----------------------------------------------------------


def _reduction(combine, mean=False, initial_ok=False):
    def build(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        ops._reject_kwargs("reduction", {"out": out, **kwargs})
        x = from_object_array(a)
        if mean:
            rdt = float_dtype(x.dtype)
        elif x.dtype == np.dtype(bool):
            rdt = np.dtype(np.int64)
        else:
            rdt = x.dtype
        rdt = np.dtype(dtype) if dtype is not None else rdt
        if mean:
            def combine_(items):
                return g.exact_div(g.add(*items), sp.Integer(len(items)))
        else:
            combine_ = combine
        return ops.reduce(x, axis, keepdims, combine_, rdt)

    return build


def _running(step, default_axis):
    """np.cumsum/np.cumprod (the flattened array by default) and the ufuncs' accumulate (axis
    0): booleans accumulate as int64 and ``dtype=`` converts first, as NumPy's."""

    def build(a, axis=default_axis, dtype=None, out=None):
        ops._reject_kwargs("running sum/product", {"out": out})
        x = from_object_array(a)
        rdt = np.dtype(dtype) if dtype is not None else np.dtype(np.int64) if x.dtype == bool else x.dtype
        if rdt.kind == "f" and rdt != x.dtype:
            x = x.astype(rdt)
        y = ops.scan(x, axis, step)
        return y if y.dtype == rdt else SymArray(y.elems, rdt)  # (booleans add up as integers, as np.sum's)

    return build


def _extremum(pair):
    def build(a, axis=None, out=None, keepdims=False, **kwargs):
        ops._reject_kwargs("max/min", {"out": out, **kwargs})
        x = from_object_array(a)
        return ops.reduce(x, axis, keepdims, lambda items: ops.pairwise(pair, items), x.dtype)

    return build


def _moment(root: bool):
    """np.var / np.std as NumPy computes them: the mean (sum / n), the squared
    deviations ``d * d``, their sum / (n - ddof); std is its square root.
    With ddof >= n the sum is multiplied by inf (NumPy's x / 0: inf, or NaN for 0)."""

    def build(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
              correction=None):
        ops._reject_kwargs("var/std", {"out": out, "where": where, "mean": mean})
        if correction is not None:
            if ddof != 0:
                raise ValueError("ddof and correction can't be provided simultaneously.")
            ddof = correction
        x = from_object_array(a)
        rdt = np.dtype(dtype) if dtype is not None else float_dtype(x.dtype)

        def combine(items):
            n = sp.Integer(len(items))
            m = g.exact_div(g.add(*items), n)
            squares = [g.exact_mul(d, d) for d in (g.sub(v, m) for v in items)]
            count = max(len(items) - ddof, 0)
            total = g.add(*squares)
            var = g.exact_div(total, g.const(count)) if count else g.exact_mul(total, sp.oo)
            return g.pow_(var, g.HALF) if root else var

        return ops.reduce(x, axis, keepdims, combine, rdt)

    return build


def _where_build(condition, x=None, y=None):
    if x is None or y is None:
        raise UnsupportedOperationError(
            "np.where(condition) with one argument returns indices, whose number depends "
            "on the traced values. Use the three-argument form np.where(cond, a, b)."
        )
    if not isinstance(condition, SymArray) and not (
        isinstance(condition, np.ndarray) and condition.dtype == object
    ):
        # a concrete mask: choose elements while tracing, no branch in the kernel
        xs, ys = from_object_array(x), from_object_array(y)
        dtype = np.result_type(xs.dtype, ys.dtype)
        return SymArray(np.asarray(np.where(np.asarray(condition), xs.elems, ys.elems), dtype=object), dtype)
    dtypes = [as_elems(v)[1] for v in (x, y)]
    return elementwise(_where, (condition, x, y), result_dtype(np.add, *dtypes))


def _clip_build(a, a_min=None, a_max=None, out=None, **kwargs):
    ops._reject_kwargs("clip", {"out": out})
    lo, hi = kwargs.pop("min", a_min), kwargs.pop("max", a_max)
    dtype = result_dtype(np.clip, *(as_elems(v)[1] for v in (a, lo, hi) if v is not None))
    x = from_object_array(a)
    if lo is not None:
        x = elementwise(_max, (x, lo), dtype)
    if hi is not None:
        x = elementwise(_min, (x, hi), dtype)
    return SymArray(x.elems, dtype)


def _select_build(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ValueError("np.select: list of cases must be same length as list of conditions")
    operands = [*condlist, *choicelist, default]
    n = len(condlist)
    dtype = result_dtype(np.select, *(as_elems(c)[1] for c in [*choicelist, default]))

    def pick(*items):
        conds, values, dflt = items[:n], items[n : 2 * n], items[-1]
        return g.select([*((v, truth(c)) for c, v in zip(conds, values, strict=True)), (dflt, g.TRUE)])

    return elementwise(pick, operands, dtype)


def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    A, B = from_object_array(a), from_object_array(b)
    if A.shape[-1] != 3 or B.shape[-1] != 3 or axis is not None or (axisa, axisb, axisc) != (-1, -1, -1):
        raise UnsupportedOperationError("np.cross: symjac traces 3-vectors along the last axis")
    dtype = result_dtype(np.multiply, A.dtype, B.dtype)
    parts = []
    for i, j in ((1, 2), (2, 0), (0, 1)):
        parts.append(
            elementwise(lambda p, q, r, s: g.sub(g.exact_mul(p, s), g.exact_mul(q, r)),
                        (A[..., i], A[..., j], B[..., i], B[..., j]), dtype).elems
        )
    return SymArray(np.stack(parts, axis=-1), dtype)


def _diagonal(a, offset=0, axis1=0, axis2=1):
    x = from_object_array(a)
    return SymArray(np.diagonal(x.elems, offset, axis1, axis2).copy(), x.dtype)


def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    d = _diagonal(a, offset, axis1, axis2)
    return ops.reduce(d, -1, False, lambda items: g.add(*items), d.dtype)


def _diag(v, k=0):
    x = from_object_array(v)
    if x.ndim == 2:
        return _diagonal(x, k)
    if x.ndim != 1:
        raise ValueError("np.diag: input must be 1-d or 2-d")
    n = x.shape[0] + abs(k)
    out = np.full((n, n), g.ZERO, dtype=object)
    for i in range(x.shape[0]):
        out[(i, i + k) if k >= 0 else (i - k, i)] = x.elems[i]
    return SymArray(out, x.dtype)


def _dot_build(a, b, out=None):
    ops._reject_kwargs("dot", {"out": out})
    return ops.dot(a, b)


def _matmul_build(a, b, **kwargs):
    ops._reject_kwargs("matmul", kwargs, allowed=("dtype", "casting", "order", "subok"))
    return ops.matmul(a, b)


def _outer(a, b, out=None):
    A, B = from_object_array(a), from_object_array(b)
    return ops.tensordot(A.reshape(-1), B.reshape(-1), [], [])


def _inner(a, b):
    return ops.tensordot(a, b, [-1], [-1])


def _vdot(a, b):
    return ops.tensordot(from_object_array(a).reshape(-1), from_object_array(b).reshape(-1), [0], [0])


def _tensordot(a, b, axes=2):
    ea = as_elems(a)[0]
    as_elems(b)  # validates b (before the axes), as before
    if isinstance(axes, int):
        axes_a = list(range(ea.ndim - axes, ea.ndim))
        axes_b = list(range(axes))
    else:
        axes_a, axes_b = axes
        axes_a = [axes_a] if isinstance(axes_a, int) else list(axes_a)
        axes_b = [axes_b] if isinstance(axes_b, int) else list(axes_b)
    return ops.tensordot(a, b, axes_a, axes_b)


def _einsum(subscripts, *operands, out=None, optimize=False, **kwargs):
    ops._reject_kwargs("einsum", {"out": out, **kwargs}, allowed=("dtype", "order", "casting"))
    return ops.einsum(subscripts, *operands)


def _query(fn):
    def build(a, *args, **kwargs):
        return fn(np.empty(a.shape, dtype=object) if isinstance(a, SymArray) else a, *args, **kwargs)

    return build


def _special(name: str, node: Callable) -> Callable:
    """The build function of a SciPy ufunc's row (also used for ``math.erf`` and the
    like, with or without SciPy)."""

    def build(*operands, **kwargs):
        ops._reject_kwargs(f"scipy.special.{name}", kwargs, allowed=("dtype", "casting", "order", "subok"))
        dtypes = tuple(as_elems(o)[1] for o in operands)
        ufunc = SciPyUfunc(name).resolve()
        if ufunc is not None:
            dtype = result_dtype(ufunc, *dtypes)
        else:  # math.erf and the like without SciPy: a float of the operands' type
            dtype = float_dtype(result_dtype(np.add if len(dtypes) == 2 else np.positive, *dtypes))
        return elementwise(node, operands, dtype)

    return build


def _scipy(name: str, record: str, doc: str, *aliases: str) -> Primitive:
    return Primitive(name, tuple(SciPyUfunc(n) for n in (name, *aliases)), "special",
                     _special(name, _ops.BY_NAME[record].node), doc)


# ----- the table ----------------------------------------------------------------------


def _ufunc(name, ufunc, fn, doc, out_dtype=None):
    return Primitive(name, (ufunc,), "elementwise", ufunc_builder(ufunc, fn, out_dtype), doc)


def _func(name, funcs, build, doc, kind="structural"):
    return Primitive(name, tuple(funcs), kind, build, doc)


def _record_rows() -> list[Primitive]:
    """A row per NumPy callable that traces straight to a node type (its record's ``numpy``)."""
    return [Primitive(fn.__name__, (fn,), op.kind, ufunc_builder(fn, op.node), op.doc)
            for op in _ops.RECORDS for fn in op.numpy]


_DEG = sp.Float(math.pi / 180)
_RAD = sp.Float(180 / math.pi)

TABLE: list[Primitive] = [
    *_record_rows(),
    # ----- arithmetic (composites of the records) ---------------------------------------------
    _ufunc("subtract", np.subtract, g.sub, "a - b"),
    _ufunc("divide", np.true_divide, g.exact_div, "a / b", out_dtype=_float_result),
    _ufunc("negative", np.negative, g.neg, "-a"),
    _ufunc("positive", np.positive, lambda a: a, "+a"),
    _ufunc("float_power", np.float_power, g.pow_, "a ** b in float64"),
    _ufunc("square", np.square, lambda a: g.pow_(a, sp.Integer(2)), "a ** 2"),
    _ufunc("reciprocal", np.reciprocal, lambda a: g.exact_div(g.ONE, a), "1 / a"),
    _ufunc("sqrt", np.sqrt, lambda a: g.pow_(a, g.HALF), "square root (a ** 1/2)"),
    Primitive("deg2rad", (np.deg2rad, np.radians), "elementwise", ufunc_builder(np.deg2rad, lambda a: g.exact_mul(a, _DEG)), "degrees to radians"),
    Primitive("rad2deg", (np.rad2deg, np.degrees), "elementwise", ufunc_builder(np.rad2deg, lambda a: g.exact_mul(a, _RAD)), "radians to degrees"),
    Primitive("sinc", (np.sinc,), "elementwise", cmp.sinc, "sin(pi a) / (pi a), NumPy's algorithm (its derivative is a Taylor polynomial near 0)"),
    # ----- rounding and remainders (composites of the rint, fmod and copysign records) -----------
    Primitive("round", (np.round, np.around), "elementwise", cmp.round_, "round half to even to decimals= places (rint(a * 10**d) / 10**d, as NumPy); derivative 0"),
    Primitive("divmod", (np.divmod,), "elementwise", cmp.divmod_, "(a // b, a % b)"),
    # ----- piecewise -----------------------------------------------------------------------
    Primitive("fmax", (np.fmax,), "piecewise", logic.fmax, "maximum that ignores a NaN operand (NaN only if both are); derivative follows the branch taken"),
    Primitive("fmin", (np.fmin,), "piecewise", logic.fmin, "minimum that ignores a NaN operand (NaN only if both are)"),
    Primitive("nan_to_num", (np.nan_to_num,), "piecewise", logic.nan_to_num, "NaN -> nan=, inf -> posinf= (largest float), -inf -> neginf="),
    Primitive("piecewise", (np.piecewise,), "piecewise", logic.piecewise, "np.piecewise: every function evaluated, the last true condition chooses (default: one more function, else 0)"),
    Primitive("signbit", (np.signbit,), "comparison", logic.signbit, "the sign bit (true for -0.0); derivative 0"),
    Primitive("real", (np.real,), "elementwise", logic.real, "real part of a real array (itself)"),
    Primitive("imag", (np.imag,), "elementwise", logic.imag, "imaginary part of a real array (zeros)"),
    Primitive("conj", (np.conj, np.conjugate), "elementwise", logic.conj, "complex conjugate of a real array (itself)"),
    Primitive("heaviside", (np.heaviside,), "piecewise", cmp.heaviside, "0 below 0, 1 above, b at 0, NaN at NaN; derivative 0 in a (and 1 in b at a = 0)"),
    Primitive("clip", (np.clip,), "piecewise", _clip_build, "np.clip(a, lo, hi) = minimum(maximum(a, lo), hi)"),
    Primitive("where", (np.where,), "piecewise", _where_build, "np.where(cond, a, b); the derivative follows the branch taken"),
    Primitive("select", (np.select,), "piecewise", _select_build, "np.select(conditions, choices, default)"),
    # ----- tests on values --------------------------------------------------------------------
    Primitive("isnan", (np.isnan,), "comparison", cmp.isnan, "a is NaN (a != a)"),
    Primitive("isinf", (np.isinf,), "comparison", cmp.isinf, "a is ±inf"),
    Primitive("isfinite", (np.isfinite,), "comparison", cmp.isfinite, "a is neither ±inf nor NaN"),
    # ----- logic ---------------------------------------------------------------------------------
    Primitive("logical_and", (np.logical_and,), "logic", _logical(sp.And), "a and b, elementwise"),
    Primitive("logical_or", (np.logical_or,), "logic", _logical(sp.Or), "a or b, elementwise"),
    Primitive("logical_not", (np.logical_not,), "logic", _logical(sp.Not), "not a, elementwise"),
    Primitive("logical_xor", (np.logical_xor,), "logic", _logical(sp.Xor), "a xor b, elementwise"),
    Primitive("bitwise_and", (np.bitwise_and,), "logic", _bitwise_as_logical("bitwise_and", sp.And), "a & b on boolean masks"),
    Primitive("bitwise_or", (np.bitwise_or,), "logic", _bitwise_as_logical("bitwise_or", sp.Or), "a | b on boolean masks"),
    Primitive("bitwise_xor", (np.bitwise_xor,), "logic", _bitwise_as_logical("bitwise_xor", sp.Xor), "a ^ b on boolean masks"),
    Primitive("invert", (np.invert,), "logic", _bitwise_as_logical("invert", sp.Not), "~a on boolean masks"),
    # ----- reductions ------------------------------------------------------------------------
    Primitive("sum", (np.sum,), "reduction", _reduction(lambda items: g.add(*items)), "sum over axes (axis=, keepdims=)"),
    Primitive("mean", (np.mean,), "reduction", _reduction(None, mean=True), "mean over axes"),
    Primitive("var", (np.var,), "reduction", _moment(root=False), "variance over axes (ddof=, axis=, keepdims=, dtype=), as NumPy computes it"),
    Primitive("std", (np.std,), "reduction", _moment(root=True), "standard deviation: sqrt of var (ddof=, axis=, keepdims=, dtype=)"),
    Primitive("average", (np.average,), "reduction", cmp.average, "weighted mean over axes (weights=, returned=, keepdims=), as NumPy computes it"),
    Primitive("nansum", (np.nansum,), "reduction", cmp.nansum, "sum with NaNs counted as zero"),
    Primitive("nanmean", (np.nanmean,), "reduction", cmp.nanmean, "mean of the values that are not NaN"),
    Primitive("ptp", (np.ptp,), "reduction", lib.ptp, "max - min over axes"),
    Primitive("nanmax", (np.nanmax,), "reduction", lib.nanmax, "maximum of the values that are not NaN (NaN for a slice of NaNs only)"),
    Primitive("nanmin", (np.nanmin,), "reduction", lib.nanmin, "minimum of the values that are not NaN (NaN for a slice of NaNs only)"),
    Primitive("count_nonzero", (np.count_nonzero,), "reduction", lib.count_nonzero, "number of nonzero values (derivative 0)"),
    Primitive("trapezoid", (np.trapezoid,), "reduction", lib.trapezoid, "trapezoidal rule (x= or dx=), NumPy's steps"),
    Primitive("gradient", (np.gradient,), "reduction", lib.gradient, "central differences (scalar spacings or constant coordinate arrays; edge_order 1 or 2), NumPy's formulas"),
    Primitive("polyval", (np.polyval,), "elementwise", lib.polyval, "polynomial by Horner's rule, as NumPy"),
    Primitive("interp", (np.interp,), "piecewise", lib.interp, "linear interpolation at traced or constant points, with constant sample points xp"),
    Primitive("linspace", (np.linspace,), "creation", lib.linspace, "evenly spaced values between traced endpoints, NumPy's steps"),
    Primitive("isclose", (np.isclose,), "comparison", lib.isclose, "|a - b| <= atol + rtol |b| (derivative 0)"),
    Primitive("cov", (np.cov,), "reduction", lib.cov, "covariance matrix (rowvar=, bias=, ddof=; no weights), NumPy's steps (sums may round differently)"),
    Primitive("corrcoef", (np.corrcoef,), "reduction", lib.corrcoef, "correlation coefficients: cov over the products of standard deviations"),
    Primitive("sort", (np.sort,), "piecewise", order.sort, "sorted along an axis by a sorting network of selects (NaNs last); each value's derivative is its input's"),
    Primitive("median", (np.median,), "reduction", order.median, "middle value (mean of the two middle values), NaN if any is NaN"),
    Primitive("quantile", (np.quantile,), "reduction", order.quantile, "quantiles with NumPy's default linear method (concrete q)"),
    Primitive("percentile", (np.percentile,), "reduction", order.percentile, "percentiles with NumPy's default linear method (concrete q)"),
    Primitive("argmax", (np.argmax,), "comparison", order.argmax, "position of the first maximum (of the first NaN), an integer; derivative 0. x[np.argmax(x)] selects, as np.max"),
    Primitive("argmin", (np.argmin,), "comparison", order.argmin, "position of the first minimum (of the first NaN), an integer; derivative 0"),
    Primitive("all", (np.all,), "comparison", logic.all_, "all nonzero over axes (a condition; derivative 0)"),
    Primitive("any", (np.any,), "comparison", logic.any_, "any nonzero over axes (a condition; derivative 0)"),
    Primitive("nanprod", (np.nanprod,), "reduction", logic.nanprod, "product with NaNs counted as one"),
    Primitive("nanvar", (np.nanvar,), "reduction", logic.nanvar, "variance of the values that are not NaN (ddof=), as NumPy computes it"),
    Primitive("nanstd", (np.nanstd,), "reduction", logic.nanstd, "sqrt of nanvar"),
    Primitive("cumulative_sum", (np.cumulative_sum,), "reduction", assembly.cumulative_sum, "running sum (include_initial=)"),
    Primitive("cumulative_prod", (np.cumulative_prod,), "reduction", assembly.cumulative_prod, "running product (include_initial=)"),
    Primitive("ediff1d", (np.ediff1d,), "reduction", assembly.ediff1d, "differences of the flattened array (to_begin=, to_end=)"),
    Primitive("convolve", (np.convolve,), "contraction", assembly.convolve, "discrete convolution of vectors (full, same, valid); on the array tier one product of windows (see numerics)"),
    Primitive("vander", (np.vander,), "elementwise", assembly.vander, "Vandermonde matrix: powers by repeated products, as NumPy"),
    Primitive("prod", (np.prod,), "reduction", _reduction(lambda items: g.exact_mul(*items) if items else g.ONE), "product over axes (array tier: a tree of halvings, NumPy's value to rounding)"),
    Primitive("amax", (np.max, np.amax), "reduction", _extremum(_max), "maximum over axes (pairwise, ties split)"),
    Primitive("amin", (np.min, np.amin), "reduction", _extremum(_min), "minimum over axes (pairwise, ties split)"),
    Primitive("cumsum", (np.cumsum,), "reduction", _running(g.add, None), "running sum"),
    Primitive("cumprod", (np.cumprod,), "reduction", _running(g.exact_mul, None), "running product (array tier: a doubling scan, NumPy's value to rounding)"),
    Primitive("add.accumulate", (UfuncMethod(np.add, "accumulate"),), "reduction", _running(g.add, 0), "running sum along an axis (axis=0 by default)"),
    Primitive("multiply.accumulate", (UfuncMethod(np.multiply, "accumulate"),), "reduction", _running(g.exact_mul, 0), "running product along an axis (axis=0 by default)"),
    Primitive("maximum.accumulate", (UfuncMethod(np.maximum, "accumulate"),), "reduction", order.accumulate_max, "running maximum along an axis (axis=0 by default, NaNs propagate); each entry's derivative is the one of the value it took"),
    Primitive("minimum.accumulate", (UfuncMethod(np.minimum, "accumulate"),), "reduction", order.accumulate_min, "running minimum along an axis"),
    Primitive("diff", (np.diff,), "reduction", assembly.diff, "n-th discrete difference along an axis (prepend=, append=; booleans by !=)"),
    Primitive("trace", (np.trace,), "reduction", _trace, "sum of a diagonal"),
    Primitive("norm", (np.linalg.norm,), "reduction", norms.norm, "np.linalg.norm: vector norms of any order (2, 1, inf, -inf, 0, p) along an axis; matrix norms 'fro', 1, -1, inf, -inf (no SVD: not 2, -2, 'nuc')"),
    Primitive("vector_norm", (np.linalg.vector_norm,), "reduction", norms.vector_norm, "vector norm of any order over one axis, several or all (axis=, keepdims=)"),
    Primitive("matrix_norm", (np.linalg.matrix_norm,), "reduction", norms.matrix_norm, "matrix norm over the last two axes: 'fro', 1, -1, inf, -inf (stacks too)"),
    # ----- products --------------------------------------------------------------------------
    Primitive("matmul", (np.matmul,), "contraction", _matmul_build, "a @ b, with stacks of matrices broadcast"),
    Primitive("dot", (np.dot,), "contraction", _dot_build, "np.dot"),
    Primitive("vdot", (np.vdot,), "contraction", _vdot, "np.vdot of flattened arrays"),
    Primitive("inner", (np.inner,), "contraction", _inner, "np.inner: sum over the last axes"),
    Primitive("outer", (np.outer,), "contraction", _outer, "np.outer of flattened arrays"),
    Primitive("tensordot", (np.tensordot,), "contraction", _tensordot, "np.tensordot"),
    Primitive("einsum", (np.einsum,), "contraction", _einsum, "np.einsum (explicit, implicit, '...')"),
    Primitive("cross", (np.cross,), "contraction", _cross, "cross product of 3-vectors"),
    Primitive("kron", (np.kron,), "contraction", cmp.kron, "Kronecker product"),
    Primitive("multi_dot", (np.linalg.multi_dot,), "contraction", norms.multi_dot, "a chain of products in the cheapest order, as NumPy chooses it"),
    Primitive("correlate", (np.correlate,), "contraction", signal.correlate, "cross-correlation of vectors (valid, same, full), NumPy's windows"),
    # ----- small dense linear algebra ------------------------------------------------------------
    Primitive("det", (np.linalg.det,), "linear algebra", cmp.det, "determinant: closed form up to 4×4, NumPy's LAPACK on the array tier beyond (stacks too); derivative adj(a)ᵀ"),
    Primitive("inv", (np.linalg.inv,), "linear algebra", cmp.inv, "inverse: adjugate / determinant up to 4×4, NumPy's LAPACK on the array tier beyond (stacks too)"),
    Primitive("solve", (np.linalg.solve,), "linear algebra", cmp.solve, "inv(a) @ b in closed form up to 4×4 (any size if a is constant); NumPy's LAPACK on the array tier beyond"),
    # ----- SciPy's special functions (when SciPy is installed; scipy.special is never imported) ----
    _scipy("erf", "erf", "error function (the C library's erf)"),
    _scipy("erfc", "erfc", "complementary error function (the C library's erfc)"),
    _scipy("gammaln", "gammaln", "log |Gamma(a)| (the C library's lgamma); derivatives digamma, trigamma (two orders)"),
    _scipy("psi", "digamma", "digamma, the derivative of gammaln (a series; derivative trigamma)", "digamma"),
    _scipy("expit", "expit", "logistic sigmoid, SciPy's algorithm; derivative expit (1 - expit)"),
    _scipy("log_expit", "log_expit", "log(expit(a)), SciPy's algorithm"),
    _scipy("logit", "logit", "log(a / (1 - a)), SciPy's algorithm"),
    _scipy("xlogy", "xlogy", "a log(b), 0 where a = 0; derivative log(b) in a (JAX's rule)"),
    _scipy("xlog1py", "xlog1py", "a log1p(b), 0 where a = 0"),
    # ----- SciPy's signal processing (traced code sees these in SciPy's place) ---------------------
    Primitive("signal.convolve", (SciPyFunction("scipy.signal", "convolve"),), "signal", signal.scipy_convolve, "N-d convolution (full, same, valid; every method computed directly)"),
    Primitive("signal.correlate", (SciPyFunction("scipy.signal", "correlate"),), "signal", signal.scipy_correlate, "N-d cross-correlation (full, same, valid)"),
    Primitive("signal.convolve2d", (SciPyFunction("scipy.signal", "convolve2d"),), "signal", signal.convolve2d, "2-d convolution (full, same, valid; boundary fill with fillvalue=, wrap, symm)"),
    Primitive("signal.correlate2d", (SciPyFunction("scipy.signal", "correlate2d"),), "signal", signal.correlate2d, "2-d cross-correlation (full, same, valid; boundary fill with fillvalue=, wrap, symm)"),
    # ----- structure -------------------------------------------------------------------------
    _func("reshape", [np.reshape], ops.structural(np.reshape), "reshape"),
    _func("transpose", [np.transpose], ops.structural(np.transpose), "transpose / .T (with axes=)"),
    _func("ravel", [np.ravel], ops.structural(np.ravel), "flatten to 1-d"),
    _func("squeeze", [np.squeeze], ops.structural(np.squeeze), "drop length-1 axes"),
    _func("expand_dims", [np.expand_dims], ops.structural(np.expand_dims), "insert a length-1 axis"),
    _func("swapaxes", [np.swapaxes], ops.structural(np.swapaxes), "swap two axes"),
    _func("moveaxis", [np.moveaxis], ops.structural(np.moveaxis), "move axes to new positions"),
    _func("broadcast_to", [np.broadcast_to], ops.structural(np.broadcast_to), "broadcast to a shape"),
    _func("atleast_1d", [np.atleast_1d], ops.structural(np.atleast_1d), "at least 1-d (one array)"),
    _func("atleast_2d", [np.atleast_2d], ops.structural(np.atleast_2d), "at least 2-d (one array)"),
    _func("flip", [np.flip], ops.structural(np.flip), "reverse along axes"),
    _func("fliplr", [np.fliplr], ops.structural(np.fliplr), "reverse columns"),
    _func("flipud", [np.flipud], ops.structural(np.flipud), "reverse rows"),
    _func("roll", [np.roll], ops.structural(np.roll), "roll elements along an axis"),
    _func("tile", [np.tile], ops.structural(np.tile), "repeat the whole array"),
    _func("repeat", [np.repeat], ops.structural(np.repeat), "repeat elements"),
    _func("take", [np.take], assembly.take, "take with a constant index array, or positions from np.argmax/np.argmin"),
    _func("sliding_window_view", [np.lib.stride_tricks.sliding_window_view], ops.structural(np.lib.stride_tricks.sliding_window_view), "windows along axes (window_shape, axis=), a read-only view as NumPy's"),
    _func("append", [np.append], lib.append, "append values (flattened without axis=)"),
    _func("insert", [np.insert], lib.insert, "insert values at concrete positions"),
    _func("delete", [np.delete], lib.delete, "delete concrete positions"),
    _func("split", [np.split], lib.split, "split at concrete positions (a list of arrays)"),
    _func("array_split", [np.array_split], lib.array_split, "split into nearly equal parts"),
    _func("hsplit", [np.hsplit], lib.hsplit, "split columns"),
    _func("vsplit", [np.vsplit], lib.vsplit, "split rows"),
    _func("meshgrid", [np.meshgrid], assembly.meshgrid, "coordinate grids (indexing=, sparse=)"),
    _func("broadcast_arrays", [np.broadcast_arrays], assembly.broadcast_arrays, "arrays broadcast to one shape"),
    _func("block", [np.block], assembly.block, "an array from nested lists of blocks"),
    _func("dstack", [np.dstack], assembly.dstack, "stack along the third axis"),
    _func("atleast_3d", [np.atleast_3d], assembly.atleast_3d, "views with at least three dimensions"),
    _func("rot90", [np.rot90], assembly.rot90, "rotate by 90 degrees in a plane"),
    _func("resize", [np.resize], ops.structural(np.resize), "the flattened array repeated (or cut) to a new shape"),
    _func("take_along_axis", [np.take_along_axis], assembly.take_along_axis, "take along an axis with constant indices, or positions from np.argmax/np.argmin (keepdims=True)"),
    _func("tril", [np.tril], cmp.tril, "lower triangle (k=), zeros above"),
    _func("triu", [np.triu], cmp.triu, "upper triangle (k=), zeros below"),
    _func("pad", [np.pad], cmp.pad, "pad with modes constant (constant_values=), edge, wrap, reflect, symmetric, empty"),
    _func("diagonal", [np.diagonal], _diagonal, "a diagonal as a 1-d array"),
    _func("diag", [np.diag], _diag, "diagonal of a matrix, or matrix from a diagonal"),
    _func("copy", [np.copy], ops.structural(np.copy), "a copy"),
    _func("concatenate", [np.concatenate], ops.joining(np.concatenate), "join along an existing axis"),
    _func("stack", [np.stack], ops.joining(np.stack), "join along a new axis"),
    _func("hstack", [np.hstack], ops.joining(np.hstack), "join horizontally"),
    _func("vstack", [np.vstack], ops.joining(np.vstack), "join vertically"),
    _func("column_stack", [np.column_stack], ops.joining(np.column_stack), "1-d arrays as columns"),
    _func("zeros_like", [np.zeros_like], ops.filled_like(0), "zeros shaped like a (assignable)", kind="creation"),
    _func("ones_like", [np.ones_like], ops.filled_like(1), "ones shaped like a (assignable)", kind="creation"),
    _func("empty_like", [np.empty_like], ops.filled_like(0), "like zeros_like (assignable)", kind="creation"),
    _func("full_like", [np.full_like], ops.full_like, "filled with a (traced) value", kind="creation"),
    _func("shape", [np.shape], _query(np.shape), "np.shape (a concrete tuple)", kind="query"),
    _func("ndim", [np.ndim], _query(np.ndim), "np.ndim (a concrete int)", kind="query"),
    _func("size", [np.size], _query(np.size), "np.size (a concrete int)", kind="query"),
]


def _register() -> None:
    for row in TABLE:
        if row.name in PRIMITIVES:
            raise AssertionError(f"duplicate primitive {row.name}")
        PRIMITIVES[row.name] = row
        for fn in row.numpy:
            if isinstance(fn, SciPyUfunc):
                LATE_UFUNCS[fn.name] = row
            elif isinstance(fn, SciPyFunction):
                LIBRARY_FUNCTIONS[fn] = row
            elif isinstance(fn, UfuncMethod):
                UFUNC_METHODS[fn.ufunc, fn.method] = row
            else:
                (UFUNCS if isinstance(fn, np.ufunc) else FUNCTIONS)[fn] = row
    add_ufunc_methods([fn.__name__ for r in TABLE for fn in r.numpy if isinstance(fn, np.ufunc) and fn.nin == 1
                       and getattr(np, fn.__name__, None) is fn])


_register()

def supported_operations() -> list[tuple[str, str, str]]:
    """The traceable NumPy operations as ``(numpy name, kind, description)`` rows.

    >>> ("np.sin", "elementwise", "sine") in supported_operations()
    True
    """
    rows = []
    for row in TABLE:
        for fn in row.numpy:
            rows.append((public_name(fn), row.kind, row.doc))
    return rows + list(ARRAY_TIER_ONLY)


def public_name(fn) -> str:
    """How the docs and messages name a traceable callable (``np.sin``, ``np.linalg.det``)."""
    if isinstance(fn, SciPyUfunc):
        return f"scipy.special.{fn.name}"
    if isinstance(fn, SciPyFunction):
        return f"{fn.module}.{fn.name}"
    for module, name in ((np.linalg, "np.linalg"), (np.lib.stride_tricks, "np.lib.stride_tricks")):
        if getattr(module, fn.__name__, None) is fn and getattr(np, fn.__name__, None) is not fn:
            return f"{name}.{fn.__name__}"
    return f"np.{fn.__name__}"
