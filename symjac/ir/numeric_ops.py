"""Operation records for rounding, remainders and special functions.

These node types are records like those in ``ops.py`` (which appends them to
``RECORDS``); they live here to keep that file readable.  Each ``emit``
follows the algorithm of the NumPy or SciPy function it stands for where that
algorithm is simple (``rint``, ``trunc``, ``fmod``, ``copysign``, ``sinc``,
``expit``, ``logit``, ``log_expit``, ``xlogy``, ``xlog1py``: the same
operations in the same order, so values agree bit for bit); ``cbrt``, ``erf``,
``erfc`` and ``gammaln`` call the C library (glibc), whose results may differ
from SciPy's own implementations in the last bits.  ``digamma`` and
``trigamma`` exist for the derivatives of ``gammaln``: shifted asymptotic
series, accurate to a few ulps for positive arguments.

Derivatives are JAX's: zero for ``rint``/``trunc``/``floor_divide``;
``fmod`` and ``remainder`` are ``1`` in ``a`` (at exact multiples of ``b``
too) and ``-trunc(a / b)`` / ``-(a // b)`` in ``b``; ``xlogy``'s is
``log(y)`` in ``x`` even at ``x = 0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sympy as sp
from sympy.codegen.cfunctions import log1p

from .._errors import UnsupportedOperationError
from . import graph as g
from .record import ZERO, Call, Emitter, Helper, NumpyFunction, Op, PartialList, Partials, Value

# ----- heads ---------------------------------------------------------------------------------------


def _head(name: str, nargs: int, fold: Callable[..., Any]) -> type[NumpyFunction]:
    """A SymPy head printing as ``name(...)`` whose numbers fold with ``fold``."""
    head = type(name, (NumpyFunction,), {"nargs": nargs, "numpy": staticmethod(fold), "__module__": __name__})
    assert issubclass(head, NumpyFunction)  # (what type() made: tells the type checker)
    return head


def _quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        with np.errstate(all="ignore"):
            return fn(*args)

    return call


# ----- references on scalars (the ``fold`` of each record) --------------------------------------------


def _lgamma(x: float) -> float:
    if x == -math.inf:
        return -math.inf  # SciPy's gammaln; the C library gives +inf
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):  # a pole (0, a negative integer) or too large
        return math.inf


def _expit(x: Any) -> Any:
    return 1 / (1 + np.exp(-x))


def _log_expit(x: Any) -> Any:
    return x - np.log1p(np.exp(x)) if x < 0 else -np.log1p(np.exp(-x))


def _logit(x: Any) -> Any:
    if x < 0.3 or x > 0.65:
        return np.log(x / (1 - x))
    s = 2 * (x - type(x)(0.5))
    return np.log1p(s) - np.log1p(-s)


def _xlogy(x: Any, y: Any) -> Any:
    return type(x)(0.0) if x == 0 and not np.isnan(y) else x * np.log(y)


def _xlog1py(x: Any, y: Any) -> Any:
    return type(x)(0.0) if x == 0 and not np.isnan(y) else x * np.log1p(y)


# ----- digamma and trigamma: x + 10 by recurrence, then asymptotic series ---------------------------

_SHIFT = 10
#: psi(y) ~ log y - 1/(2y) - sum B_2k / (2k y^2k): the coefficients B_2k / 2k
_PSI = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)
#: psi1(y) ~ 1/y + 1/(2y^2) + sum B_2k / y^(2k+1): the coefficients B_2k
_PSI1 = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)


class _Float:
    """The emitter helper over Python floats (NumPy scalars): the series' reference."""

    def __init__(self, dtype: type[np.floating]):
        self.t = dtype

    def const(self, v: float) -> np.floating:
        return self.t(v)

    def add(self, a: Any, b: Any) -> Any:
        return a + b

    def sub(self, a: Any, b: Any) -> Any:
        return a - b

    def mul(self, a: Any, b: Any) -> Any:
        return a * b

    def div(self, a: Any, b: Any) -> Any:
        return a / b

    def neg(self, a: Any) -> Any:
        return -a

    def call(self, name: str, *args: Any) -> np.floating:
        return self.t({"log": np.log, "tan": np.tan, "sin": np.sin}[name](*args))

    def intrinsic(self, name: str, *args: Any) -> np.floating:
        return self.t({"floor": np.floor}[name](*args))

    def cmp(self, symbol: str, a: Any, b: Any) -> Any:
        return {"<": a < b, "==": a == b, "!=": a != b}[symbol]

    def select(self, c: Any, a: Any, b: Any) -> Any:
        return a if c else b

    def and_(self, p: Any, q: Any) -> Any:
        return p and q


