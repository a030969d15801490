"""Random NumPy programs for the property-based fuzz suite (``test_fuzz.py``).

A program is generated as straight-line Python source over ``np``::

    def f(a, b):
        t0 = np.sin(a)
        t1 = np.where(np.less(t0, b), t0 * b, np.exp(np.tanh(b)))
        return np.sum(t1, axis=0)

and compiled once per numpy-like namespace, so the *same* program runs under
NumPy (what symjac traces, and the value reference), under HIPS autograd (the
independent AD oracle, through :data:`AUTOGRAD`, which supplies differentiable
equivalents of the few functions autograd cannot differentiate), and under
:class:`Recorder` (NumPy plus a log of every branch decision and its distance
to a tie).  A failing example prints as the source above: a reproducer.

Generation is top-down by *target shape* (0-d to 3-d), so broadcasting,
reductions with axes, contractions and reshapes are built from the shape they
must produce.  Every value carries a conservative interval; an operation with
a restricted domain (``log``, ``arcsin``, ``arccosh``, division, ``exp`` of a
large value...) gets its operand through an *adapter* that maps any value
into that domain (``np.exp(np.tanh(t))``, ``0.9 * np.tanh(t)``, ``1.1 + t *
t``...), so programs are valid by construction.  Kinks (``maximum``, ``clip``,
``abs``, ``floor``, comparisons, ``max`` reductions) are allowed anywhere: the
tests read the recorder's margins and only compare where every evaluation
point takes the same branches.
"""

from __future__ import annotations

import math
import re
import types
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

LEAF = 2.1  # inputs are drawn from [-2, 2]; the margin covers finite-difference steps
BIG = 1e3  # a value whose bound exceeds this is squashed before use
PARAMS = ("a", "b", "c")


@dataclass(frozen=True)
class Val:
    """A generated value: its source expression, shape and a bound on its values."""

    src: str
    shape: tuple
    lo: float
    hi: float

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))


@dataclass
class Program:
    """A generated function: its parameters, their shapes, and its body."""

    params: list[str]
    shapes: list[tuple]
    lines: list[str]
    outputs: list[Val]
    ops: set = field(default_factory=set)

    @property
    def tuple_output(self) -> bool:
        return len(self.outputs) > 1

    @property
    def source(self) -> str:
        ret = ", ".join(o.src for o in self.outputs)
        body = "".join(f"    {line}\n" for line in self.lines)
        return f"def f({', '.join(self.params)}):\n{body}    return {ret}\n"

    def function(self, namespace):
        """The program as a Python function over ``namespace`` (``np``, ``put``)."""
        scope = {"np": namespace, "put": namespace.put, "special": namespace.special}
        exec(compile(self.source, "<fuzz program>", "exec"), scope)
        return scope["f"]

    def __repr__(self) -> str:  # what Hypothesis prints for a falsifying example
        return "\n" + self.source


# ----- namespaces the programs run under ------------------------------------------------


def _put_numpy(base, index, value):
    out = base.copy()
    out[index] = value
    return out


class _Namespace(types.SimpleNamespace):
    def __getattr__(self, name):
        return getattr(self._base, name)


def _scipy_special():
    import scipy.special

    return scipy.special


NUMPY = _Namespace(_base=np, put=_put_numpy, special=_scipy_special())
#: NumPy with the program's float32 constants read as float64: the exact reference
NUMPY_AS_FLOAT64 = _Namespace(_base=np, put=_put_numpy, float32=np.float64, special=_scipy_special())


