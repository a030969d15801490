"""The operation records: one per node type / program opcode.

Everything symjac knows about a scalar operation lives in its record, and
every stage reads it from here: the tracer binds ``numpy`` callables to it,
``diff`` reads ``derivative`` and ``blows_up``, the lowering maps ``head``
to the opcode, the Python-style printer uses ``render``, the LLVM backend
and the tape interpreter both emit ``emit`` (so kernel and tape compute the
same bits by construction), ``from_sympy`` accepts the heads, and the docs
list the records.  Adding a node type = one record here + its test case in
``tests/primitive_cases.py``.

A record's fields:

* ``name``: the opcode (``sin``), ``arity``: its operand count;
* ``head``: the SymPy head whose nodes lower to it (None for operations only
  the lowering produces: ``load``, ``sub``, ``sqrt``, ...).  ``Add``, ``Mul``,
  ``Pow`` and ``Piecewise`` are lowered by the lowering's algebra (signs,
  quotients, ``x**2 = x*x``); other heads map one to one (n-ary logic folds
  left);
* ``numpy``: NumPy callables that trace straight to ``build`` (by default
  ``head`` applied to the scalar nodes);
* ``render``: how the Python-style rendering prints it: :class:`Infix`,
  :class:`Prefix`, :class:`Call` (a NumPy function) or :class:`Helper` (a
  small function defined in the rendering);
* ``emit(e, *operands)``: the operation in terms of the emitter helper ``e``
  (see :class:`Emitter`), which the backend implements with llvmlite.  No
  fast-math, NumPy's special-value semantics;
* ``fold``: the NumPy reference on scalars (tests compare ``emit`` with it,
  new heads fold constants with it);
* ``blows_up``: may finite operands give inf or NaN (a bool, or a function of
  the node); reverse mode guards products with such partials;
* ``derivative``: None (SymPy's ``fdiff``), :data:`ZERO`, :class:`Select`,
  :class:`Partials` or :data:`SAFE`;
* ``doc``: one line for the docs; ``kind``: the docs section.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy as sp
from sympy.codegen.cfunctions import exp2, expm1, hypot, log1p, log2, log10

from . import graph as g
from .record import (  # noqa: F401 (the format, re-exported: ops.Op, ops.Partials, ...)
    SAFE,
    ZERO,
    Call,
    Emitter,
    Helper,
    Infix,
    NumpyFunction,
    Op,
    PartialList,
    Partials,
    Prec,
    Prefix,
    Select,
    Value,
)


def _infix(symbol: str, prec: Prec, right_tighter: bool = True) -> Infix:
    return Infix(symbol, prec, prec, prec + 1 if right_tighter else prec)


# ----- rules and emitters used by several records ---------------------------------------------

_TWO = sp.Integer(2)
_LOG2E = 1.442695040888963407359924681001892137  # NumPy's NPY_LOG2E


def _sum_partials(node: sp.Basic) -> PartialList:
    return [(a, g.ONE) for a in node.args]


def _mul_partials(node: sp.Basic) -> PartialList:
    args = node.args
    coeff = args[0] if args[0].is_Number else g.ONE
    factors = list(args[1:] if args[0].is_Number else args)
    if len(factors) <= 3:
        return [(f, g.mul(coeff, *(factors[:i] + factors[i + 1 :]))) for i, f in enumerate(factors)]
    # prefix/suffix products: O(n) nodes instead of O(n^2) for long products
    prefix = [g.ONE]
    for f in factors[:-1]:
        prefix.append(g.mul(prefix[-1], f))
    suffix = [g.ONE]
    for f in reversed(factors[1:]):
        suffix.append(g.mul(f, suffix[-1]))
    suffix.reverse()
    return [(f, g.mul(coeff, prefix[i], suffix[i])) for i, f in enumerate(factors)]


def _pow_partials(node: sp.Basic) -> PartialList:
    base, exp = node.args
    out = []
    if not base.is_Number:
        if exp == g.HALF:  # d sqrt(b) = 1 / (2 sqrt(b)): reuse the sqrt node
            out.append((base, g.mul(g.HALF, g.pow_(node, g.NEG_ONE))))
        elif exp.is_Number:
            out.append((base, g.mul(exp, g.pow_(base, exp - 1))))
        else:
            out.append((base, g.mul(exp, g.pow_(base, g.add(exp, g.NEG_ONE)))))
    if not exp.is_Number:
        out.append((exp, g.mul(g.call(sp.log, base), node)))
    return out


def _select_max(node: sp.Basic) -> list[tuple[sp.Basic, PartialList]]:
    a, b = node.args
    return [
        (g.compare(sp.StrictGreaterThan, a, b), [(a, g.ONE)]),
        (g.compare(sp.StrictLessThan, a, b), [(b, g.ONE)]),
        (g.TRUE, [(a, g.HALF), (b, g.HALF)]),
    ]


def _select_min(node: sp.Basic) -> list[tuple[sp.Basic, PartialList]]:
    a, b = node.args
    return [
        (g.compare(sp.StrictLessThan, a, b), [(a, g.ONE)]),
        (g.compare(sp.StrictGreaterThan, a, b), [(b, g.ONE)]),
        (g.TRUE, [(a, g.HALF), (b, g.HALF)]),
    ]


def _select_piecewise(node: sp.Basic) -> list[tuple[sp.Basic, PartialList]]:
    return [(pair.args[1], [(pair.args[0], g.ONE)]) for pair in node.args]


def _npy_pow(a: Any, b: Any) -> Any:
    """NumPy's power of two arrays (npy_pow); a scalar exponent 0.5 takes NumPy's
    sqrt shortcut instead, which the lowering matches with a sqrt operation."""
    return np.power(np.atleast_1d(a), np.atleast_1d(b))[0]


def _libm(function: str) -> Callable:
    return lambda e, *args: e.call(function, *args)


def _compare(symbol: str, fold: Callable[[Any, Any], Any]) -> dict[str, Any]:
    # operands bind tighter than any comparison: (a < b) < c never prints as a chained a < b < c
    return dict(emit=lambda e, a, b: e.as_float(e.cmp(symbol, a, b)), render=Infix(symbol, Prec.CMP, Prec.ADD, Prec.ADD),
                fold=lambda a, b: type(a)(fold(a, b)), derivative=ZERO, kind="comparison")


def _sign(e: Emitter, a: Value) -> Value:  # NumPy: 1, -1, 0 for either zero, NaN for NaN
    zero = e.const(0.0)
    return e.select(e.cmp(">", a, zero), e.const(1.0), e.select(
        e.cmp("<", a, zero), e.const(-1.0), e.select(e.cmp("==", a, zero), zero, a)))


def _maximum(e: Emitter, a: Value, b: Value) -> Value:  # NumPy: NaN propagates; of two equal values (0.0, -0.0) the second
    return e.select(e.or_(e.cmp(">", a, b), e.isnan(a)), a, b)


def _minimum(e: Emitter, a: Value, b: Value) -> Value:
    return e.select(e.or_(e.cmp("<", a, b), e.isnan(a)), a, b)


def _logaddexp_like(e: Emitter, a: Value, b: Value, exp: str, at_tie: float, scale: float | None) -> Value:
    """NumPy's npy_logaddexp(2): a tie gives a + at_tie, NaN the difference,
    else max + log1p(exp(-|a - b|)) (times ``scale`` for base 2)."""
    diff = e.sub(a, b)
    tail = e.call("log1p", e.call(exp, e.neg(e.intrinsic("fabs", diff))))
    if scale is not None:
        tail = e.mul(e.const(scale), tail)
    zero = e.const(0.0)
    larger = e.select(e.cmp(">", diff, zero), a, b)
    spread = e.select(e.or_(e.cmp(">", diff, zero), e.cmp("<=", diff, zero)), e.add(larger, tail), diff)
    return e.select(e.cmp("==", a, b), e.add(a, e.const(at_tie)), spread)


# tanh and exp from arithmetic (no libm call), so a batch computes them on SIMD vectors with the same bits
# as a single kernel and the tape: libm's tanh cost ~20 ns a call, two thirds of an MLP batch.
# tanh(x) = -t / (t + 2), t = expm1(-2|x|) for |x| < 1 and 1 - 2 / (t + 2), t = expm1(2|x|) below 22
# (fdlibm's formulas), the sign copied from x; expm1 by Cody-Waite reduction y = k ln2 + r, |r| <= ln2/2,
# its Taylor series to r**13 (truncation < 0.1 ulp; fused multiply-adds in Estrin's order) and an exact
# scaling by 2**k.  Worst error about 2 ulp (tests/test_vector.py measures it against mpmath).  On this
# kind of machine (Zen 3, AVX2), a loop of tanh on 4 lanes: 5.0 ns a value with separate multiplies and
# adds in Horner's order, 3.4-3.9 with fused ones, 3.2-3.9 in Estrin's order (four runs) (same worst error, and
# mean 0.170 -> 0.170 ulp over 50,000 points).  A CPU without FMA3 computes the same bits more slowly.
_LN2_HI = 0.693145751953125  # 16 significant bits: k * _LN2_HI is exact in float64 and float32
_LN2_LO = 1.4286068203094173e-06  # ln 2 - _LN2_HI rounded once (math.log(2) - _LN2_HI is 2e-17 off: 250 ulp at k = 1000)
_EXPM1_TAYLOR = [1 / math.factorial(n) for n in range(13, 1, -1)]  # 1/13!, ..., 1/2


def _reduce(e: Emitter, y: Value) -> tuple[Value, Value]:
    """(k, expm1(r)) with y = k ln2 + r, |r| <= ln2 / 2 (y finite, |y| < 1200)."""
    k = e.intrinsic("floor", e.add(e.mul(y, e.const(1 / math.log(2))), e.const(0.5)))
    r = e.sub(e.sub(y, e.mul(k, e.const(_LN2_HI))), e.mul(k, e.const(_LN2_LO)))
    # q(r) = sum a_i r**i, a_i = 1 / (i + 2)!, i = 0..11, by Estrin's scheme: pairs, then pairs
    # of pairs in r**2, r**4, r**8 (4 dependent multiply-adds where Horner's rule chained 12)
    a = _EXPM1_TAYLOR[::-1]
    terms = [e.intrinsic("fma", e.const(a[i + 1]), r, e.const(a[i])) for i in range(0, 12, 2)]
    power = r2 = e.mul(r, r)
    while len(terms) > 1:
        terms = [e.intrinsic("fma", terms[i + 1], power, terms[i]) if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
        power = e.mul(power, power) if len(terms) > 1 else power
    return k, e.intrinsic("fma", r2, terms[0], r)


def _expm1_reduced(e: Emitter, y: Value) -> Value:
    """expm1(y) for -2 < y < 44 (what tanh needs)."""
    k, p = _reduce(e, y)
    s = e.exp2i(k)
    return e.add(e.mul(s, p), e.sub(s, e.const(1.0)))  # 2**k (1 + p) - 1: s*p and s - 1 are exact


def _exp(e: Emitter, x: Value) -> Value:
    """e ** x = (1 + expm1(r)) 2**k, the scaling in two exact halves (the second
    rounds once into the subnormals, or overflows to inf, as the true value
    would); |x| is clamped to 1100, beyond which the result is 0 or inf anyway."""
    limit = e.const(1100.0)
    nan = e.isnan(x)
    y = e.select(e.cmp(">", x, limit), limit, e.select(e.cmp("<", x, e.neg(limit)), e.neg(limit), x))
    k, p = _reduce(e, e.select(nan, e.const(0.0), y))
    half = e.intrinsic("floor", e.mul(k, e.const(0.5)))
    value = e.mul(e.mul(e.add(e.const(1.0), p), e.exp2i(half)), e.exp2i(e.sub(k, half)))
    return e.select(nan, x, value)


def _tanh(e: Emitter, x: Value) -> Value:
    ax = e.intrinsic("fabs", x)
    one, two = e.const(1.0), e.const(2.0)
    a = e.select(e.cmp("<", ax, e.const(22.0)), ax, e.const(0.0))  # NaN, inf and |x| >= 22 compute on 0
    near = e.cmp("<", a, one)
    t = _expm1_reduced(e, e.select(near, e.mul(e.const(-2.0), a), e.mul(two, a)))
    q = e.div(e.select(near, e.neg(t), two), e.add(t, two))  # one division for both formulas
    z = e.select(near, q, e.sub(one, q))
    z = e.select(e.cmp(">=", ax, e.const(22.0)), one, z)
    z = e.select(e.cmp("<", ax, e.const(2.0 ** -28)), ax, z)  # tanh(x) rounds to x: keeps -0.0 and subnormals
    return e.select(e.isnan(x), x, e.intrinsic("copysign", z, x))


class logaddexp(NumpyFunction):  # noqa: N801  (prints as logaddexp(a, b))
    nargs = 2
    numpy = staticmethod(np.logaddexp)


class logaddexp2(NumpyFunction):  # noqa: N801
    nargs = 2
    numpy = staticmethod(np.logaddexp2)


def _numeric_log1p(a: sp.Basic) -> sp.Basic:
    # log1p(exp(y)) traces to the softplus record (numeric_ops): same value, stable derivatives
    from .numeric_ops import log1p_node

    return log1p_node(a)


def _bool_fold(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *a: type(a[-1])(bool(fn(*(x != 0 for x in a))))


# ----- the records ----------------------------------------------------------------------------

RECORDS: tuple[Op, ...] = (
    # ----- program plumbing (the lowering emits these; the backends implement them) -----
    Op("load", 0, "an input element", kind="program"),
    Op("load_shared", 0, "an element of an input shared by all samples of a batch", kind="program"),
    Op("const", 0, "a number", kind="program"),
    # ----- arithmetic -----
    Op("add", 2, "a + b", lambda e, a, b: e.add(a, b), _infix("+", Prec.ADD), np.add, sp.Add, (np.add,), g.add,
       derivative=Partials(_sum_partials)),
    Op("sub", 2, "a - b", lambda e, a, b: e.sub(a, b), _infix("-", Prec.ADD), np.subtract),
    Op("mul", 2, "a * b", lambda e, a, b: e.mul(a, b), _infix("*", Prec.MUL), np.multiply, sp.Mul,
       (np.multiply,), g.exact_mul, derivative=Partials(_mul_partials)),
    Op("div", 2, "a / b", lambda e, a, b: e.div(a, b), _infix("/", Prec.MUL), np.divide),
    Op("neg", 1, "-a", lambda e, a: e.neg(a), Prefix("-", Prec.NEG, Prec.NEG + 1), np.negative),
    Op("pow", 2, "a ** b (libm pow, as NumPy's npy_pow)", _libm("pow"), Infix("**", Prec.POW, Prec.ATOM, Prec.ATOM),
       _npy_pow, sp.Pow, (np.power,), g.pow_, derivative=Partials(_pow_partials),
       blows_up=lambda node: not (node.args[1].is_Integer and node.args[1] >= 0)),
    Op("sqrt", 1, "square root (exact)", lambda e, a: e.intrinsic("sqrt", a), Call("sqrt"), np.sqrt),
    Op("abs", 1, "|a|; derivative sign(a), 0 at a = 0", lambda e, a: e.intrinsic("fabs", a), Call("abs"),
       np.absolute, sp.Abs, (np.absolute, np.fabs)),
    Op("sign", 1, "sign(a) (0 at ±0, NaN at NaN); derivative 0", _sign, Call("sign"), np.sign, sp.sign,
       (np.sign,), derivative=ZERO),
    Op("floor", 1, "floor; derivative 0", lambda e, a: e.intrinsic("floor", a), Call("floor"), np.floor,
       sp.floor, (np.floor,), derivative=ZERO),
    Op("ceil", 1, "ceiling; derivative 0", lambda e, a: e.intrinsic("ceil", a), Call("ceil"), np.ceil,
       sp.ceiling, (np.ceil,), derivative=ZERO),
    # ----- exponentials and logarithms -----
    Op("exp", 1, "e ** a (symjac's own arithmetic, within 2 ulp: vectorises)", _exp, Call("exp"), np.exp, sp.exp,
       (np.exp,), blows_up=True),
    Op("expm1", 1, "exp(a) - 1, accurate near 0", _libm("expm1"), Call("expm1"), np.expm1, expm1, (np.expm1,),
       blows_up=True),
    Op("log", 1, "natural logarithm", _libm("log"), Call("log"), np.log, sp.log, (np.log,), blows_up=True),
    Op("log1p", 1, "log(1 + a), accurate near 0", _libm("log1p"), Call("log1p"), np.log1p, log1p, (np.log1p,),
       build=lambda a: _numeric_log1p(a),
       blows_up=True),
    # (NumPy's own functions, not log(a) / log(2) or 2 ** a: np.log2(8) is exactly 3, and
    # np.hypot(1e300, 1e300) does not overflow)
    Op("exp2", 1, "2 ** a (libm exp2)", _libm("exp2"), Call("exp2"), np.exp2, exp2, (np.exp2,), blows_up=True),
    Op("log2", 1, "base-2 logarithm (libm log2: exact at powers of 2)", _libm("log2"), Call("log2"), np.log2,
       log2, (np.log2,), blows_up=True),
    Op("log10", 1, "base-10 logarithm (libm log10: exact at powers of 10)", _libm("log10"), Call("log10"),
       np.log10, log10, (np.log10,), blows_up=True),
    # ----- trigonometric and hyperbolic -----
    Op("sin", 1, "sine", _libm("sin"), Call("sin"), np.sin, sp.sin, (np.sin,)),
    Op("cos", 1, "cosine", _libm("cos"), Call("cos"), np.cos, sp.cos, (np.cos,)),
    Op("tan", 1, "tangent", _libm("tan"), Call("tan"), np.tan, sp.tan, (np.tan,), blows_up=True),
    Op("arcsin", 1, "inverse sine", _libm("asin"), Call("arcsin"), np.arcsin, sp.asin, (np.arcsin,),
       blows_up=True),
    Op("arccos", 1, "inverse cosine", _libm("acos"), Call("arccos"), np.arccos, sp.acos, (np.arccos,),
       blows_up=True),
    Op("arctan", 1, "inverse tangent", _libm("atan"), Call("arctan"), np.arctan, sp.atan, (np.arctan,)),
    Op("arctan2", 2, "angle of the point (b, a): atan2(a, b)", _libm("atan2"), Call("arctan2"), np.arctan2,
       sp.atan2, (np.arctan2,)),
    Op("hypot", 2, "sqrt(a**2 + b**2) without overflow or underflow (libm hypot)", _libm("hypot"), Call("hypot"),
       np.hypot, hypot, (np.hypot,), blows_up=True),
    Op("sinh", 1, "hyperbolic sine", _libm("sinh"), Call("sinh"), np.sinh, sp.sinh, (np.sinh,), blows_up=True),
    Op("cosh", 1, "hyperbolic cosine", _libm("cosh"), Call("cosh"), np.cosh, sp.cosh, (np.cosh,), blows_up=True),
    Op("tanh", 1, "hyperbolic tangent (symjac's own arithmetic, within 2 ulp: vectorises)", _tanh, Call("tanh"),
       np.tanh, sp.tanh, (np.tanh,)),
    Op("arcsinh", 1, "inverse hyperbolic sine", _libm("asinh"), Call("arcsinh"), np.arcsinh, sp.asinh,
       (np.arcsinh,)),
    Op("arccosh", 1, "inverse hyperbolic cosine", _libm("acosh"), Call("arccosh"), np.arccosh, sp.acosh,
       (np.arccosh,), blows_up=True),
    Op("arctanh", 1, "inverse hyperbolic tangent", _libm("atanh"), Call("arctanh"), np.arctanh, sp.atanh,
       (np.arctanh,), blows_up=True),
    Op("logaddexp", 2, "log(exp(a) + exp(b)) without overflow (NumPy's algorithm)",
       lambda e, a, b: _logaddexp_like(e, a, b, "exp", math.log(2), None), Call("logaddexp"), np.logaddexp,
       logaddexp, (np.logaddexp,),
       derivative=Partials(lambda n: [(a, g.call(sp.exp, g.sub(a, n))) for a in n.args])),
    Op("logaddexp2", 2, "log2(2**a + 2**b) without overflow (NumPy's algorithm)",
       lambda e, a, b: _logaddexp_like(e, a, b, "exp2", 1.0, _LOG2E), Call("logaddexp2"),
       np.logaddexp2, logaddexp2, (np.logaddexp2,),
       derivative=Partials(lambda n: [(a, g.pow_(_TWO, g.sub(a, n))) for a in n.args])),
    # ----- piecewise -----
    Op("maximum", 2, "elementwise max (NaN propagates); at ties the derivative is split 1/2 : 1/2", _maximum,
       Call("maximum"), np.maximum, sp.Max, (np.maximum,), derivative=Select(_select_max), kind="piecewise"),
    Op("minimum", 2, "elementwise min (NaN propagates); at ties the derivative is split 1/2 : 1/2", _minimum,
       Call("minimum"), np.minimum, sp.Min, (np.minimum,), derivative=Select(_select_min), kind="piecewise"),
    Op("select", 3, "a if c else b (both computed); the derivative follows the branch taken",
       lambda e, c, a, b: e.select(e.truth(c), a, b), Helper("_select", "c, a, b", "return a if c else b"),
       lambda c, a, b: a if c != 0 else b, sp.Piecewise, derivative=Select(_select_piecewise), kind="piecewise"),
    Op("safemul", 2, "a * b, but exactly 0 where a is 0 (even if b is inf or NaN)",
       lambda e, a, b: e.select(e.cmp("==", a, e.const(0.0)), e.const(0.0), e.mul(a, b)),
       Helper("_safe_mul", "a, b", "return a - a if a == 0 else a * b"),
       lambda a, b: type(a)(0.0) if a == 0 else a * b, g.SafeMul, derivative=SAFE, kind="piecewise"),
    # ----- comparisons (1.0 / 0.0; NaN compares false except !=) -----
    Op("lt", 2, "a < b", head=sp.StrictLessThan, numpy=(np.less,), **_compare("<", lambda a, b: a < b)),
    Op("le", 2, "a <= b", head=sp.LessThan, numpy=(np.less_equal,), **_compare("<=", lambda a, b: a <= b)),
    Op("gt", 2, "a > b", head=sp.StrictGreaterThan, numpy=(np.greater,), **_compare(">", lambda a, b: a > b)),
    Op("ge", 2, "a >= b", head=sp.GreaterThan, numpy=(np.greater_equal,), **_compare(">=", lambda a, b: a >= b)),
    Op("eq", 2, "a == b", head=sp.Eq, numpy=(np.equal,), **_compare("==", lambda a, b: a == b)),
    Op("ne", 2, "a != b", head=sp.Ne, numpy=(np.not_equal,), **_compare("!=", lambda a, b: a != b)),
    # ----- logic on conditions (nonzero is true) -----
    Op("and", 2, "a and b", lambda e, a, b: e.as_float(e.and_(e.truth(a), e.truth(b))), _infix("and", Prec.AND),
       _bool_fold(lambda p, q: p and q), sp.And, derivative=ZERO, kind="logic"),
    Op("or", 2, "a or b", lambda e, a, b: e.as_float(e.or_(e.truth(a), e.truth(b))), _infix("or", Prec.OR),
       _bool_fold(lambda p, q: p or q), sp.Or, derivative=ZERO, kind="logic"),
    Op("xor", 2, "a xor b", lambda e, a, b: e.as_float(e.xor(e.truth(a), e.truth(b))),
       Infix("!=", Prec.CMP, Prec.CMP + 1, Prec.CMP + 1), _bool_fold(lambda p, q: p != q), sp.Xor,
       derivative=ZERO, kind="logic"),
    Op("not", 1, "not a", lambda e, a: e.as_float(e.not_(e.truth(a))), Prefix("not ", Prec.NOT, Prec.NOT + 1),
       _bool_fold(lambda p: not p), sp.Not, derivative=ZERO, kind="logic"),
)

# rounding, remainders and special functions (numeric_ops builds on the record format, record.py)
from .numeric_ops import RECORDS as _NUMERIC  # noqa: E402

RECORDS = RECORDS + _NUMERIC

BY_NAME: dict[str, Op] = {op.name: op for op in RECORDS}
BY_HEAD: dict[type, Op] = {op.head: op for op in RECORDS if op.head is not None}
#: Opcode numbers (the tape's encoding): positions in RECORDS.
OPCODE: dict[str, int] = {op.name: i for i, op in enumerate(RECORDS)}

if len(BY_NAME) != len(RECORDS) or len(BY_HEAD) != sum(op.head is not None for op in RECORDS):
    raise AssertionError("two records share an opcode name or a SymPy head")


def is_function_head(head: type) -> bool:
    """True for heads that are SymPy functions applied to operands (``sin``,
    ``Max``, ``logaddexp``), as opposed to the algebra, relations and logic."""
    op = BY_HEAD.get(head)
    return op is not None and op.kind in ("elementwise", "piecewise") and head not in (
        sp.Add, sp.Mul, sp.Pow, sp.Piecewise, g.SafeMul)