def _horner(e: Emitter | _Float, z: Value, coefficients: Sequence[float]) -> Value:
    acc = e.const(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = e.add(e.const(c), e.mul(z, acc))
    return acc


def _shifted(e: Emitter | _Float, x: Value) -> tuple[Value, Value, Value]:
    """(t, y, negative): t = x, or 1 - x for x < 0 (the reflection), and y = t + 10."""
    negative = e.cmp("<", x, e.const(0.0))
    t = e.select(negative, e.sub(e.const(1.0), x), x)
    return t, e.add(t, e.const(float(_SHIFT))), negative


def _pole(e: Emitter | _Float, x: Value, negative: Value, value: Value) -> Value:
    """NaN at negative integers and -inf (SciPy's digamma)."""
    at_pole = e.and_(negative, e.cmp("==", e.intrinsic("floor", x), x))
    return e.select(at_pole, e.const(math.nan), value)


def _digamma(e: Emitter | _Float, x: Value) -> Value:
    t, y, negative = _shifted(e, x)
    total = e.div(e.const(1.0), t)
    for k in range(1, _SHIFT):
        total = e.add(total, e.div(e.const(1.0), e.add(t, e.const(float(k)))))
    z = e.div(e.const(1.0), e.mul(y, y))
    series = e.sub(e.sub(e.call("log", y), e.div(e.const(0.5), y)), e.mul(z, _horner(e, z, _PSI)))
    value = e.sub(series, total)
    reflected = e.sub(value, e.div(e.const(math.pi), e.call("tan", e.mul(e.const(math.pi), x))))
    return _pole(e, x, negative, e.select(negative, reflected, value))


def _trigamma(e: Emitter | _Float, x: Value) -> Value:
    t, y, negative = _shifted(e, x)
    total = e.const(0.0)
    for k in range(_SHIFT):
        u = e.add(t, e.const(float(k)))
        total = e.add(total, e.div(e.const(1.0), e.mul(u, u)))
    z = e.div(e.const(1.0), e.mul(y, y))
    inv = e.div(e.const(1.0), y)
    series = e.add(e.add(inv, e.mul(e.const(0.5), e.mul(inv, inv))), e.mul(inv, e.mul(z, _horner(e, z, _PSI1))))
    value = e.add(series, total)
    s = e.call("sin", e.mul(e.const(math.pi), x))
    reflected = e.sub(e.div(e.const(math.pi * math.pi), e.mul(s, s)), value)
    at_pole = e.and_(negative, e.cmp("==", e.intrinsic("floor", x), x))
    return e.select(at_pole, e.const(math.inf), e.select(negative, reflected, value))


def _series_fold(emit: Callable[[_Float, Value], Value]) -> Callable[[Any], Any]:
    def fold(x: Any) -> Any:  # the emitter itself, run on NumPy scalars
        dtype = type(x) if isinstance(x, np.floating) else np.float64
        with np.errstate(all="ignore"):
            return emit(_Float(dtype), dtype(x))

    return fold


# ----- emitters ----------------------------------------------------------------------------------------


def _sinc(e: Emitter, x: Value) -> Value:  # NumPy: y = pi * where(x == 0, 1e-20, x); sin(y) / y
    y = e.mul(e.const(math.pi), e.select(e.cmp("==", x, e.const(0.0)), e.const(1e-20), x))
    return e.div(e.call("sin", y), y)


def _expit_emit(e: Emitter, x: Value) -> Value:  # SciPy: 1 / (1 + exp(-x))
    return e.div(e.const(1.0), e.add(e.const(1.0), e.call("exp", e.neg(x))))


def _log_expit_emit(e: Emitter, x: Value) -> Value:  # SciPy: x - log1p(exp(x)) below 0, else -log1p(exp(-x))
    below = e.sub(x, e.call("log1p", e.call("exp", x)))
    above = e.neg(e.call("log1p", e.call("exp", e.neg(x))))
    return e.select(e.cmp("<", x, e.const(0.0)), below, above)


def _logit_emit(e: Emitter, x: Value) -> Value:  # SciPy: log(x / (1 - x)) away from 1/2, log1p(s) - log1p(-s) near it
    plain = e.call("log", e.div(x, e.sub(e.const(1.0), x)))
    s = e.mul(e.const(2.0), e.sub(x, e.const(0.5)))
    near = e.sub(e.call("log1p", s), e.call("log1p", e.neg(s)))
    away = e.or_(e.cmp("<", x, e.const(0.3)), e.cmp(">", x, e.const(0.65)))
    return e.select(away, plain, near)


def _xlog(function: str) -> Callable[[Emitter, Value, Value], Value]:
    def emit(e: Emitter, x: Value, y: Value) -> Value:  # SciPy: 0 where x == 0 (unless y is NaN), else x * log(y)
        zero = e.and_(e.cmp("==", x, e.const(0.0)), e.not_(e.isnan(y)))
        return e.select(zero, e.const(0.0), e.mul(x, e.call(function, y)))

    return emit


def _npy_divmod(e: Emitter, a: Value, b: Value) -> tuple[Value, Value]:
    """NumPy's npy_divmod (with npy_remainder's and npy_floor_divide's b == 0 cases):
    (floor_divide, remainder)."""
    zero = e.const(0.0)
    mod = e.call("fmod", a, b)
    b_zero = e.cmp("==", b, zero)  # (false for NaN, as C's !b)
    nonzero = e.truth(mod)  # (true for NaN, as C's if (mod))
    flip = e.and_(nonzero, e.xor(e.cmp("<", b, zero), e.cmp("<", mod, zero)))
    rem = e.select(flip, e.add(mod, b), e.select(nonzero, mod, e.call("copysign", zero, b)))
    div = e.div(e.sub(a, mod), b)
    div = e.select(flip, e.sub(div, e.const(1.0)), div)
    fl = e.intrinsic("floor", div)
    snapped = e.select(e.cmp(">", e.sub(div, fl), e.const(0.5)), e.add(fl, e.const(1.0)), fl)
    quotient = e.div(a, b)
    floor_div = e.select(e.truth(div), snapped, e.call("copysign", zero, quotient))
    return e.select(b_zero, quotient, floor_div), e.select(b_zero, mod, rem)


def _lgamma_emit(e: Emitter, x: Value) -> Value:
    return e.select(e.cmp("==", x, e.const(-math.inf)), x, e.call("lgamma", x))


# ----- heads and derivatives -------------------------------------------------------------------------

rint = _head("rint", 1, np.rint)
trunc = _head("trunc", 1, np.trunc)
fmod = _head("fmod", 2, _quiet(np.fmod))
copysign = _head("copysign", 2, np.copysign)
remainder = _head("remainder", 2, _quiet(np.remainder))
floor_divide = _head("floor_divide", 2, _quiet(np.floor_divide))
cbrt = _head("cbrt", 1, np.cbrt)
sinc = _head("sinc", 1, _quiet(np.sinc))
gammaln = _head("gammaln", 1, _lgamma)
digamma = _head("digamma", 1, _series_fold(_digamma))
trigamma = _head("trigamma", 1, _series_fold(_trigamma))
expit = _head("expit", 1, _quiet(_expit))
log_expit = _head("log_expit", 1, _quiet(_log_expit))
logit = _head("logit", 1, _quiet(_logit))
xlogy = _head("xlogy", 2, _quiet(_xlogy))
softplus = _head("softplus", 1, _quiet(lambda a: np.log1p(np.exp(a))))


def log1p_node(a: sp.Basic) -> sp.Basic:
    """``log1p(a)``, or ``softplus(y)`` when ``a`` is ``exp(y)``: NumPy's value either way,
    but the derivative of softplus is expit(y), finite where exp(y) overflows."""
    if a.func is sp.exp:
        return g.call(softplus, a.args[0])
    return g.call(log1p, a)
xlog1py = _head("xlog1py", 2, _quiet(_xlog1py))

_THREE = sp.Integer(3)
_PI = sp.Float(math.pi)
#: sinc'(x) = sum_n>=1 (-1)^n 2n pi^2n x^(2n-1) / (2n+1)!  (used for |x| < 0.05)
_SINC_TAYLOR = [sp.Float((-1) ** n * 2 * n * math.pi ** (2 * n) / math.factorial(2 * n + 1)) for n in range(1, 8)]
_SINC_SMALL = sp.Float(0.05)


def sinc_node(x: sp.Basic) -> sp.Basic:
    """NumPy's sinc of a scalar node."""
    return g.call(sinc, x)


def _sinc_partial(node: sp.Basic) -> PartialList:
    # (cos(pi x) - sinc(x)) / x cancels catastrophically near 0: a Taylor polynomial there
    x = node.args[0]
    taylor = g.add(*(g.mul(c, g.pow_(x, sp.Integer(2 * n + 1))) for n, c in enumerate(_SINC_TAYLOR)))
    direct = g.div(g.sub(g.call(sp.cos, g.mul(_PI, x)), node), x)
    return [(x, g.select([(taylor, g.compare(sp.StrictLessThan, g.call(sp.Abs, x), _SINC_SMALL)),
                          (direct, g.TRUE)]))]


def _no_third_derivative(node: sp.Basic) -> PartialList:
    raise UnsupportedOperationError(
        "symjac differentiates gammaln twice (digamma, then trigamma); a third derivative of "
        "gammaln (a Hessian of its gradient, ...) is not available."
    )


def _fmod_partials(node: sp.Basic) -> PartialList:
    a, b = node.args
    return [(a, g.ONE), (b, g.neg(g.call(trunc, g.div(a, b))))]


def _copysign_partials(node: sp.Basic) -> PartialList:
    a, b = node.args
    return [(a, g.mul(g.call(copysign, g.ONE, a), g.call(copysign, g.ONE, b))), (b, g.ZERO)]


RECORDS: tuple[Op, ...] = (
    # ----- rounding and remainders -----
    Op("rint", 1, "round half to even (Python's round()); derivative 0", lambda e, a: e.call("rint", a),
       Call("rint"), np.rint, rint, (np.rint,), derivative=ZERO),
    Op("trunc", 1, "round toward zero; derivative 0", lambda e, a: e.call("trunc", a), Call("trunc"), np.trunc,
       trunc, (np.trunc, np.fix), derivative=ZERO),
    Op("fmod", 2, "C's fmod (the sign of a); derivative 1 in a, -trunc(a / b) in b",
       lambda e, a, b: e.call("fmod", a, b), Call("fmod"), _quiet(np.fmod), fmod, (np.fmod,), blows_up=True,
       derivative=Partials(_fmod_partials)),
    Op("remainder", 2, "a % b with the sign of b (NumPy's npy_divmod); derivative 1 in a, -(a // b) in b",
       lambda e, a, b: _npy_divmod(e, a, b)[1], Call("remainder"), _quiet(np.remainder), remainder,
       (np.remainder,), blows_up=True,
       derivative=Partials(lambda n: [(n.args[0], g.ONE), (n.args[1], g.neg(g.call(floor_divide, *n.args)))])),
    Op("floor_divide", 2, "a // b (NumPy's npy_divmod); derivative 0", lambda e, a, b: _npy_divmod(e, a, b)[0],
       Call("floor_divide"), _quiet(np.floor_divide), floor_divide, (np.floor_divide,), blows_up=True,
       derivative=ZERO),
    Op("copysign", 2, "|a| with the sign of b; derivative sign(a) sign(b) in a, 0 in b",
       lambda e, a, b: e.call("copysign", a, b), Call("copysign"), np.copysign, copysign, (np.copysign,),
       derivative=Partials(_copysign_partials)),
    # ----- powers and special functions -----
    Op("cbrt", 1, "cube root (the C library's); derivative 1 / (3 cbrt(a)^2)", lambda e, a: e.call("cbrt", a),
       Call("cbrt"), np.cbrt, cbrt, (np.cbrt,), blows_up=False,
       derivative=Partials(lambda n: [(n.args[0], g.pow_(g.mul(_THREE, g.pow_(n, sp.Integer(2))), g.NEG_ONE))])),
    Op("sinc", 1, "sin(pi a) / (pi a), NumPy's algorithm; its derivative is a Taylor polynomial near 0",
       _sinc, Call("sinc"), _quiet(np.sinc), sinc, derivative=Partials(_sinc_partial)),
    Op("erf", 1, "error function (the C library's)", lambda e, a: e.call("erf", a),
       Helper("erf", "a", "import math; return math.erf(a)"), math.erf, sp.erf),
    Op("erfc", 1, "complementary error function 1 - erf(a) (the C library's)", lambda e, a: e.call("erfc", a),
       Helper("erfc", "a", "import math; return math.erfc(a)"), math.erfc, sp.erfc),
    Op("gammaln", 1, "log |Gamma(a)| (the C library's lgamma; -inf at -inf, as SciPy)", _lgamma_emit,
       Helper("gammaln", "a", "import math; return math.lgamma(a)"), _lgamma, gammaln, blows_up=True,
       derivative=Partials(lambda n: [(n.args[0], g.call(digamma, n.args[0]))])),
    Op("digamma", 1, "psi(a) = d gammaln / da (series; for derivatives of gammaln)", _digamma,
       Helper("digamma", "a", "import scipy.special; return scipy.special.psi(a)"), digamma.numpy, digamma, blows_up=True,
       derivative=Partials(lambda n: [(n.args[0], g.call(trigamma, n.args[0]))])),
    Op("trigamma", 1, "psi'(a) (series; for second derivatives of gammaln)", _trigamma,
       Helper("trigamma", "a", "import scipy.special; return scipy.special.polygamma(1, a)"), trigamma.numpy, trigamma, blows_up=True,
       derivative=Partials(_no_third_derivative)),
    Op("expit", 1, "logistic sigmoid 1 / (1 + exp(-a)), SciPy's algorithm; derivative expit (1 - expit)",
       _expit_emit, Helper("expit", "a", "return 1 / (1 + np.exp(-a))"), _quiet(_expit), expit,
       derivative=Partials(lambda n: [(n.args[0], g.mul(n, g.sub(g.ONE, n)))])),
    Op("log_expit", 1, "log(expit(a)) without overflow, SciPy's algorithm; derivative expit(-a)",
       _log_expit_emit, Helper("log_expit", "a", "return a - np.log1p(np.exp(a)) if a < 0 else -np.log1p(np.exp(-a))"), _quiet(_log_expit),
       log_expit, derivative=Partials(lambda n: [(n.args[0], g.call(expit, g.neg(n.args[0])))])),
    Op("softplus", 1, "log1p(exp(a)), what np.log1p(np.exp(a)) traces to (the same value); derivative expit(a)",
       lambda e, a: e.call("log1p", e.call("exp", a)), Helper("softplus", "a", "return np.log1p(np.exp(a))"),
       softplus.numpy, softplus, blows_up=True, derivative=Partials(lambda n: [(n.args[0], g.call(expit, n.args[0]))])),
    Op("logit", 1, "log(a / (1 - a)), SciPy's algorithm; derivative 1 / (a (1 - a))", _logit_emit,
       Helper("logit", "a", "s = 2 * (a - 0.5); return np.log(a / (1 - a)) if a < 0.3 or a > 0.65 else np.log1p(s) - np.log1p(-s)"), _quiet(_logit), logit, blows_up=True,
       derivative=Partials(lambda n: [(n.args[0], g.pow_(g.mul(n.args[0], g.sub(g.ONE, n.args[0])),
                                                          g.NEG_ONE))])),
    Op("xlogy", 2, "a log(b), 0 where a = 0 (SciPy); derivative log(b) in a, a / b in b", _xlog("log"),
       Helper("xlogy", "a, b", "return 0.0 if a == 0 and b == b else a * np.log(b)"), _quiet(_xlogy), xlogy,
       blows_up=True, derivative=Partials(lambda n: [(n.args[0], g.call(sp.log, n.args[1])),
                                                    (n.args[1], g.div(n.args[0], n.args[1]))])),
    Op("xlog1py", 2, "a log1p(b), 0 where a = 0 (SciPy); derivative log1p(b) in a, a / (1 + b) in b",
       _xlog("log1p"), Helper("xlog1py", "a, b", "return 0.0 if a == 0 and b == b else a * np.log1p(b)"),
       _quiet(_xlog1py), xlog1py, blows_up=True,
       derivative=Partials(lambda n: [(n.args[0], g.call(log1p, n.args[1])),
                                      (n.args[1], g.div(n.args[0], g.add(g.ONE, n.args[1])))])),
)