def autograd_namespace():
    """autograd.numpy, with differentiable stand-ins where autograd has gaps.

    (Method forms that autograd's ArrayBox lacks -- ``.dot``, ``.copy``,
    ``.flatten`` -- and ``.diagonal()``, whose VJP is limited, are not
    generated; ``primitive_cases.py`` covers them.)
    """
    import autograd.numpy as anp
    from autograd.extend import defvjp
    from autograd.numpy.numpy_vjps import unbroadcast_f

    # autograd differentiates x ** y through x ** where(y, y - 1, 1), whose derivative
    # in y is wrong at y == 0 (so are second derivatives there).  Programs only use
    # variable exponents on positive bases, where the textbook rule holds.
    defvjp(
        anp.power,
        lambda ans, x, y: unbroadcast_f(x, lambda g: g * y * x ** (y - 1)),
        lambda ans, x, y: unbroadcast_f(y, lambda g: g * anp.log(x) * ans),
    )

    def put(base, index, value):
        # a scatter written with differentiable operations (autograd has no setitem)
        shape = np.shape(base)
        ids = np.arange(int(np.prod(shape))).reshape(shape)[index]
        sel = np.zeros((ids.size if ids.ndim else 1, int(np.prod(shape))))
        sel[np.arange(sel.shape[0]), ids.reshape(-1)] = 1.0
        keep = 1.0 - sel.sum(axis=0)
        flat = anp.reshape(anp.broadcast_to(value, ids.shape), (-1,))
        return anp.reshape(anp.reshape(base, (-1,)) * keep + anp.dot(flat, sel), shape)

    def cumprod(x, axis=None):
        if axis is None:
            x, axis = anp.reshape(x, (-1,)), 0
        xm = anp.moveaxis(x, axis, 0)
        acc, parts = xm[0], [xm[0]]
        for k in range(1, xm.shape[0]):
            acc = acc * xm[k]
            parts.append(acc)
        return anp.moveaxis(anp.stack(parts), 0, axis)

    def flip(x, axis=None):
        axes = range(anp.ndim(x)) if axis is None else [axis % anp.ndim(x)]
        return x[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(anp.ndim(x)))]

    def take(x, idx, axis=None):
        if axis is None:
            return anp.reshape(x, (-1,))[idx]
        return x[(slice(None),) * (axis % anp.ndim(x)) + (idx,)]

    def norm(x, ord=None, axis=None, keepdims=False):
        if ord == 1:
            return anp.sum(anp.abs(x), axis=axis, keepdims=keepdims)
        if ord == np.inf:
            return anp.max(anp.abs(x), axis=axis, keepdims=keepdims)
        return anp.sqrt(anp.sum(x * x, axis=axis, keepdims=keepdims))

    def where(cond, x, y):
        # autograd's where does not unbroadcast its operands' gradients
        shape = np.broadcast_shapes(anp.shape(cond), anp.shape(x), anp.shape(y))
        return anp.where(cond, x + anp.zeros(shape), y + anp.zeros(shape))

    def prod(x, axis=None, keepdims=False):
        # autograd's prod VJP divides by x: NaN at a zero element
        nd = anp.ndim(x)
        axes = tuple(range(nd)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(sorted(a % nd for a in axes))
        moved = anp.moveaxis(x, axes, tuple(range(len(axes))))
        rest = anp.shape(moved)[len(axes):]
        rows = anp.reshape(moved, (-1,) + rest)
        acc = rows[0]
        for k in range(1, anp.shape(rows)[0]):
            acc = acc * rows[k]
        if keepdims:
            acc = anp.reshape(acc, tuple(1 if d in axes else n for d, n in enumerate(anp.shape(x))))
        return acc

    def cross(a, b):  # autograd's cross VJP does not unbroadcast
        shape = np.broadcast_shapes(anp.shape(a), anp.shape(b))
        return anp.cross(a + anp.zeros(shape), b + anp.zeros(shape))

    def outer(a, b):  # autograd's outer VJP assumes 1-d operands
        return anp.outer(anp.reshape(a, (-1,)), anp.reshape(b, (-1,)))

    def repeat(x, repeats, axis=None):  # autograd's repeat VJP fails on a 0-d operand
        return anp.repeat(anp.reshape(x, (1,)) if anp.ndim(x) == 0 else x, repeats, axis)

    def einsum(spec, *operands):
        if spec == "ii":  # autograd cannot differentiate a repeated index
            return anp.trace(operands[0])
        return anp.einsum(spec, *operands)

    def diagonal(x, offset=0):
        # autograd's diagonal VJP handles only square stacks (make_diagonal)
        n = min(x.shape[0] - max(-offset, 0), x.shape[1] - max(offset, 0))
        rows = np.arange(n) + max(-offset, 0)
        return x[rows, rows + offset]

    def diag(v, k=0):
        return diagonal(v, k) if anp.ndim(v) == 2 else anp.diag(v, k)

    def pad(x, widths, mode="constant", constant_values=0.0):
        # autograd pads only in constant mode: gather through a padded index array instead
        extra = {"constant_values": -1} if mode == "constant" else {}
        index = np.pad(np.arange(np.size(x)), widths, mode=mode, **extra)
        flat = anp.concatenate([anp.reshape(x, (-1,)), anp.array([constant_values])])
        return flat[np.where(index < 0, np.size(x), index)]

    def sinc(x):
        # autograd's sinc VJP divides by x**2 (NaN at 0), and sin(pi x) / (pi x) differentiated
        # twice loses ~1e-16 / x**2 to cancellation (8e-8 at x = 6e-5, which symjac's Taylor
        # polynomial gets right): the series below |x| < 0.01 (its next term ~1e-23)
        small = anp.abs(x) < 1e-2
        safe = anp.where(small, 1.0, x)
        z = (np.pi * x) ** 2
        series = 1.0 - z / 6 * (1.0 - z / 20 * (1.0 - z / 42 * (1.0 - z / 72)))
        return anp.where(small, series, anp.sin(np.pi * safe) / (np.pi * safe))

    import autograd.scipy.special as aspecial

    def xlog(log):  # (y > 0 in programs, so x log(y) is the value, and log(y) the x-derivative at x = 0, as JAX)
        return lambda x, y: x * log(y)

    special = types.SimpleNamespace(
        erf=aspecial.erf, erfc=aspecial.erfc, gammaln=aspecial.gammaln, expit=aspecial.expit, logit=aspecial.logit,
        log_expit=lambda x: -anp.logaddexp(0.0, -x), xlogy=xlog(anp.log), xlog1py=xlog(anp.log1p))

    def fmod(a, b):  # (autograd has no VJP for fmod): a - trunc(a / b) b
        return a - anp.trunc(a / b) * b

    def polyval(p, x):
        y = 0.0 * x
        for c in p:
            y = y * x + c
        return y

    def trapezoid(y, dx=1.0, axis=-1):
        y = anp.moveaxis(y, axis, 0)
        return anp.sum(dx * (y[1:] + y[:-1]) / 2.0, axis=0)

    def average(x, axis=None, weights=None, keepdims=False):
        if weights is None:
            return anp.mean(x, axis=axis, keepdims=keepdims)
        return anp.sum(x * weights, axis=axis) / anp.sum(weights, axis=axis)

    return _Namespace(
        _base=_Namespace(_base=anp, s_=np.s_, inf=np.inf),
        put=put,
        einsum=einsum,
        repeat=repeat,
        outer=outer,
        cross=cross,
        where=where,
        prod=prod,
        diagonal=diagonal,
        diag=diag,
        broadcast_to=lambda x, shape: x + anp.zeros(shape),  # autograd's cannot add leading dims
        float_power=anp.power,
        cumprod=cumprod,
        vdot=lambda a, b: anp.sum(anp.reshape(a, (-1,)) * anp.reshape(b, (-1,))),
        flip=flip,
        take=take,
        copy=lambda x: x,
        positive=lambda x: x,
        linalg=types.SimpleNamespace(norm=norm, det=anp.linalg.det, inv=anp.linalg.inv, solve=anp.linalg.solve),
        pad=pad,
        sinc=sinc,
        special=special,
        fmod=fmod,
        cbrt=lambda x: anp.sign(x) * anp.abs(x) ** (1.0 / 3.0),
        copysign=lambda a, b: where(b < 0, -anp.abs(a), anp.abs(a)),
        average=average,
        nansum=anp.sum,  # (programs hold no NaNs)
        nanmean=anp.mean,
        nanmax=anp.max,
        nanmin=anp.min,
        ptp=lambda x, axis=None, keepdims=False: anp.max(x, axis=axis, keepdims=keepdims) - anp.min(
            x, axis=axis, keepdims=keepdims),
        trapezoid=trapezoid,
        polyval=polyval,
        heaviside=lambda x, h: anp.where(x < 0, 0.0, anp.where(x > 0, 1.0, h)) + 0.0 * x,
    )


class Recorder(_Namespace):
    """NumPy, logging every branch decision of a kink (``decisions``) and its
    distance to a tie (``margins``, min over the elements), and the distance
    to a singular point of a smooth function (``singular``: the 2-norm at 0)."""

    def __init__(self):
        super().__init__(_base=np, put=_put_numpy, decisions=[], margins=[], singular=[], special=_scipy_special(),
                         linalg=types.SimpleNamespace(norm=self._norm, det=np.linalg.det, inv=np.linalg.inv,
                                                      solve=np.linalg.solve))

    def _log(self, decision, margin):
        self.decisions.append(np.asarray(decision))
        m = np.asarray(margin, dtype=np.float64)
        self.margins.append(float(np.min(m)) if m.size else math.inf)

    def _pair(name):  # noqa: N805 -- builds methods
        def method(self, a, b, *args, **kwargs):
            a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            self._log(a64 > b64, np.abs(a64 - b64))
            return getattr(np, name)(a, b, *args, **kwargs)

        return method

    maximum = _pair("maximum")
    minimum = _pair("minimum")
    fmax = _pair("fmax")
    fmin = _pair("fmin")
    less = _pair("less")
    less_equal = _pair("less_equal")
    greater = _pair("greater")
    greater_equal = _pair("greater_equal")

    def _at_zero(name):  # noqa: N805
        def method(self, a, *args, **kwargs):
            a64 = np.asarray(a, dtype=np.float64)
            self._log(a64 > 0, np.abs(a64))
            return getattr(np, name)(a, *args, **kwargs)

        return method

    abs = _at_zero("abs")
    absolute = _at_zero("absolute")
    fabs = _at_zero("fabs")
    sign = _at_zero("sign")
    heaviside = _at_zero("heaviside")

    def _at_integer(name):  # noqa: N805
        def method(self, a, *args, **kwargs):
            a64 = np.asarray(a, dtype=np.float64)
            self._log(np.floor(a64), np.abs(a64 - np.round(a64)))
            return getattr(np, name)(a, *args, **kwargs)

        return method

    floor = _at_integer("floor")
    ceil = _at_integer("ceil")
    trunc = _at_integer("trunc")
    fix = _at_integer("fix")

    def _at_half(name):  # noqa: N805 -- rint and round jump at halves (of a * 10**decimals)
        def method(self, a, decimals=0, *args, **kwargs):
            y = np.asarray(a, dtype=np.float64) * 10.0 ** decimals
            self._log(np.floor(y + 0.5), np.abs(np.abs(y - np.floor(y)) - 0.5) / 10.0 ** decimals)
            return getattr(np, name)(a, decimals, *args, **kwargs) if name != "rint" else np.rint(a)

        return method

    rint = _at_half("rint")
    round = _at_half("round")

    def _at_multiple(name):  # noqa: N805 -- remainders jump where a / b is an integer
        def method(self, a, b, *args, **kwargs):
            q = np.asarray(a, dtype=np.float64) / np.asarray(b, dtype=np.float64)
            self._log(np.floor(q), np.abs(q - np.round(q)) * np.abs(np.asarray(b, dtype=np.float64)))
            return getattr(np, name)(a, b, *args, **kwargs)

        return method

    fmod = _at_multiple("fmod")
    remainder = _at_multiple("remainder")
    mod = _at_multiple("mod")
    floor_divide = _at_multiple("floor_divide")

    def copysign(self, a, b):
        a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        self._log(a64 > 0, np.abs(a64))
        self._log(b64 > 0, np.abs(b64))
        return np.copysign(a, b)

    def clip(self, a, lo=None, hi=None, **kwargs):
        a64 = np.asarray(a, dtype=np.float64)
        for bound in (lo, hi):
            if bound is not None:
                self._log(a64 > bound, np.abs(a64 - bound))
        return np.clip(a, lo, hi, **kwargs)

    def _extremum(name):  # noqa: N805
        def method(self, a, axis=None, **kwargs):
            self._log_extremum(a, axis, name.endswith("max"))
            return getattr(np, name)(a, axis=axis, **kwargs)

        return method

    def _log_extremum(self, a, axis, largest=True):
        """The winner along the reduced axes, and its lead over the runner-up."""
        a64 = np.asarray(a, dtype=np.float64)
        axes = tuple(range(a64.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(x % a64.ndim for x in axes)
        moved = np.moveaxis(a64, axes, tuple(range(len(axes))))
        rows = moved.reshape((-1,) + moved.shape[len(axes):]) if a64.ndim else moved.reshape(1)
        rows = rows if largest else -rows
        if rows.shape[0] < 2:
            return
        s = np.sort(rows, axis=0)
        self._log(np.argmax(rows, axis=0), s[-1] - s[-2])

    max = _extremum("max")
    amax = _extremum("amax")
    min = _extremum("min")
    amin = _extremum("amin")
    nanmax = _extremum("nanmax")
    nanmin = _extremum("nanmin")

    def ptp(self, a, axis=None, **kwargs):
        self._log_extremum(a, axis, True)
        self._log_extremum(a, axis, False)
        return np.ptp(a, axis=axis, **kwargs)

    def _norm(self, x, ord=None, axis=None, keepdims=False):
        x64 = np.asarray(x, dtype=np.float64)
        if ord in (1, np.inf):
            self._log(x64 > 0, np.abs(x64))
            if ord == np.inf:
                self._log_extremum(np.abs(x64), axis, True)
        else:  # smooth, but singular at 0: finite differences need room
            size = np.linalg.norm(x64, axis=axis)
            self._log(True, size)
            self.singular.append(float(np.min(size)))
        return np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)

    del _pair, _at_zero, _at_integer, _at_half, _at_multiple, _extremum


# ----- generation ------------------------------------------------------------------------


def _lit(x: float) -> str:
    return repr(float(x))


def _prod_interval(a: Val, b: Val) -> tuple[float, float]:
    c = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
    return min(c), max(c)


def _mono(fn, v: Val) -> tuple[float, float]:
    lo, hi = fn(v.lo), fn(v.hi)
    return min(lo, hi), max(lo, hi)


def _even(fn, v: Val) -> tuple[float, float]:
    inner = 0.0 if v.lo <= 0 <= v.hi else min(abs(v.lo), abs(v.hi))
    return fn(inner), fn(v.mag)


# unary elementwise operations: template, domain, interval of the result
def _quad(t: float) -> float:
    return 0.5 * t * t - t + 2.0


UNARY = {
    "neg": ("(-{0})", None, lambda v: (-v.hi, -v.lo)),
    "np.negative": ("np.negative({0})", None, lambda v: (-v.hi, -v.lo)),
    "np.positive": ("np.positive({0})", None, lambda v: (v.lo, v.hi)),
    "np.square": ("np.square({0})", None, lambda v: _even(lambda t: t * t, v)),
    "pow2": ("{0} ** 2", None, lambda v: _even(lambda t: t * t, v)),
    "pow3": ("{0} ** 3", None, lambda v: (v.lo ** 3, v.hi ** 3)),
    "np.sin": ("np.sin({0})", None, lambda v: (-1.0, 1.0)),
    "np.cos": ("np.cos({0})", None, lambda v: (-1.0, 1.0)),
    "np.tanh": ("np.tanh({0})", None, lambda v: _mono(math.tanh, v)),
    "np.arctan": ("np.arctan({0})", None, lambda v: _mono(math.atan, v)),
    "np.arcsinh": ("np.arcsinh({0})", None, lambda v: _mono(math.asinh, v)),
    "np.deg2rad": ("np.deg2rad({0})", None, lambda v: _mono(math.radians, v)),
    "np.rad2deg": ("np.rad2deg({0})", "b3", lambda v: _mono(math.degrees, v)),
    "np.exp": ("np.exp({0})", "b3", lambda v: _mono(math.exp, v)),
    "np.exp2": ("np.exp2({0})", "b3", lambda v: _mono(lambda t: 2.0 ** t, v)),
    "np.expm1": ("np.expm1({0})", "b3", lambda v: _mono(math.expm1, v)),
    "np.sinh": ("np.sinh({0})", "b3", lambda v: _mono(math.sinh, v)),
    "np.cosh": ("np.cosh({0})", "b3", lambda v: _even(math.cosh, v)),
    "np.log": ("np.log({0})", "pos", lambda v: _mono(math.log, v)),
    "np.log2": ("np.log2({0})", "pos", lambda v: _mono(math.log2, v)),
    "np.log10": ("np.log10({0})", "pos", lambda v: _mono(math.log10, v)),
    "np.log1p": ("np.log1p({0})", "pos", lambda v: _mono(math.log1p, v)),
    "np.sqrt": ("np.sqrt({0})", "pos", lambda v: _mono(math.sqrt, v)),
    "np.reciprocal": ("np.reciprocal({0})", "pos", lambda v: (1 / v.hi, 1 / v.lo)),
    "pow-1": ("{0} ** -1", "pos", lambda v: (1 / v.hi, 1 / v.lo)),
    "pow0.5": ("{0} ** 0.5", "pos", lambda v: _mono(math.sqrt, v)),
    "pow1.5": ("{0} ** 1.5", "pos", lambda v: _mono(lambda t: t ** 1.5, v)),
    "np.arcsin": ("np.arcsin({0})", "unit", lambda v: _mono(math.asin, v)),
    "np.arccos": ("np.arccos({0})", "unit", lambda v: _mono(math.acos, v)),
    "np.arctanh": ("np.arctanh({0})", "unit", lambda v: _mono(math.atanh, v)),
    "np.tan": ("np.tan({0})", "unit", lambda v: _mono(math.tan, v)),
    "np.arccosh": ("np.arccosh({0})", "gt1", lambda v: _mono(math.acosh, v)),
    # kinks: the tests keep finite differences on one side of them
    "np.abs": ("np.abs({0})", None, lambda v: _even(abs, v)),
    "np.fabs": ("np.fabs({0})", None, lambda v: _even(abs, v)),
    "np.sign": ("np.sign({0})", None, lambda v: (-1.0, 1.0)),
    "np.floor": ("np.floor({0})", None, lambda v: (math.floor(v.lo), math.floor(v.hi))),
    "np.ceil": ("np.ceil({0})", None, lambda v: (math.ceil(v.lo), math.ceil(v.hi))),
    "np.heaviside": ("np.heaviside({0}, 0.5)", None, lambda v: (0.0, 1.0)),
    "np.rint": ("np.rint({0})", None, lambda v: (round(v.lo) - 1.0, round(v.hi) + 1.0)),
    "np.round": ("np.round({0}, 1)", None, lambda v: (v.lo - 0.05, v.hi + 0.05)),
    "np.trunc": ("np.trunc({0})", None, lambda v: (math.trunc(v.lo) - 1.0, math.trunc(v.hi) + 1.0)),
    "np.fix": ("np.fix({0})", None, lambda v: (math.trunc(v.lo) - 1.0, math.trunc(v.hi) + 1.0)),
    "np.cbrt": ("np.cbrt({0})", "pos", lambda v: _mono(lambda t: t ** (1 / 3), v)),
    # 0.5 t^2 - t + 2, smallest (1.5) at t = 1
    "np.polyval": ("np.polyval([0.5, -1.0, 2.0], {0})", None,
                   lambda v: (1.5 if v.lo <= 1.0 <= v.hi else min(_quad(v.lo), _quad(v.hi)), max(_quad(v.lo), _quad(v.hi)))),
    "-np.cbrt(-)": ("np.cbrt(-{0})", "pos", lambda v: (-(v.hi ** (1 / 3)), -(v.lo ** (1 / 3)))),
    "special.erf": ("special.erf({0})", None, lambda v: _mono(math.erf, v)),
    "special.erfc": ("special.erfc({0})", None, lambda v: (math.erfc(v.hi), math.erfc(v.lo))),
    "special.expit": ("special.expit({0})", None, lambda v: (0.0, 1.0)),
    "special.log_expit": ("special.log_expit({0})", "b3", lambda v: (-3.05, 0.0)),
    "special.gammaln": ("special.gammaln({0})", "pos", lambda v: (-0.13, max(math.lgamma(v.lo), math.lgamma(v.hi), 0.0))),
    "special.logit": ("special.logit(0.5 + 0.45 * {0})", "unit", lambda v: (-3.0, 3.0)),
    "np.sinc": ("np.sinc({0})", None, lambda v: (-0.2173, 1.0)),
}

# adapters into a domain: template, resulting interval given the operand
ADAPT = {
    "pos": [
        ("np.exp(np.tanh({0}))", lambda v: (math.exp(-1), math.e)),
        ("(1.5 + np.sin({0}))", lambda v: (0.5, 2.5)),
        ("np.hypot({0}, 0.5)", lambda v: (0.5, math.hypot(v.mag, 0.5))),
        ("(1.0 + {0} * {0})", lambda v: (1.0, 1.0 + v.mag ** 2)),
        ("np.sqrt({0} ** 2 + 0.25)", lambda v: (0.5, math.sqrt(v.mag ** 2 + 0.25))),
        ("np.cosh(np.tanh({0}))", lambda v: (1.0, math.cosh(1.0))),
    ],
    "unit": [
        ("(0.9 * np.tanh({0}))", lambda v: (-0.9, 0.9)),
        ("(0.8 * np.sin({0}))", lambda v: (-0.8, 0.8)),
        ("({0} / (1.0 + {0} ** 2))", lambda v: (-0.5, 0.5)),
    ],
    "b3": [
        ("np.sin({0})", lambda v: (-1.0, 1.0)),
        ("(2.5 * np.tanh({0}))", lambda v: (-2.5, 2.5)),
        ("np.arctan({0})", lambda v: (-math.pi / 2, math.pi / 2)),
        ("np.clip({0}, -2.5, 2.5)", lambda v: (min(max(v.lo, -2.5), 2.5), max(min(v.hi, 2.5), -2.5))),
    ],
    "gt1": [
        ("(1.1 + {0} * {0})", lambda v: (1.1, 1.1 + v.mag ** 2)),
        ("(1.2 + np.exp(np.tanh({0})))", lambda v: (1.2 + math.exp(-1), 1.2 + math.e)),
    ],
}


def _fits(v: Val, domain: str | None) -> bool:
    if domain is None:
        return True
    if domain == "pos":
        return v.lo >= 0.3
    if domain == "unit":
        return v.mag <= 0.9
    if domain == "b3":
        return v.mag <= 3.0
    if domain == "gt1":
        return v.lo >= 1.1
    raise AssertionError(domain)


def _dims_ok(shape) -> bool:
    return len(shape) <= 3 and int(np.prod(shape)) <= 24


#: IEEE special constants for the special-values property (test_fuzz.py)
SPECIAL_CONSTANTS = ["np.inf", "(-np.inf)", "np.nan", "(-0.0)", "0.0", "1e308", "(-1e308)", "5e-324", "1e-310"]
#: ... and input values
SPECIAL_VALUES = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e308, -1e308, 5e-324, 1e-310, 1e300]


class Builder:
    """Draws one program with Hypothesis' ``draw``."""

    def __init__(self, draw, max_args: int = 3, max_size: int = 24, const_dtype: str = "", specials: bool = False):
        self.draw = draw
        self.specials = specials  # constants may be inf, nan, -0.0, huge or subnormal
        self.max_args = max_args
        self.max_size = max_size
        self.dtype_kw = f", dtype=np.{const_dtype}" if const_dtype else ""
        self.params: list[str] = []
        self.shapes: list[tuple] = []
        self.lines: list[str] = []
        self.pool: dict[tuple, list[Val]] = {}
        self.ops: set = set()
        self.traced: set = set()  # names whose values depend on the arguments
        self.n = 0

    # -- drawing helpers --

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def coin(self, p: float = 0.5, simple: bool = False) -> bool:
        """True with probability ``p``; shrinking moves towards ``simple``.

        (Integers, not floats: Hypothesis draws floats at their bounds far too often.)
        """
        k = self.draw(st.integers(0, 99))
        return k < round(100 * p) if simple else k >= 100 - round(100 * p)

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def dim(self) -> int:
        return self.pick([2, 3, 1])

    def emit(self, expr: str, shape: tuple, lo: float, hi: float, op: str, traced: bool | None = None) -> Val:
        self.ops.add(op)
        name = f"t{self.n}"
        self.n += 1
        self.lines.append(f"{name} = {expr}")
        if traced if traced is not None else any(tok in self.traced for tok in re.findall(r"[A-Za-z_]\w*", expr)):
            self.traced.add(name)
        val = Val(name, tuple(shape), float(lo), float(hi))
        assert lo <= hi, f"generator bug: empty interval [{lo}, {hi}] for {expr}"
        if val.mag > BIG:
            val = self.emit(f"np.tanh({name} * {_lit(1 / val.mag)})", shape, -1.0, 1.0, "squash")
        self.pool.setdefault(val.shape, []).append(val)
        return val

    # -- leaves --

    def leaf(self, shape: tuple) -> Val:
        existing = [i for i, s in enumerate(self.shapes) if s == shape]
        choices = ["const"] if self.params else []
        if existing:
            choices += ["arg", "arg", "arg"]
        if len(self.params) < self.max_args:
            choices += ["new", "new", "new"]
        if not existing and self.params and int(np.prod(shape)) > 0:
            choices.append("adapt")
        kind = self.pick(choices) if choices else "const"
        if kind == "arg":
            i = self.pick(existing)
            return Val(self.params[i], shape, -LEAF, LEAF)
        if kind == "new":
            self.params.append(PARAMS[len(self.params)])
            self.traced.add(self.params[-1])
            self.shapes.append(shape)
            return Val(self.params[-1], shape, -LEAF, LEAF)
        if kind == "adapt":
            return self.adapt_arg(shape)
        return self.constant(shape)

    def constant(self, shape: tuple) -> Val:
        if self.specials and self.coin(0.5):
            # IEEE special values; the interval is a stand-in (these programs are not
            # kept inside domains: NaN and inf results are what is compared)
            if shape == ():
                return Val(self.pick(SPECIAL_CONSTANTS), (), -1.0, 1.0)
            n = int(np.prod(shape))
            texts = [self.pick(SPECIAL_CONSTANTS + ["1.5", "-0.25"]) for _ in range(n)]
            return Val(f"np.array([{', '.join(texts)}]).reshape({shape})", shape, -1.0, 1.0)
        if shape == () and self.coin(0.7, simple=True):
            value = self.pick([0.5, 2.0, -1.5, 3.0, 0.25, 1.0, 2, 3, -0.75, 1.7])
            text = f"({value!r})" if value < 0 else repr(value)
            if self.dtype_kw:  # a NumPy scalar of the program's dtype (see test_fuzz.cases)
                text = f"np.{self.dtype_kw.split('np.')[1]}({value!r})"
            return Val(text, (), value, value)
        n = int(np.prod(shape))
        values = [round(self.draw(st.floats(-2, 2)), 3) for _ in range(n)]
        text = f"np.array({values}{self.dtype_kw}).reshape({shape})"
        return Val(text, shape, min(values), max(values))

    def adapt_arg(self, shape: tuple) -> Val:
        """An existing argument brought to ``shape``."""
        i = self.integer(0, len(self.params) - 1)
        src, sshape = self.params[i], self.shapes[i]
        size, want = int(np.prod(sshape)), int(np.prod(shape))
        if size == want:
            return self.emit(f"np.reshape({src}, {shape})", shape, -LEAF, LEAF, "np.reshape")
        total = self.emit(f"np.sum({src})", (), -LEAF * size, LEAF * size, "np.sum")
        return self.emit(f"np.broadcast_to({total.src}, {shape})" if self.coin(0.5)
                         else f"{total.src} * np.ones({shape}{self.dtype_kw})", shape, total.lo, total.hi,
                         "broadcast-arg")

    # -- values in a domain --

    def value(self, shape: tuple, depth: int, domain: str | None = None) -> Val:
        v = self.expr(shape, depth)
        if _fits(v, domain):
            return v
        if v.mag > 30:  # keep the adapter's own output below BIG, so it is not squashed out of the domain
            v = self.emit(f"np.tanh({v.src} * {_lit(1 / v.mag)})", shape, -1.0, 1.0, "squash")
        tmpl, interval = self.pick(ADAPT[domain])
        lo, hi = interval(v)
        return self.emit(tmpl.format(v.src), shape, lo, hi, "adapt-" + domain)

    def expr(self, shape: tuple, depth: int, root: bool = False) -> Val:
        pool = self.pool.get(tuple(shape))
        if not root and pool and self.coin(0.15, simple=True):
            return self.pick(pool)  # share a subexpression: the program is a DAG
        if depth <= 0 or (not root and self.coin(0.08, simple=True)):
            return self.leaf(tuple(shape))
        for _ in range(4):
            op = self.pick(OPS)
            out = op(self, tuple(shape), depth - 1)
            if out is not None:
                return out
        return self.leaf(tuple(shape))

    # -- shapes --

    def partner_shapes(self, shape: tuple, n: int = 2) -> list[tuple]:
        """``n`` shapes that broadcast together to ``shape``."""
        shapes = [list(shape) for _ in range(n)]
        for d in range(len(shape)):
            if shape[d] == 1:
                continue
            full = self.integer(0, n - 1)
            for k in range(n):
                if k != full and self.coin(0.3):
                    shapes[k][d] = 1
        out = []
        for s in shapes:
            # drop leading dims that are 1 here (the other side keeps them)
            drop = self.integer(0, len(s))
            while drop and s and s[0] == 1:
                s = s[1:]
                drop -= 1
            out.append(tuple(s))
        if out and all(len(s) < len(shape) for s in out):
            out[0] = tuple(shape)
        return out

    def reshape_source(self, size: int) -> tuple:
        """A random shape with ``size`` elements (rank 0-3)."""
        options = [(size,)]
        for a in range(1, size + 1):
            if size % a == 0:
                options.append((a, size // a))
                for b in range(1, size // a + 1):
                    if (size // a) % b == 0:
                        options.append((a, b, size // a // b))
        if size == 1:
            options.append(())
        return self.pick(options)


# ----- operations: each takes (builder, target shape, depth) and returns a Val or None --------


#: unary operations for the special-values property only: any operand, special values included
#: (np.power computes x ** 0.5 as sqrt: nan at -inf, -0.0 at -0.0; other exponents by pow)
SPECIAL_UNARY = {
    "np.power0.5": ("np.power({0}, 0.5)", None, lambda v: (0.0, math.sqrt(v.mag))),
    "np.power1.5": ("np.power({0}, 1.5)", None, lambda v: (0.0, v.mag ** 1.5)),
    "np.power-0.5": ("np.power({0}, -0.5)", None, lambda v: (0.0, math.inf)),
}


def op_unary(b: Builder, shape, depth):
    table = {**UNARY, **SPECIAL_UNARY} if b.specials else UNARY
    name = b.pick(list(table))
    tmpl, domain, interval = table[name]
    v = b.value(shape, depth, domain)
    lo, hi = interval(v)
    return b.emit(tmpl.format(v.src), shape, lo, hi, name)


BINARY = {
    "+": ("({0} + {1})", None, lambda x, y: (x.lo + y.lo, x.hi + y.hi)),
    "np.add": ("np.add({0}, {1})", None, lambda x, y: (x.lo + y.lo, x.hi + y.hi)),
    "-": ("({0} - {1})", None, lambda x, y: (x.lo - y.hi, x.hi - y.lo)),
    "np.subtract": ("np.subtract({0}, {1})", None, lambda x, y: (x.lo - y.hi, x.hi - y.lo)),
    "*": ("({0} * {1})", None, _prod_interval),
    "np.multiply": ("np.multiply({0}, {1})", None, _prod_interval),
    "/": ("({0} / {1})", "pos", lambda x, y: _prod_interval(x, Val("", (), 1 / y.hi, 1 / y.lo))),
    "np.divide": ("np.divide({0}, {1})", "pos", lambda x, y: _prod_interval(x, Val("", (), 1 / y.hi, 1 / y.lo))),
    "**": ("({1} ** {0})", "pow", None),
    "np.power": ("np.power({1}, {0})", "pow", None),
    "np.float_power": ("np.float_power({1}, {0})", "pow", None),
    "np.arctan2": ("np.arctan2({0}, {1})", "pos", lambda x, y: (-math.pi / 2, math.pi / 2)),
    "np.hypot": ("np.hypot({0}, {1})", "pos", lambda x, y: (y.lo, math.hypot(x.mag, y.mag))),
    "np.maximum": ("np.maximum({0}, {1})", None, lambda x, y: (max(x.lo, y.lo), max(x.hi, y.hi))),
    "np.minimum": ("np.minimum({0}, {1})", None, lambda x, y: (min(x.lo, y.lo), min(x.hi, y.hi))),
    "np.fmax": ("np.fmax({0}, {1})", None, lambda x, y: (max(x.lo, y.lo), max(x.hi, y.hi))),
    "np.fmin": ("np.fmin({0}, {1})", None, lambda x, y: (min(x.lo, y.lo), min(x.hi, y.hi))),
    "np.fmod": ("np.fmod({0}, {1})", "pos", lambda x, y: (-y.hi, y.hi)),
    "np.remainder": ("np.remainder({0}, {1})", "pos", lambda x, y: (0.0, y.hi)),
    # (np.mod and np.floor_divide, not % and //: the recorder sees functions, not operators)
    "np.mod": ("np.mod({0}, {1})", "pos", lambda x, y: (0.0, y.hi)),
    "np.floor_divide": ("np.floor_divide({0}, {1})", "pos", lambda x, y: _floor_div(x, y)),
    "np.copysign": ("np.copysign({0}, {1})", None, lambda x, y: (-x.mag, x.mag)),
    "special.xlogy": ("special.xlogy({0}, {1})", "pos", lambda x, y: _prod_interval(x, Val("", (), math.log(y.lo), math.log(y.hi)))),
    "special.xlog1py": ("special.xlog1py({0}, {1})", "pos",
                        lambda x, y: _prod_interval(x, Val("", (), math.log1p(y.lo), math.log1p(y.hi)))),
}


def _floor_div(x: Val, y: Val) -> tuple[float, float]:
    q = [x.lo / y.lo, x.lo / y.hi, x.hi / y.lo, x.hi / y.hi]
    return math.floor(min(q)), math.floor(max(q))


def _pow_interval(e: Val, base: Val):
    c = [base.lo ** e.lo, base.lo ** e.hi, base.hi ** e.lo, base.hi ** e.hi]
    return min(c), max(c)


def op_binary(b: Builder, shape, depth):
    name = b.pick(list(BINARY))
    if name == "np.float_power" and b.dtype_kw == ", dtype=np.float32":
        # float_power computes in float64 whatever its inputs, and symjac keeps float32:
        # test_fuzz_regressions.py::test_float64_constant_makes_float32_code_compute_in_float64
        name = "np.power"
    tmpl, domain, interval = BINARY[name]
    s0, s1 = b.partner_shapes(shape)
    if domain == "pow":  # {1} is the base (positive), {0} the exponent (bounded)
        x, y = b.value(s0, depth, "b3"), b.value(s1, depth, "pos")
        lo, hi = _pow_interval(x, y)
    else:
        x, y = b.value(s0, depth), b.value(s1, depth, domain)
        lo, hi = interval(x, y)
    return b.emit(tmpl.format(x.src, y.src), shape, lo, hi, name)


COMPARE = ["np.less", "np.less_equal", "np.greater", "np.greater_equal"]


def condition(b: Builder, shape, depth) -> str:
    s0, s1 = b.partner_shapes(shape)
    p, q = b.value(s0, depth), b.value(s1, depth)
    if p.src == q.src:  # x < x ties everywhere; compare against a shifted copy
        q = b.emit(f"({q.src} + 0.5)", q.shape, q.lo + 0.5, q.hi + 0.5, "+")
    cmp = b.pick(COMPARE)
    b.ops.add(cmp)
    text = f"{cmp}({p.src}, {q.src})"
    if b.coin(0.25):
        other = condition(b, shape, max(depth - 1, 0))
        how = b.pick(["np.logical_and({0}, {1})", "np.logical_or({0}, {1})", "np.logical_xor({0}, {1})",
                      "({0} & {1})", "({0} | {1})", "({0} ^ {1})"])
        b.ops.add(how.split("(")[0] or how[5])
        text = how.format(text, other)
    if b.coin(0.15):
        text = b.pick([f"np.logical_not({text})", f"(~{text})"])
        b.ops.add("not")
    if b.coin(0.1):  # always true here (the values are finite), but traced through
        test = b.pick([f"np.isfinite({p.src})", f"~np.isnan({p.src})", f"~np.isinf({q.src})"])
        b.ops.add(test.split("(")[0].lstrip("~"))
        text = f"({text} & {test})"
    return text


def op_where(b: Builder, shape, depth):
    cond = condition(b, b.partner_shapes(shape, 1)[0] if b.coin(0.3) else shape, depth)
    s0, s1 = b.partner_shapes(shape)
    x, y = b.value(s0, depth), b.value(s1, depth)
    return b.emit(f"np.where({cond}, {x.src}, {y.src})", shape, min(x.lo, y.lo), max(x.hi, y.hi), "np.where")


def op_select(b: Builder, shape, depth):
    c1, c2 = condition(b, shape, depth), condition(b, shape, depth)
    x, y, z = b.value(shape, depth), b.value(shape, depth), b.value(shape, depth)
    lo, hi = min(x.lo, y.lo, z.lo), max(x.hi, y.hi, z.hi)
    return b.emit(f"np.select([{c1}, {c2}], [{x.src}, {y.src}], default={z.src})", shape, lo, hi, "np.select")


def op_clip(b: Builder, shape, depth):
    x = b.value(shape, depth)
    lo = round(b.draw(st.floats(-1.5, 1.0)), 2)
    hi = round(lo + b.draw(st.floats(0.3, 2.0)), 2)
    form = b.pick(["both", "lo", "hi"])
    if form == "both":
        return b.emit(f"np.clip({x.src}, {lo}, {hi})", shape, min(max(x.lo, lo), hi), max(min(x.hi, hi), lo), "np.clip")
    if form == "lo":
        return b.emit(f"np.clip({x.src}, {lo}, None)", shape, max(x.lo, lo), max(x.hi, lo), "np.clip")
    return b.emit(f"np.clip({x.src}, None, {hi})", shape, min(x.lo, hi), min(x.hi, hi), "np.clip")


def op_reduce(b: Builder, shape, depth):
    kind = b.pick(["sum", "mean", "prod", "max", "min", "nansum", "nanmean", "average", "nanmax", "nanmin", "ptp",
                   "trapezoid"])
    mode = b.pick(["axis", "none", "keepdims", "tuple"])
    r = len(shape)
    if mode == "none":
        if shape != ():
            return None
        child = b.reshape_source(b.pick([2, 3, 4, 6]))
        axis_text, n = "", int(np.prod(child))
    elif mode == "axis":
        if r >= 3:
            return None
        p, k = b.integer(0, r), b.pick([2, 3])
        child = shape[:p] + (k,) + shape[p:]
        axis_text, n = f", axis={b.pick([p, p - r - 1])}", k
    elif mode == "keepdims":
        ones = [i for i, d in enumerate(shape) if d == 1]
        if not ones:
            return None
        p, k = b.pick(ones), b.pick([2, 3])
        child = shape[:p] + (k,) + shape[p + 1 :]
        axis_text, n = f", axis={p}, keepdims=True", k
    else:
        if r >= 2:
            return None
        k1, k2 = b.pick([2, 3]), b.pick([1, 2])
        child = (k1, k2) + shape if b.coin() else (k1,) + shape + (k2,)
        axes = (0, 1) if child[:2] == (k1, k2) else (0, r + 1)
        axis_text, n = f", axis={axes}", k1 * k2
    if not _dims_ok(child):
        return None
    if kind == "prod" and n > 4 or kind == "trapezoid" and mode != "axis":
        return None
    x = b.value(child, depth)
    if kind == "trapezoid":
        dx = b.pick([1.0, 0.25, 1.5])
        return b.emit(f"np.trapezoid({x.src}, dx={dx}{axis_text})", shape, (n - 1) * dx * x.lo, (n - 1) * dx * x.hi,
                      "np.trapezoid")
    if kind == "average" and b.coin(0.5):
        w = b.value(child, depth, "pos")
        return b.emit(f"np.average({x.src}{axis_text.replace(', keepdims=True', '')}, weights={w.src})"
                      + (f".reshape({shape})" if "keepdims" in axis_text else ""), shape, x.lo, x.hi, "np.average(w)")
    if kind in ("sum", "nansum"):
        lo, hi = n * x.lo, n * x.hi
    elif kind == "prod":
        m = max(1.0, x.mag) ** n
        lo, hi = ((x.lo ** n, x.hi ** n) if x.lo >= 0 else (-m, m))
    elif kind == "ptp":
        lo, hi = 0.0, x.hi - x.lo
    else:
        lo, hi = x.lo, x.hi
    if kind in ("max", "min"):
        text = f"np.{b.pick([kind, 'a' + kind])}({x.src}{axis_text})"
    elif kind in ("nansum", "nanmean", "average", "nanmax", "nanmin", "ptp"):
        text = f"np.{kind}({x.src}{axis_text})"
    else:
        # (prod as a function only: the autograd oracle replaces np.prod, not the method)
        methods = [f"{x.src}.{kind}({axis_text[2:]})"] if kind != "prod" else []
        text = b.pick([f"np.{kind}({x.src}{axis_text})"] + methods)
    return b.emit(text, shape, lo, hi, "np." + kind)


def op_scan(b: Builder, shape, depth):
    kind = b.pick(["cumsum", "cumprod", "diff"])
    r = len(shape)
    if r == 0:
        return None
    if kind == "diff":
        ax, k = b.integer(0, r - 1), b.pick([1, 2])
        child = shape[:ax] + (shape[ax] + k,) + shape[ax + 1 :]
        if not _dims_ok(child):
            return None
        x = b.value(child, depth)
        w = (x.hi - x.lo) * 2 ** (k - 1)
        return b.emit(f"np.diff({x.src}, n={k}, axis={ax})" if k > 1 or ax != r - 1 else f"np.diff({x.src})",
                      shape, -w, w, "np.diff")
    if r == 1 and shape[0] <= 6 and b.coin(0.4):
        child, axis_text, n = b.reshape_source(shape[0]), "", shape[0]
    else:
        ax = b.integer(0, r - 1)
        child, axis_text, n = shape, f", axis={ax}", shape[ax]
    if kind == "cumprod" and n > 4:
        return None
    x = b.value(child, depth)
    if kind == "cumsum":
        lo, hi = min(x.lo, n * x.lo), max(x.hi, n * x.hi)
    else:
        m = max(1.0, x.mag) ** n
        lo, hi = -m, m
    return b.emit(f"np.{kind}({x.src}{axis_text})", shape, lo, hi, "np." + kind)


def op_matrix_reduce(b: Builder, shape, depth):
    kind = b.pick(["trace", "norm", "norm-axis", "norm1", "norminf"])
    if kind == "norm-axis":
        if len(shape) != 1:
            return None
        k = b.pick([2, 3])
        x = b.value(shape + (k,), depth)
        return b.emit(f"np.linalg.norm({x.src}, axis=-1)", shape, 0.0, math.sqrt(k) * x.mag, "np.linalg.norm")
    if shape != ():
        return None
    if kind == "trace":
        n, m = b.pick([2, 3]), b.pick([2, 3])
        x = b.value((n, m), depth)
        k = min(n, m)
        return b.emit(f"np.trace({x.src})", (), k * x.lo, k * x.hi, "np.trace")
    child = b.pick([(3,), (2,), (4,)] + ([(2, 3), (2, 2)] if kind == "norm" else []))
    x = b.value(child, depth)
    n = int(np.prod(child))
    if kind == "norm":
        return b.emit(f"np.linalg.norm({x.src})", (), 0.0, math.sqrt(n) * x.mag, "np.linalg.norm")
    ord_ = "1" if kind == "norm1" else "np.inf"
    return b.emit(f"np.linalg.norm({x.src}, {ord_})", (), 0.0, n * x.mag, "np.linalg.norm(ord)")


def op_linalg(b: Builder, shape, depth):
    """det / inv / solve of a well-conditioned matrix 2 I + 0.3 tanh(X) (Gershgorin: its
    eigenvalues have real parts of at least 2 - 0.3 (n - 1) > 0)."""
    kind = b.pick(["det", "inv", "solve"])
    r = len(shape)
    if kind == "det":
        if r != 0:
            return None
        n = b.pick([2, 3, 1])
    elif kind == "inv":
        if r != 2 or shape[0] != shape[1] or shape[0] > 3:
            return None
        n = shape[0]
    else:
        if r not in (1, 2) or shape[0] > 3:
            return None
        n = shape[0]
    x = b.value((n, n), depth)
    m = b.emit(f"(2.0 * np.eye({n}) + 0.3 * np.tanh({x.src}))", (n, n), -2.3, 2.3, "linalg-matrix")
    low, high = 2.0 - 0.3 * (n - 1), 2.3 + 0.3 * (n - 1)
    if kind == "det":
        return b.emit(f"np.linalg.det({m.src})", (), 0.0, high ** n, "np.linalg.det")
    bound = n / low
    if kind == "inv":
        return b.emit(f"np.linalg.inv({m.src})", shape, -bound, bound, "np.linalg.inv")
    rhs = b.value(shape, depth)
    return b.emit(f"np.linalg.solve({m.src}, {rhs.src})", shape, -bound * rhs.mag, bound * rhs.mag,
                  "np.linalg.solve")


def _contract(x: Val, y: Val, k: int) -> tuple[float, float]:
    lo, hi = _prod_interval(x, y)
    return k * min(lo, 0.0), k * max(hi, 0.0)


def op_contract(b: Builder, shape, depth):
    kind = b.pick(["@", "np.matmul", "np.dot", "np.vdot", "np.inner", "np.outer", "np.tensordot",
                   "np.einsum", "np.cross", "np.kron"])
    r, k = len(shape), b.pick([2, 3, 1])
    if kind in ("@", "np.matmul"):
        if r == 0:
            sa, sb = (k,), (k,)
        elif r == 1:
            sa, sb = ((shape[0], k), (k,)) if b.coin() else ((k,), (k, shape[0]))
        elif r == 2:
            sa, sb = (shape[0], k), (k, shape[1])
        else:
            sa, sb = b.pick([((shape[0], shape[1], k), (k, shape[2])),
                             ((shape[0], shape[1], k), (shape[0], k, shape[2])),
                             ((shape[1], k), (shape[0], k, shape[2]))])
        tmpl = "({0} @ {1})" if kind == "@" else "np.matmul({0}, {1})"
    elif kind == "np.dot":
        if r == 0:
            sa, sb = (k,), (k,)
        elif r == 1:
            sa, sb = (shape[0], k), (k,)
        elif r == 2:
            sa, sb = b.pick([((shape[0], k), (k, shape[1])), ((), shape)])
        else:
            return None
        tmpl = "np.dot({0}, {1})"  # (not the .dot method: autograd's ArrayBox has none)
    elif kind == "np.vdot":
        if r != 0:
            return None
        sa = sb = b.pick([(3,), (2, 2), (2, 3)])
        k = int(np.prod(sa))
        tmpl = "np.vdot({0}, {1})"
    elif kind == "np.inner":
        if r == 0:
            sa, sb = (k,), (k,)
        elif r == 2:
            sa, sb = (shape[0], k), (shape[1], k)
        else:
            return None
        tmpl = "np.inner({0}, {1})"
    elif kind == "np.outer":
        if r != 2:
            return None
        sa, sb = b.reshape_source(shape[0]), b.reshape_source(shape[1])
        k, tmpl = 1, "np.outer({0}, {1})"
    elif kind == "np.tensordot":
        if r == 0:
            sa = sb = b.pick([(2, 2), (2, 3)])
            k, tmpl = int(np.prod(sa)), "np.tensordot({0}, {1}, axes=2)"
        elif r == 2:
            sa, sb = (shape[0], k), (k, shape[1])
            tmpl = b.pick(["np.tensordot({0}, {1}, axes=1)", "np.tensordot({0}, {1}, axes=([1], [0]))"])
        else:
            return None
    elif kind == "np.einsum":
        patterns = {
            0: [("i,i->", (k,), (k,)), ("ij,ij", (2, k), (2, k)), ("ii", (k, k), None), ("ij->", (2, k), None)],
            1: [("ij,j->i", (shape[0], k), (k,)) if r == 1 else None,
                ("ij,ij->i", (shape[0], k), (shape[0], k)) if r == 1 else None,
                ("ji->i", (k, shape[0]), None) if r == 1 else None],
            2: [("ij,jk->ik", (shape[0], k), (k, shape[1])) if r == 2 else None,
                ("i,j->ij", (shape[0],), (shape[1],)) if r == 2 else None,
                ("ij->ji", (shape[1], shape[0]), None) if r == 2 else None,
                ("...i,i->...", shape + (k,), (k,)) if r == 2 else None],
            3: [("bij,bjk->bik", (shape[0], shape[1], k), (shape[0], k, shape[2])) if r == 3 else None],
        }
        options = [p for p in patterns[r] if p is not None]
        spec, sa, sb = b.pick(options)
        k = int(np.prod(sa))
        if sb is None:
            x = b.value(sa, depth)
            return b.emit(f"np.einsum({spec!r}, {x.src})", shape, k * min(x.lo, 0), k * max(x.hi, 0), "np.einsum")
        tmpl = f"np.einsum({spec!r}, {{0}}, {{1}})"
    elif kind == "np.kron":
        if r == 0 or r > 2:
            return None
        split = [b.pick([d for d in (1, 2, 3) if n % d == 0]) for n in shape]
        sa, sb = tuple(split), tuple(n // d for n, d in zip(shape, split, strict=True))
        k, tmpl = 1, "np.kron({0}, {1})"
    else:  # cross
        if not shape or shape[-1] != 3:
            return None
        sa, sb = shape, b.pick([shape, (3,)])
        if b.coin():
            sa, sb = sb, sa
        k, tmpl = 2, "np.cross({0}, {1})"
    if not (_dims_ok(sa) and _dims_ok(sb)):
        return None
    x, y = b.value(sa, depth), b.value(sb, depth)
    lo, hi = _contract(x, y, k)
    return b.emit(tmpl.format(x.src, y.src), shape, lo, hi, kind)


def _slice_for(b: Builder, want: int):
    """(source length, slice text) with ``len(range(n)[slice]) == want``."""
    kind = b.pick(["offset", "reverse", "step2", "neg"])
    if kind == "offset":
        s = b.integer(0, 2)
        return want + s + b.integer(0, 1), f"{s}:{s + want}"
    if kind == "reverse":
        return want, "::-1"
    if kind == "step2":
        return 2 * want - 1 + b.integer(0, 1), "::2"
    return want + 1, f"-{want}:"


def op_structure(b: Builder, shape, depth):
    kind = b.pick(["transpose", "reshape", "ravel", "squeeze", "expand", "swapaxes", "moveaxis",
                   "broadcast_to", "atleast", "flip", "roll", "tile", "repeat", "take", "diag",
                   "getitem", "slice", "fancy", "copy", "tril", "pad"])
    r = len(shape)
    src_shape, tmpl = None, None
    if kind == "transpose" and r >= 2:
        perm = b.pick(_perms(r))
        # np.transpose(x, perm).shape[i] == x.shape[perm[i]]
        src = [0] * r
        for i in range(r):
            src[perm[i]] = shape[i]
        src_shape = tuple(src)
        rev = perm == tuple(range(r))[::-1]
        tmpl = b.pick([f"np.transpose({{0}}, {perm})"] + (["{0}.T", "np.transpose({0})"] if rev else []))
    elif kind == "reshape":
        src_shape = b.reshape_source(int(np.prod(shape))) if shape else b.pick([(1,), (1, 1)])
        tmpl = b.pick([f"np.reshape({{0}}, {shape})"] + ([f"{{0}}.reshape({shape})"] if src_shape else []))
    elif kind == "ravel" and r == 1:
        src_shape = b.reshape_source(shape[0])
        tmpl = b.pick(["np.ravel({0})"] + (["{0}.ravel()"] if src_shape else []))
    elif kind == "squeeze" and r < 3:
        p = b.integer(0, r)
        src_shape = shape[:p] + (1,) + shape[p:]
        tmpl = f"np.squeeze({{0}}, axis={p})" if 1 in shape else b.pick(["np.squeeze({0})", "{0}.squeeze()"])
    elif kind == "expand" and 1 in shape:
        p = b.pick([i for i, d in enumerate(shape) if d == 1])
        src_shape = shape[:p] + shape[p + 1 :]
        index = ", ".join([":"] * p + ["None"])
        # (no x[None] of a 0-d value: symjac cannot index 0-d traced arrays,
        # test_fuzz_regressions.py::test_0d_traced_value_can_be_indexed)
        tmpl = b.pick([f"np.expand_dims({{0}}, {p})"] + ([f"{{0}}[{index}]"] if src_shape else []))
    elif kind == "swapaxes" and r >= 2:
        i, j = b.integer(0, r - 1), b.integer(0, r - 1)
        s = list(shape)
        s[i], s[j] = s[j], s[i]
        src_shape = tuple(s)
        tmpl = b.pick([f"np.swapaxes({{0}}, {i}, {j})", f"{{0}}.swapaxes({i}, {j})"])
    elif kind == "moveaxis" and r >= 2:
        i, j = b.integer(0, r - 1), b.integer(0, r - 1)
        s = list(shape)
        d = s.pop(j)
        s.insert(i, d)
        src_shape = tuple(s)
        tmpl = f"np.moveaxis({{0}}, {i}, {j})"
    elif kind == "broadcast_to" and r >= 1:
        (src_shape,) = b.partner_shapes(shape, 1)
        if src_shape == shape:
            src_shape = tuple(1 if i == 0 else d for i, d in enumerate(shape))
        tmpl = f"np.broadcast_to({{0}}, {shape})"
    elif kind == "atleast":
        if shape == (1,):
            src_shape, tmpl = (), "np.atleast_1d({0})"
        elif r == 2 and shape[0] == 1:
            src_shape, tmpl = (shape[1],), "np.atleast_2d({0})"
        elif r >= 1:
            src_shape, tmpl = shape, b.pick(["np.atleast_1d({0})", "np.atleast_2d({0})"] if r >= 2 else ["np.atleast_1d({0})"])
    elif kind == "flip" and r >= 1:
        src_shape = shape
        options = ["np.flip({0})", f"np.flip({{0}}, axis={b.integer(0, r - 1)})", "np.flipud({0})"]
        tmpl = b.pick(options + (["np.fliplr({0})"] if r >= 2 else []))
    elif kind == "roll" and r >= 1:
        src_shape = shape
        shift = b.pick([1, -1, 2])
        tmpl = b.pick([f"np.roll({{0}}, {shift})", f"np.roll({{0}}, {shift}, axis={b.integer(0, r - 1)})"])
    elif kind == "tile" and r == 1 and shape[0] % 2 == 0:
        src_shape, tmpl = (shape[0] // 2,), "np.tile({0}, 2)"
    elif kind == "repeat" and r >= 1 and shape[0] % 2 == 0:
        if r == 1 and b.coin():
            src_shape, tmpl = b.reshape_source(shape[0] // 2), "np.repeat({0}, 2)"
        else:
            src_shape, tmpl = (shape[0] // 2,) + shape[1:], "np.repeat({0}, 2, axis=0)"
    elif kind == "take" and r >= 1:
        n = b.pick([2, 3])
        idx = [b.integer(-n, n - 1) for _ in range(shape[0])]
        src_shape = (n,) + shape[1:]
        tmpl = b.pick([f"np.take({{0}}, {idx}, axis=0)", f"{{0}}[{idx}]"])
    elif kind == "diag" and r in (1, 2):
        if r == 1:
            n = shape[0]
            src_shape, tmpl = b.pick([((n, n), "np.diag({0})"), ((n, n + 1), "np.diagonal({0})"),
                                      ((n + 1, n), "np.diag({0}, k=-1)")])
        elif shape[0] == shape[1]:
            src_shape, tmpl = (shape[0],), "np.diag({0})"
    elif kind == "getitem" and r < 3:
        n = b.pick([2, 3])
        i = b.integer(-n, n - 1)
        if b.coin():
            src_shape, tmpl = (n,) + shape, f"{{0}}[{i}]"
        else:
            src_shape, tmpl = shape + (n,), f"{{0}}[..., {i}]"
    elif kind == "slice" and r >= 1:
        ax = b.integer(0, r - 1)
        n, text = _slice_for(b, shape[ax])
        src_shape = shape[:ax] + (n,) + shape[ax + 1 :]
        tmpl = "{0}[" + ", ".join([":"] * ax + [text]) + "]"
    elif kind == "fancy" and r == 2:
        n = b.pick([2, 3])
        rows = [b.integer(0, n - 1) for _ in range(shape[0])]
        src_shape, tmpl = (n, shape[1]), f"{{0}}[{rows}, :]"
    elif kind == "copy":
        src_shape, tmpl = shape, "np.copy({0})"
    elif kind == "tril" and r >= 2:
        src_shape, tmpl = shape, f"np.{b.pick(['tril', 'triu'])}({{0}}, {b.integer(-1, 1)})"
    elif kind == "pad" and r == 1 and shape[0] >= 2:
        before = b.integer(0, 1)
        after = b.integer(1 - before, min(1, shape[0] - 1 - before))
        mode = b.pick(["constant", "edge", "wrap", "reflect", "symmetric"])
        src_shape = (shape[0] - before - after,)
        tmpl = f"np.pad({{0}}, ({before}, {after}), mode={mode!r})"
    if src_shape is None or not _dims_ok(src_shape):
        return None
    x = b.value(tuple(src_shape), depth)
    lo, hi = (min(x.lo, 0.0), max(x.hi, 0.0)) if kind in ("tril", "pad") else (x.lo, x.hi)
    return b.emit(tmpl.format(x.src), shape, lo, hi, "struct-" + kind)


def _perms(r: int):
    import itertools

    return [p for p in itertools.permutations(range(r)) if p != tuple(range(r))]


def op_join(b: Builder, shape, depth):
    kind = b.pick(["concatenate", "stack", "hstack", "vstack", "column_stack"])
    r = len(shape)
    if r == 0:
        return None
    if kind == "stack":
        ax = b.integer(0, r - 1)
        if shape[ax] > 3:
            return None
        part = shape[:ax] + shape[ax + 1 :]
        parts = [b.value(part, depth) for _ in range(shape[ax])]
        text = f"np.stack([{', '.join(p.src for p in parts)}], axis={ax})"
    elif kind == "column_stack":
        if r != 2 or shape[1] > 3:
            return None
        parts = [b.value((shape[0],), depth) for _ in range(shape[1])]
        text = f"np.column_stack([{', '.join(p.src for p in parts)}])"
    else:
        ax = {"hstack": 1 if r >= 2 else 0, "vstack": 0}.get(kind, b.integer(0, r - 1))
        if kind == "vstack" and r < 2:
            return None
        n = shape[ax]
        if n < 2:
            return None
        cut = b.integer(1, n - 1)
        parts = [b.value(shape[:ax] + (m,) + shape[ax + 1 :], depth) for m in (cut, n - cut)]
        if kind == "concatenate":
            text = f"np.concatenate([{parts[0].src}, {parts[1].src}], axis={ax})"
        else:
            text = f"np.{kind}([{parts[0].src}, {parts[1].src}])"
    return b.emit(text, shape, min(p.lo for p in parts), max(p.hi for p in parts), "np." + kind)


def op_assign(b: Builder, shape, depth):
    """Build into an assignable array: np.zeros_like(...) or a copy, then put a slice."""
    r = len(shape)
    if r == 0:
        return None
    ax = b.integer(0, r - 1)
    n = shape[ax]
    start = b.integer(0, n - 1)
    stop = b.integer(start + 1, n)
    tuple([slice(None)] * ax + [slice(start, stop)])
    part = shape[:ax] + (stop - start,) + shape[ax + 1 :]
    (vshape,) = b.partner_shapes(part, 1)
    v = b.value(vshape, depth)
    base_kind = b.pick(["zeros_like", "copy", "ones_like", "full_like"])
    like = b.value(shape, depth)
    if v.src in b.traced and like.src not in b.traced:
        return None  # a traced value cannot be stored into a concrete array (a documented error)
    base = {"zeros_like": f"np.zeros_like({like.src})", "copy": f"{like.src}",
            "ones_like": f"np.ones_like({like.src})", "full_like": f"np.full_like({like.src}, 0.5)"}[base_kind]
    lo = min(v.lo, like.lo if base_kind == "copy" else 0.0)
    hi = max(v.hi, like.hi if base_kind == "copy" else 1.0)
    index_text = "np.s_[" + ", ".join([":"] * ax + [f"{start}:{stop}"]) + "]"
    return b.emit(f"put({base}, {index_text}, {v.src})", shape, lo, hi, "put-" + base_kind)


def op_query(b: Builder, shape, depth):
    x = b.value(shape, depth)
    q = b.pick([f"np.size({x.src})", f"np.shape({x.src})[0]" if shape else f"np.size({x.src})", f"np.ndim({x.src})"])
    v = b.value(shape, depth) if b.coin() else x
    return b.emit(f"({v.src} * {q} / 4.0)", shape, min(0.0, 6 * v.lo), max(0.0, 6 * v.hi), "query",
                  traced=v.src in b.traced)  # np.size(x) etc. are concrete


# the menu, simplest first (Hypothesis shrinks towards the start of the list)
OPS = [op_unary, op_binary, op_unary, op_binary, op_reduce, op_where, op_contract, op_structure, op_structure,
       op_clip, op_scan, op_join, op_matrix_reduce, op_select, op_assign, op_query, op_linalg]


@st.composite
def programs(draw, max_depth: int = 4, max_out_size: int = 12, const_dtype: str = "", specials: bool = False):
    """A random :class:`Program` (constant arrays of ``const_dtype``, default float64;
    with ``specials``, constants may be IEEE special values)."""
    b = Builder(draw, const_dtype=const_dtype, specials=specials)
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.sampled_from([2, 3, 1])) for _ in range(rank))
    while int(np.prod(shape)) > max_out_size:
        shape = shape[1:]
    # Hypothesis favours (and shrinks towards) small integers: count down from the
    # deepest; shrinking still simplifies programs by turning operations into leaves
    depth = max_depth if draw(st.integers(0, 9)) < 7 else max_depth - draw(st.integers(0, max_depth - 1))
    outs = [b.expr(shape, depth, root=True)]
    if draw(st.integers(0, 9)) == 0:  # sometimes a tuple of outputs
        outs.append(b.expr(tuple(draw(st.sampled_from([(), (2,), (3,)]))), max(depth - 1, 0)))
    if not b.params:
        x = b.leaf(shape)
        outs[0] = b.emit(f"({outs[0].src} + {x.src})", shape, outs[0].lo + x.lo, outs[0].hi + x.hi, "+")
    return Program(b.params, b.shapes, b.lines, outs, b.ops)
