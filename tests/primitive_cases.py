"""Test cases for every row of the primitive table.

Each case is a small function that exercises one primitive, the input
domains of its arguments, and the argument shapes to try (scalar, vector,
matrix and broadcast where they apply).  ``test_primitives.py`` checks each
case's value against NumPy and its derivatives against finite differences;
a coverage test fails if a row of the table has no case here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

try:
    import scipy.signal as signal
    import scipy.special as special
except ImportError:  # SciPy is optional: its rows then have no cases (test_primitives allows that)
    signal = special = None


@dataclass
class Case:
    fn: object
    domains: tuple[str, ...]
    shapes: list[tuple] = field(default_factory=lambda: [((),), ((3,),), ((2, 3),)])
    smooth: bool = True  # has a nonzero derivative worth checking
    hessian: bool = True  # check second derivatives too


S1 = [((),), ((3,),), ((2, 3),)]
S2 = [((), ()), ((3,), (3,)), ((2, 3), (2, 3)), ((2, 3), (3,)), ((3,), ())]


def _u(fn, dom="real", **kw):
    return Case(fn, (dom,), S1, **kw)


def _b(fn, d1="real", d2="real", **kw):
    return Case(fn, (d1, d2), S2, **kw)


DOMAINS = {
    "real": lambda rng, shape: rng.uniform(-2, 2, shape),
    "pos": lambda rng, shape: rng.uniform(0.3, 2.0, shape),
    "unit": lambda rng, shape: rng.uniform(-0.85, 0.85, shape),
    "gt1": lambda rng, shape: rng.uniform(1.3, 3.0, shape),
    "frac": lambda rng, shape: rng.integers(-2, 2, shape) + rng.uniform(0.15, 0.85, shape),
    # values clustered away from kinks at 0 and +-1; "apart2" clusters never meet "apart"'s
    "apart": lambda rng, shape: rng.choice([-1.5, -0.7, 0.4, 1.3], shape) + rng.uniform(-0.1, 0.1, shape),
    "apart2": lambda rng, shape: rng.choice([-1.1, -0.3, 0.8, 1.7], shape) + rng.uniform(-0.05, 0.05, shape),
    # within 0.35 of an integer (away from rint's jumps at halves)
    "near_int": lambda rng, shape: rng.integers(-2, 3, shape) + rng.uniform(-0.35, 0.35, shape),
    "prob": lambda rng, shape: rng.uniform(0.05, 0.95, shape),
}


CASES: dict[str, list[Case]] = {
    # arithmetic
    "add": [_b(lambda a, b: np.add(a, b)), _b(lambda a, b: a + b * 2.5 + 1)],
    "subtract": [_b(lambda a, b: np.subtract(a, b)), _b(lambda a, b: 1.0 - a - b)],
    "multiply": [_b(lambda a, b: np.multiply(a, b)), _b(lambda a, b: 3 * a * b * b)],
    "divide": [_b(lambda a, b: np.divide(a, b), "real", "pos"), _b(lambda a, b: (a / b) / 3, "pos", "pos")],
    # -(-a) is a deliberate double negation (ruff reads it as "--")
    "negative": [_u(lambda a: np.negative(a) * a), _u(lambda a: -(-a) + a)],  # noqa: B002
    "positive": [_u(lambda a: np.positive(a) * a)],
    "power": [
        _b(lambda a, b: np.power(a, b), "pos", "real"),
        _u(lambda a: a**3 + a**-2 + a**0.5 + a**-0.5 + a**1.5, "pos"),
        _u(lambda a: 2.0**a),
    ],
    "float_power": [_b(lambda a, b: np.float_power(a, b), "pos", "unit")],
    "square": [_u(lambda a: np.square(a))],
    "reciprocal": [_u(lambda a: np.reciprocal(a), "pos")],
    "sqrt": [_u(lambda a: np.sqrt(a), "pos"), _u(lambda a: np.sqrt(a * a + 1.0))],
    "absolute": [_u(lambda a: np.absolute(a) * a, "apart"), _u(lambda a: abs(a) + np.abs(a), "apart")],
    "fabs": [_u(lambda a: np.fabs(a) * a, "apart")],
    "sign": [_u(lambda a: np.sign(a) * a, "apart")],
    "floor": [_u(lambda a: np.floor(a) * a, "frac")],
    "ceil": [_u(lambda a: np.ceil(a) * a, "frac")],
    # exponentials and logarithms
    "exp": [_u(lambda a: np.exp(a))],
    "exp2": [_u(lambda a: np.exp2(a))],
    "expm1": [_u(lambda a: np.expm1(a))],
    "log": [_u(lambda a: np.log(a), "pos")],
    "log2": [_u(lambda a: np.log2(a), "pos")],
    "log10": [_u(lambda a: np.log10(a), "pos")],
    "log1p": [_u(lambda a: np.log1p(a), "pos"),
              # log1p(exp(.)) traces to the softplus record: stable derivatives where exp overflows
              _u(lambda a: np.log1p(np.exp(a * 400.0)) + np.log1p(np.exp(a)))],
    "logaddexp": [_b(lambda a, b: np.logaddexp(a, b), "apart", "apart2"), _u(lambda a: np.logaddexp(a * 300.0, 0.5))],
    "logaddexp2": [_b(lambda a, b: np.logaddexp2(a, b), "apart", "apart2"), _u(lambda a: np.logaddexp2(a * 300.0, a))],
    # trigonometric and hyperbolic
    "sin": [_u(lambda a: np.sin(a))],
    "cos": [_u(lambda a: np.cos(a))],
    "tan": [_u(lambda a: np.tan(a), "unit")],
    "arcsin": [_u(lambda a: np.arcsin(a), "unit")],
    "arccos": [_u(lambda a: np.arccos(a), "unit")],
    "arctan": [_u(lambda a: np.arctan(a))],
    "arctan2": [_b(lambda a, b: np.arctan2(a, b), "real", "pos"), _b(lambda a, b: np.arctan2(a, b), "pos", "real")],
    "hypot": [_b(lambda a, b: np.hypot(a, b), "pos", "real")],
    "sinh": [_u(lambda a: np.sinh(a))],
    "cosh": [_u(lambda a: np.cosh(a))],
    "tanh": [_u(lambda a: np.tanh(a))],
    "arcsinh": [_u(lambda a: np.arcsinh(a))],
    "arccosh": [_u(lambda a: np.arccosh(a), "gt1")],
    "arctanh": [_u(lambda a: np.arctanh(a), "unit")],
    "deg2rad": [_u(lambda a: np.deg2rad(a) * a), _u(lambda a: np.radians(a) + a)],
    "rad2deg": [_u(lambda a: np.rad2deg(a) * a), _u(lambda a: np.degrees(a) + a)],
    "sinc": [_u(lambda a: np.sinc(a)), Case(lambda a: np.sinc(a * np.array([0.0, 1.0, -0.0])), ("real",), [((3,),)])],
    # rounding and remainders
    "rint": [_u(lambda a: np.rint(a) * a, "near_int"), _u(lambda a: a * 2 + np.rint(a / 10), "near_int")],
    "round": [_u(lambda a: np.round(a) * a + np.around(a / 10, 1), "near_int"),
              _u(lambda a: np.round(a * 10, -1) + (a / 100).round(2) * a, "near_int")],
    "trunc": [_u(lambda a: np.trunc(a) * a, "frac")],
    "fix": [_u(lambda a: np.fix(a) * a, "frac")],
    # (divisors near 1 and dividends in "frac": a / b stays away from integers, where these jump)
    "fmod": [_b(lambda a, b: np.fmod(a, 1.0 + 0.05 * b) * a, "frac", "unit"), _u(lambda a: np.fmod(a, -2.0), "frac")],
    "remainder": [_b(lambda a, b: np.remainder(a, 1.0 + 0.05 * b) * a, "frac", "unit"),
                  _b(lambda a, b: (a % (-1.0 - 0.05 * b)) + np.mod(a, 2.0), "frac", "unit")],
    "floor_divide": [_b(lambda a, b: np.floor_divide(a, 1.0 + 0.05 * b) * a + (a // -2.0) * b, "frac", "unit")],
    "divmod": [_b(lambda a, b: np.divmod(a, 1.0 + 0.05 * b)[0] * a + divmod(a, 2.0)[1] * b, "frac", "unit")],
    "copysign": [_b(lambda a, b: np.copysign(a, b) * b, "apart", "apart2"), _u(lambda a: np.copysign(2.0, a) + a, "apart")],
    "cbrt": [_u(lambda a: np.cbrt(a), "apart"), _u(lambda a: np.cbrt(a * a + 1), "real")],
    # piecewise
    "fmax": [_b(lambda a, b: np.fmax(a, np.where(b > 1.0, np.nan, b)), "apart", "apart2")],
    "fmin": [_b(lambda a, b: np.fmin(np.where(a > 1.0, np.nan, a), b) + np.fmin(a, 0.1), "apart", "apart2")],
    "nan_to_num": [_u(lambda a: np.nan_to_num(np.where(a > 1.0, np.inf, np.where(a < -1.0, np.nan, a)), posinf=2.0) * a,
                      "apart")],
    "piecewise": [_u(lambda a: np.piecewise(a, [a < 0, a > 1], [lambda v: v * v, lambda v: np.sin(v), -0.5]), "apart"),
                  Case(lambda a: np.piecewise(a, a > 0, [lambda v: v ** 3, lambda v: -v]), ("apart",), [((3,),)]),
                  Case(lambda a: np.piecewise(a, [a > 0], [lambda v: v ** 3]), ("apart",), [((2, 3),)])],
    "signbit": [_u(lambda a: np.where(np.signbit(a), a * a, a), "apart")],
    "real": [_u(lambda a: np.real(a) * 2.0)],
    "imag": [_u(lambda a: np.imag(a) + a)],
    "conj": [_u(lambda a: np.conj(a) * a + np.conjugate(a))],
    "heaviside": [_b(lambda a, b: np.heaviside(a, b) * b + a, "apart", "real"),
                  Case(lambda a: np.heaviside(a * np.array([0.0, 1.0, -0.0]), a) * a, ("real",), [((3,),)])],
    "maximum": [_b(lambda a, b: np.maximum(a, b) * a, "apart", "apart2"), _u(lambda a: np.maximum(a, 0.1) * a, "apart")],
    "minimum": [_b(lambda a, b: np.minimum(a, b) * b, "apart", "apart2")],
    "clip": [_u(lambda a: np.clip(a, -1.0, 1.0) * a, "apart"), _u(lambda a: a.clip(0.0, None) + a, "apart")],
    "where": [
        _u(lambda a: np.where(a > 0, np.sin(a), a * a), "apart"),
        _b(lambda a, b: np.where(a < b, a * b, b - a), "apart", "apart2"),
        # reverse mode through a branch whose partial blows up elsewhere (safemul)
        Case(lambda a: np.sum(np.where(a < 0.2, a, np.sqrt(a)) * a), ("pos",), [((3,),)]),
    ],
    "select": [_u(lambda a: np.select([a < -1, a < 1], [a * a, np.sin(a)], default=a), "apart")],
    # comparisons and logic (values; their derivatives are zero)
    "less": [_b(lambda a, b: np.where(np.less(a, b), a, 2 * b), "apart", "apart2")],
    "less_equal": [_b(lambda a, b: np.where(a <= b, a, 2 * b), "apart", "apart2")],
    "greater": [_b(lambda a, b: np.where(np.greater(a, b), a, 2 * b), "apart", "apart2")],
    "greater_equal": [_b(lambda a, b: np.where(a >= b, a, 2 * b), "apart", "apart2")],
    "equal": [_b(lambda a, b: np.where(a == b, a, 2 * b), "apart", "apart2")],
    "not_equal": [_b(lambda a, b: np.where(a != b, a, 2 * b), "apart", "apart2")],
    "isnan": [Case(lambda a: np.where(np.isnan(np.where(a > 0, a, np.nan)), 0.0, a * a), ("apart",), S1)],
    "isinf": [Case(lambda a: np.where(np.isinf(np.where(a > 0, a, -np.inf)), a, 2 * a), ("apart",), S1)],
    "isfinite": [Case(lambda a: np.where(np.isfinite(np.where(a > 0, a, np.nan)), a * a, a), ("apart",), S1),
                 Case(lambda a: np.where(np.isfinite(np.where(a > 0, a, np.inf)), a * a, a), ("apart",), S1)],
    "logical_and": [_u(lambda a: np.where(np.logical_and(a > -1, a < 1), a, -a), "apart")],
    "logical_or": [_u(lambda a: np.where(np.logical_or(a < -1, a > 1), a, -a), "apart")],
    "logical_not": [_u(lambda a: np.where(np.logical_not(a > 0), a, a * a), "apart"),
                    _u(lambda a: np.where(np.logical_not((a > -1) & (a < 1)), a, -a), "apart")],
    "logical_xor": [_u(lambda a: np.where(np.logical_xor(a > 0, a > 1), a, a * a), "apart")],
    "bitwise_and": [_u(lambda a: np.where((a > -1) & (a < 1), a, -a), "apart")],
    "bitwise_or": [_u(lambda a: np.where((a < -1) | (a > 1), a, -a), "apart")],
    "bitwise_xor": [_u(lambda a: np.where((a > 0) ^ (a > 1), a, -a), "apart")],
    "invert": [_u(lambda a: np.where(~(a > 0), a, a * a), "apart")],
    # reductions
    "sum": [
        Case(lambda a: np.sum(a * a), ("real",), [((3,),), ((2, 3),)]),
        Case(lambda a: a.sum(axis=0) * a.sum(axis=-1, keepdims=True), ("real",), [((2, 3),), ((3, 3),)]),
        Case(lambda a: np.sum(np.sin(a), axis=(0, 2)), ("real",), [((2, 3, 2),)]),
    ],
    "mean": [Case(lambda a: np.mean(a * a, axis=-1) + a.mean(), ("real",), [((3,),), ((2, 3),)])],
    "var": [
        Case(lambda a: np.var(a), ("real",), [((3,),), ((2, 3),)]),
        Case(lambda a: np.var(a, axis=0, ddof=1) + a.var(axis=-1, keepdims=True), ("real",), [((3, 3),)]),
        Case(lambda a: np.var(a, axis=(0, 2), dtype=np.float64, keepdims=True), ("real",), [((2, 3, 2),)]),
    ],
    "std": [
        Case(lambda a: np.std(a, ddof=1), ("real",), [((3,),), ((2, 3),)]),
        Case(lambda a: np.std(a * a, axis=1) * a.std(0, None, None, 1)[:, None], ("real",), [((3, 3),)]),
    ],
    "average": [
        Case(lambda a: np.average(a * a), ("real",), [((3,),), ((2, 3),)]),
        Case(lambda a, w: np.average(a, axis=-1, weights=w), ("real", "pos"), [((2, 3), (3,)), ((3,), (3,))]),
        Case(lambda a, w: np.average(a, axis=0, weights=w, returned=True)[1] * np.average(a, 0, w, keepdims=True),
             ("real", "pos"), [((3, 2), (3, 2))]),
    ],
    "nansum": [Case(lambda a: np.nansum(np.where(a > 0, a * a, np.nan)) + np.nansum(a, axis=0), ("apart",),
                    [((3,),), ((2, 3),)])],
    "nanmean": [Case(lambda a: np.nanmean(np.concatenate([np.where(a > 0, a * a, np.nan), a[..., :1]], axis=-1),
                                          axis=-1, keepdims=True) + np.nanmean(a), ("apart",), [((4,),), ((2, 4),)])],
    "argmax": [Case(lambda a: a.reshape(-1)[np.argmax(a)] * a + np.argmax(a), ("apart",), [((4,),), ((2, 3),)]),
               Case(lambda a: np.where(np.arange(3) == np.argmax(a, axis=1)[:, None], a, 0.0)
                    + np.take_along_axis(a, a.argmax(axis=-1, keepdims=True), axis=-1), ("apart",), [((2, 3),)])],
    "argmin": [Case(lambda a: a[np.arange(a.shape[0]), np.argmin(a, axis=1)] * a.argmin() + np.take(a, a.argmin()),
                    ("apart",), [((3, 2),)])],
    "all": [Case(lambda a: np.where(np.all(a > -1.0), a, -a) + np.where((a > 0).all(axis=-1, keepdims=True), 2 * a, a),
                 ("apart",), [((3,),), ((2, 3),)])],
    "any": [Case(lambda a: np.where(np.any(a > 1.0, axis=0), a * a, a) + np.where(a.any(), a, 0.0), ("apart",),
                 [((3,),), ((2, 3),)])],
    "nanprod": [Case(lambda a: np.nanprod(np.where(a > 0, a, np.nan), axis=-1) + np.nanprod(a), ("apart",),
                     [((3,),), ((2, 3),)])],
    "nanvar": [Case(lambda a: np.nanvar(np.concatenate([np.where(a > 0, a, np.nan), a[..., :2]], axis=-1), axis=-1,
                               keepdims=True) + np.nanvar(a, ddof=1),
                    ("apart",), [((4,),), ((2, 4),)])],
    "nanstd": [Case(lambda a: np.nanstd(np.concatenate([np.where(a > 0, a, np.nan), a[..., :2]], axis=-1), axis=-1),
                    ("apart",), [((4,),), ((2, 4),)])],
    "cumulative_sum": [Case(lambda a: np.cumulative_sum(a, axis=-1, include_initial=True) * a[..., :1], ("real",),
                            [((3,),), ((2, 3),)])],
    "cumulative_prod": [Case(lambda a: np.cumulative_prod(a, axis=0), ("real",), [((3,),), ((2, 3),)])],
    "ediff1d": [Case(lambda a: np.ediff1d(a * a, to_begin=a[:1], to_end=[0.5, 1.0]), ("real",), [((3,),), ((2, 3),)])],
    "convolve": [Case(lambda a, b: np.convolve(a, b) + np.convolve(a, b, mode="same").sum(), ("real", "real"),
                      [((4,), (3,)), ((2,), (5,))]),
                 Case(lambda a: np.convolve(a * a, [1.0, -2.0, 1.0], mode="valid"), ("real",), [((5,),)])],
    "vander": [Case(lambda a: np.vander(a, 4) + np.vander(a, increasing=True)[:, :1], ("real",), [((3,),)])],
    "cov": [Case(lambda a: np.cov(a) + np.cov(a, rowvar=False, bias=True).sum(), ("real",), [((2, 4),), ((3, 3),)]),
            Case(lambda a, b: np.cov(a, b, ddof=0), ("real", "real"), [((4,), (4,))])],
    "corrcoef": [Case(lambda a: np.corrcoef(a), ("real",), [((2, 4),), ((3, 5),)]),
                 Case(lambda a, b: np.corrcoef(a, b)[0, 1] * a, ("real", "real"), [((4,), (4,))])],
    "sort": [Case(lambda a: np.sort(a * a) * a + np.sort(a, axis=0), ("apart",), [((5,),), ((3, 4),)]),
             Case(lambda a: np.sort(a, axis=None)[::2], ("apart",), [((2, 3),)])],
    "median": [Case(lambda a: np.median(a) + np.median(a, axis=-1, keepdims=True) * a, ("apart",), [((4,),), ((2, 3),)])],
    "quantile": [Case(lambda a: np.quantile(a, [0.1, 0.6, 1.0], axis=-1), ("apart",), [((5,),), ((2, 4),)])],
    "percentile": [Case(lambda a: np.percentile(a * a, 35.0) * a, ("apart",), [((6,),)])],
    "ptp": [Case(lambda a: np.ptp(a * a) + np.ptp(a, axis=0), ("apart",), [((3,),), ((2, 3),)])],
    "nanmax": [Case(lambda a: np.nanmax(np.concatenate([np.where(a > 0, a, np.nan), a[..., :1]], axis=-1), axis=-1),
                    ("apart",), [((4,),), ((2, 4),)])],
    "nanmin": [Case(lambda a: np.nanmin(np.concatenate([np.where(a > 0, a, np.nan), a[..., :1]], axis=-1)) * a,
                    ("apart",), [((4,),), ((2, 4),)])],
    "count_nonzero": [Case(lambda a: np.count_nonzero(a > 0) * a + np.count_nonzero(a < 1, axis=0), ("apart",),
                           [((3,),), ((2, 3),)])],
    "trapezoid": [Case(lambda a: np.trapezoid(a * a), ("real",), [((4,),), ((2, 3),)]),
                  Case(lambda a, b: np.trapezoid(a, x=np.cumsum(b), axis=0) + np.trapezoid(a, dx=0.25, axis=0),
                       ("real", "pos"), [((4,), (4,)), ((3, 2), (3,))])],
    "gradient": [Case(lambda a: np.gradient(a * a), ("real",), [((4,),)]),
                 Case(lambda a: np.gradient(a, 0.5, edge_order=2), ("real",), [((5,),)]),
                 Case(lambda a: np.gradient(a * a, 2.0, 4.0)[1] + np.gradient(a, axis=0), ("real",), [((3, 4),)]),
                 Case(lambda a: np.gradient(a * a, [0.0, 0.5, 1.5, 1.7], edge_order=2) + np.gradient(a, [0, 1, 3, 4]),
                      ("real",), [((4,),)])],
    "polyval": [_u(lambda a: np.polyval([1.0, -2.0, 3.0], a)), Case(lambda p, x: np.polyval(p, x), ("real", "real"),
                                                                    [((3,), ()), ((4,), (3,))])],
    "interp": [Case(lambda a: np.interp(a, [-1.0, 0.0, 1.0, 1.5], [1.0, 3.0, -1.0, 0.5]), ("apart",), [((3,),)]),
               Case(lambda f: np.interp([0.25, 1.5, 2.0, 7.0], [0.0, 1.0, 2.0], f, left=0.5), ("real",), [((3,),)])],
    "linspace": [_u(lambda a: np.linspace(0.0, a, 5)),
                 Case(lambda a, b: np.linspace(a, b, 4, endpoint=False, axis=-1), ("real", "real"), [((), ()), ((2,), (2,))])],
    "isclose": [Case(lambda a: np.where(np.isclose(a, np.round(a)), 0.0, a * a), ("near_int",), [((3,),)])],
    "prod": [
        Case(lambda a: np.prod(a), ("real",), [((3,),), ((2, 3),)]),
        Case(lambda a: np.prod(a, axis=0), ("real",), [((5, 2),)]),
    ],
    "amax": [Case(lambda a: np.max(a * a, axis=-1) + a.max(), ("apart",), [((3,),), ((2, 3),)])],
    "amin": [Case(lambda a: np.min(a, axis=0) * a.min(), ("apart",), [((3,),), ((3, 2),)])],
    "cumsum": [Case(lambda a: np.cumsum(a * a, axis=-1), ("real",), [((4,),), ((2, 3),)])],
    "cumprod": [Case(lambda a: np.cumprod(a), ("real",), [((4,),), ((2, 2),)])],
    "diff": [Case(lambda a: np.diff(a * a), ("real",), [((4,),), ((2, 3),)]), Case(lambda a: np.diff(a, n=2, axis=0), ("real",), [((4, 2),)]),
             Case(lambda a: np.diff(a, prepend=0.5, append=a[..., :1] * a[..., -1:]), ("real",), [((4,),), ((2, 3),)]),
             Case(lambda a, b: np.diff(a, n=2, axis=0, prepend=b, append=[[1.0, 2.0]]), ("real", "real"), [((3, 2), (1, 2))])],
    "add.accumulate": [Case(lambda a: np.add.accumulate(a), ("real",), [((4,),), ((2, 3),)]),
                       Case(lambda a: np.add.accumulate(a * a, axis=1), ("real",), [((2, 3),)])],
    "multiply.accumulate": [Case(lambda a: np.multiply.accumulate(a, axis=-1), ("real",), [((4,),), ((2, 3),)])],
    "maximum.accumulate": [Case(lambda a: np.maximum.accumulate(a) * a, ("apart",), [((5,),), ((3, 2),)]),
                           Case(lambda a: np.maximum.accumulate(a * a, axis=-1), ("apart",), [((2, 4),)])],
    "minimum.accumulate": [Case(lambda a: np.minimum.accumulate(a, axis=1) + np.minimum.accumulate(a), ("apart",),
                                [((2, 4),)])],
    "trace": [Case(lambda a: np.trace(a * a), ("real",), [((3, 3),), ((2, 3),)])],
    "norm": [
        Case(lambda a: np.linalg.norm(a), ("real",), [((3,),), ((2, 3),)]),
        Case(lambda a: np.linalg.norm(a, axis=-1), ("real",), [((2, 3),)]),
        Case(lambda a: np.linalg.norm(a, ord=1) + np.linalg.norm(a, np.inf), ("apart",), [((4,),)], hessian=False),
        Case(lambda a: np.linalg.norm(a, ord=3, axis=0) + np.linalg.norm(a, -np.inf, axis=0, keepdims=True)
             + np.linalg.norm(a, 0, axis=0), ("apart",), [((3, 2),)]),
        Case(lambda a: np.linalg.norm(a, ord=1, axis=(1, 2)) * np.linalg.norm(a, -np.inf, axis=(2, 1), keepdims=True)[:, 0, 0]
             + np.linalg.norm(a[0], "fro") + np.linalg.norm(a, axis=(0, 2)).sum(), ("apart",), [((2, 3, 2),)]),
    ],
    "vector_norm": [Case(lambda a: np.linalg.vector_norm(a) + np.linalg.vector_norm(a, ord=1.5, axis=-1), ("apart",),
                         [((3,),), ((2, 3),)]),
                    Case(lambda a: np.linalg.vector_norm(a, ord=np.inf, axis=(0, 2), keepdims=True) * a
                         + np.linalg.vector_norm(a, ord=-2, axis=(2, 0))[:, None], ("apart",), [((2, 3, 2),)])],
    "matrix_norm": [Case(lambda a: np.linalg.matrix_norm(a) + np.linalg.matrix_norm(a, ord=-1, keepdims=True)
                         * np.linalg.matrix_norm(a, ord=np.inf), ("apart",), [((2, 3),), ((2, 2, 3),)])],
    # products
    "matmul": [
        Case(lambda a, b: a @ b, ("real", "real"), [((2, 3), (3, 2)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 2, 3), (3, 2))]),
        Case(lambda a: np.matmul(a, np.arange(6.0).reshape(3, 2)), ("real",), [((3,),), ((2, 3),)]),
    ],
    "dot": [Case(lambda a, b: np.dot(a, b), ("real", "real"), [((3,), (3,)), ((2, 3), (3,)), ((2, 3), (3, 2)), ((), (3,))]),
            Case(lambda a, b: a.dot(b), ("real", "real"), [((2, 3), (3,))])],
    "vdot": [Case(lambda a, b: np.vdot(a, b), ("real", "real"), [((3,), (3,)), ((2, 2), (2, 2))])],
    "inner": [Case(lambda a, b: np.inner(a, b), ("real", "real"), [((3,), (3,)), ((2, 3), (4, 3))])],
    "outer": [Case(lambda a, b: np.outer(a, b), ("real", "real"), [((3,), (2,)), ((2, 2), (3,))])],
    "tensordot": [Case(lambda a, b: np.tensordot(a, b, axes=([1], [0])), ("real", "real"), [((2, 3), (3, 2))]),
                  Case(lambda a, b: np.tensordot(a, b, axes=2), ("real", "real"), [((2, 3), (2, 3))])],
    "einsum": [
        Case(lambda a, b: np.einsum("ij,jk->ik", a, b), ("real", "real"), [((2, 3), (3, 2))]),
        Case(lambda a: np.einsum("ii", a), ("real",), [((3, 3),)]),
        Case(lambda a, b: np.einsum("...i,i", a, b), ("real", "real"), [((2, 3), (3,))]),
        Case(lambda a, b: np.einsum("i,j", a, b), ("real", "real"), [((2,), (3,))]),
    ],
    "cross": [Case(lambda a, b: np.cross(a, b), ("real", "real"), [((3,), (3,)), ((2, 3), (3,))])],
    "multi_dot": [Case(lambda a, b: np.linalg.multi_dot([a, b, a.T, a]), ("real", "real"), [((2, 3), (3, 3))]),
                  Case(lambda a, b: np.linalg.multi_dot([a[0], b, b.T, a[1]]) + np.linalg.multi_dot([a, b]).sum(),
                       ("real", "real"), [((2, 3), (3, 4))]),
                  Case(lambda a: np.linalg.multi_dot([a, np.arange(16.0).reshape(4, 4), a.T]), ("real",), [((2, 4),)])],
    "correlate": [Case(lambda a, b: np.correlate(a, b) + np.correlate(a, b, "full").sum(), ("real", "real"),
                       [((5,), (3,)), ((2,), (4,))]),
                  Case(lambda a, b: np.correlate(a, b, mode="same") * np.correlate(b, a, 1)[0], ("real", "real"),
                       [((4,), (3,)), ((2,), (5,))])],
    "kron": [Case(lambda a, b: np.kron(a, b), ("real", "real"), [((2,), (3,)), ((2, 2), (2, 3)), ((), (3,)), ((3,), (2, 2))])],
    # SciPy's special functions
    **({} if special is None else {
        "erf": [_u(lambda a: special.erf(a)), _u(lambda a: special.erf(a * 3) * a)],
        "erfc": [_u(lambda a: special.erfc(a))],
        "gammaln": [_u(lambda a: special.gammaln(a), "pos"), _u(lambda a: special.gammaln(a), "frac"),
                    _u(lambda a: special.gammaln(a * a + 5.0))],
        "psi": [_u(lambda a: special.psi(a), "pos", hessian=False), _u(lambda a: special.digamma(a), "frac", hessian=False)],
        "expit": [_u(lambda a: special.expit(a)), _u(lambda a: special.expit(a * 400.0))],
        "log_expit": [_u(lambda a: special.log_expit(a)), _u(lambda a: special.log_expit(a * 400.0))],
        "logit": [_u(lambda a: special.logit(a), "prob")],
        "xlogy": [_b(lambda a, b: special.xlogy(a, b), "real", "pos"), _u(lambda a: special.xlogy(a * np.array([0.0, 1.0, 2.0]), 3.0))],
        "xlog1py": [_b(lambda a, b: special.xlog1py(a, b), "real", "pos")],
        # SciPy's signal processing
        "signal.convolve": [
            Case(lambda a, b: signal.convolve(a, b) + signal.convolve(a, b, "same").sum(), ("real", "real"),
                 [((4,), (3,)), ((2,), (5,))]),
            Case(lambda a, b: signal.convolve(a, b, mode="valid", method="direct") * 2.0, ("real", "real"),
                 [((3, 4), (2, 2)), ((2, 2), (3, 4))]),
            Case(lambda a: signal.convolve(a, np.array([[0.5, -1.0], [2.0, 0.25]]), "same"), ("real",), [((2, 3),)])],
        "signal.correlate": [
            Case(lambda a, b: signal.correlate(a, b) * signal.correlate(a, b, "valid").sum(), ("real", "real"),
                 [((4,), (2,)), ((2, 3), (2, 2))]),
            Case(lambda a, b: signal.correlate(a, b, "same"), ("real", "real"), [((3, 2), (2, 3))])],
        "signal.convolve2d": [
            Case(lambda a, b: signal.convolve2d(a, b) + signal.convolve2d(a, b, "same", fillvalue=0.5).sum(),
                 ("real", "real"), [((3, 3), (2, 2)), ((2, 2), (2, 3))]),
            Case(lambda a, b: signal.convolve2d(a, b, "same", boundary="wrap") * signal.convolve2d(a, b, "valid")[0, 0]
                 + signal.convolve2d(a, b, "same", boundary="symm"), ("real", "real"), [((3, 4), (2, 3))])],
        "signal.correlate2d": [
            Case(lambda a, b: signal.correlate2d(a, b, "same") + signal.correlate2d(a, b, "same", "symm")
                 * signal.correlate2d(a, b, "full", "wrap")[:3, :4], ("real", "real"), [((3, 4), (2, 2))]),
            Case(lambda a, b: signal.correlate2d(a, b, mode="valid") * 2.0, ("real", "real"), [((2, 2), (3, 4))])],
    }),
    # small dense linear algebra
    "det": [Case(lambda a: np.linalg.det(a + 3 * np.eye(a.shape[-1])), ("real",),
                 [((1, 1),), ((2, 2),), ((3, 3),), ((4, 4),), ((2, 3, 3),)])],
    "inv": [Case(lambda a: np.linalg.inv(a + 4 * np.eye(a.shape[-1])), ("real",), [((2, 2),), ((3, 3),), ((4, 4),)])],
    "solve": [
        Case(lambda a, b: np.linalg.solve(a + 4 * np.eye(3), b), ("real", "real"), [((3, 3), (3,)), ((3, 3), (3, 2))]),
        Case(lambda b: np.linalg.solve(np.arange(36.0).reshape(6, 6) + 40 * np.eye(6), b), ("real",), [((6,),)]),
    ],
    # structure
    "reshape": [Case(lambda a: np.reshape(a * a, (3, 2)) + a.reshape(3, 2), ("real",), [((2, 3),), ((6,),)])],
    "transpose": [Case(lambda a: np.transpose(a) * a.T, ("real",), [((2, 3),)]),
                  Case(lambda a: a.transpose(2, 0, 1) * 2, ("real",), [((2, 3, 2),)])],
    "ravel": [Case(lambda a: np.ravel(a) * a.flatten(), ("real",), [((2, 3),)])],
    "squeeze": [Case(lambda a: np.squeeze(a) * 2, ("real",), [((1, 3),), ((3, 1),)])],
    "expand_dims": [Case(lambda a: np.expand_dims(a, 0) * a[:, None], ("real",), [((3,),)])],
    "swapaxes": [Case(lambda a: np.swapaxes(a, 0, 1) * a.swapaxes(1, 0), ("real",), [((2, 3),)])],
    "moveaxis": [Case(lambda a: np.moveaxis(a, 0, -1) * 3, ("real",), [((2, 3, 2),)])],
    "broadcast_to": [Case(lambda a: np.broadcast_to(a, (2, 3)) * 1.5, ("real",), [((3,),), ((),)])],
    "atleast_1d": [Case(lambda a: np.atleast_1d(a) * a, ("real",), [((),), ((3,),)])],
    "atleast_2d": [Case(lambda a: np.atleast_2d(a) * 2, ("real",), [((3,),)])],
    "flip": [Case(lambda a: np.flip(a) * a + a[::-1], ("real",), [((4,),), ((2, 3),)]),
             Case(lambda a: a[::-2, 1:] * a[::2, -1:], ("real",), [((3, 3),)])],
    "fliplr": [Case(lambda a: np.fliplr(a) * a, ("real",), [((2, 3),)])],
    "flipud": [Case(lambda a: np.flipud(a) * a, ("real",), [((2, 3),)])],
    "roll": [Case(lambda a: np.roll(a, 1) * a, ("real",), [((4,),)]), Case(lambda a: np.roll(a, -1, axis=1) * a, ("real",), [((2, 3),)])],
    "tile": [Case(lambda a: np.tile(a, 2) * 2, ("real",), [((3,),)])],
    "repeat": [Case(lambda a: np.repeat(a, 2) * 2, ("real",), [((3,),)])],
    "take": [Case(lambda a: np.take(a, [2, 0, 0]) * a[[1, 1, 2]], ("real",), [((3,),)])],
    "append": [Case(lambda a: np.append(a, 1.5) * 2, ("real",), [((3,),), ((2, 2),)]),
               Case(lambda a, b: np.append(a, b, axis=0), ("real", "real"), [((2, 3), (1, 3))])],
    "insert": [Case(lambda a: np.insert(a, 1, a[0] * a[-1]), ("real",), [((3,),)]),
               Case(lambda a: np.insert(a, [0, 2], 0.5, axis=1), ("real",), [((2, 3),)])],
    "delete": [Case(lambda a: np.delete(a * a, [0, 2]), ("real",), [((4,),)]),
               Case(lambda a: np.delete(a, 1, axis=0), ("real",), [((3, 2),)])],
    "split": [Case(lambda a: np.split(a, [1, 3])[1] * np.split(a, 2)[0], ("real",), [((4,),)])],
    "array_split": [Case(lambda a: np.array_split(a, 3)[0] * 2, ("real",), [((5,),)])],
    "hsplit": [Case(lambda a: np.hsplit(a, 2)[1], ("real",), [((2, 4),)])],
    "vsplit": [Case(lambda a: np.vsplit(a, [1])[1], ("real",), [((3, 2),)])],
    "meshgrid": [Case(lambda a, b: np.meshgrid(a, b)[0] * np.meshgrid(a, b, indexing="ij")[1].T, ("real", "real"),
                      [((3,), (2,))])],
    "broadcast_arrays": [Case(lambda a, b: np.broadcast_arrays(a, b)[1] * a, ("real", "real"), [((2, 3), (3,))])],
    "block": [Case(lambda a, b: np.block([[a, b], [b, a]]) * 2.0, ("real", "real"), [((2, 2), (2, 2))])],
    "dstack": [Case(lambda a: np.dstack([a, a * a]), ("real",), [((3,),), ((2, 3),)])],
    "atleast_3d": [Case(lambda a: np.atleast_3d(a) * 2.0, ("real",), [((),), ((3,),), ((2, 3),)])],
    "resize": [Case(lambda a: np.resize(a, (3, 4)) * 2.0, ("real",), [((5,),), ((2, 3),)])],
    "rot90": [Case(lambda a: np.rot90(a) * a[:1].T + np.rot90(a, 2).sum(), ("real",), [((2, 3),)])],
    "sliding_window_view": [
        Case(lambda a: np.lib.stride_tricks.sliding_window_view(a * a, 3) @ np.array([1.0, -2.0, 1.0]), ("real",),
             [((5,),)]),
        Case(lambda a: np.lib.stride_tricks.sliding_window_view(a, (2, 2)).sum(axis=(-1, -2))
             + np.lib.stride_tricks.sliding_window_view(a, 2, axis=0)[:, 1:, 0], ("real",), [((3, 3),)]),
        Case(lambda a: np.lib.stride_tricks.sliding_window_view(a, (2, 1), axis=(-1, 0)) * 2.0, ("real",), [((3, 4),)]),
    ],
    "take_along_axis": [Case(lambda a: np.take_along_axis(a, np.array([[2, 0], [1, 1]]), axis=1) * a[:, :1], ("real",),
                             [((2, 3),)])],
    "tril": [Case(lambda a: np.tril(a) + np.tril(a, -1) * 2 + np.tril(a, 1) * 3, ("real",), [((3, 3),), ((2, 3),), ((2, 3, 4),)])],
    "triu": [Case(lambda a: np.triu(a) + np.triu(a, 1) * 2 + np.triu(a, -1) * 3, ("real",), [((3, 3),), ((3, 2),)])],
    "pad": [
        Case(lambda a: np.pad(a, 1) + 0.0, ("real",), [((3,),), ((2, 3),)]),
        Case(lambda a: np.pad(a, ((1, 2), (2, 1)), constant_values=((1.0, 2.0), (3.0, 4.0))), ("real",), [((2, 3),)]),
        Case(lambda a: np.pad(a * a, 2, mode="edge") + np.pad(a, 2, mode="wrap"), ("real",), [((3,),), ((2, 3),)]),
        Case(lambda a: np.pad(a, (2, 1), mode="reflect") * np.pad(a, (2, 1), mode="symmetric"), ("real",), [((4,),)]),
        Case(lambda a: np.pad(a, 1, constant_values=a[0] * a[1]), ("real",), [((3,),)]),
    ],
    "diagonal": [Case(lambda a: np.diagonal(a) * a.diagonal(), ("real",), [((3, 3),), ((2, 3),)])],
    "diag": [Case(lambda a: np.diag(a) * 2, ("real",), [((3,),), ((3, 3),)])],
    "copy": [Case(lambda a: np.copy(a) * a.copy(), ("real",), [((3,),)])],
    "concatenate": [Case(lambda a, b: np.concatenate([a, b * b]), ("real", "real"), [((3,), (2,))]),
                    Case(lambda a, b: np.concatenate((a, b), axis=1), ("real", "real"), [((2, 3), (2, 2))])],
    "stack": [Case(lambda a, b: np.stack([a, b, a * b]), ("real", "real"), [((3,), (3,)), ((), ())]),
              Case(lambda a, b: np.stack((a, b), axis=-1), ("real", "real"), [((2,), (2,))])],
    "hstack": [Case(lambda a, b: np.hstack([a, b]), ("real", "real"), [((3,), (2,))])],
    "vstack": [Case(lambda a, b: np.vstack([a, b]), ("real", "real"), [((3,), (3,))])],
    "column_stack": [Case(lambda a, b: np.column_stack([a, b]), ("real", "real"), [((3,), (3,))])],
    "zeros_like": [Case(lambda a: _assign(np.zeros_like(a), a), ("real",), [((3,),)])],
    "ones_like": [Case(lambda a: np.ones_like(a) * a, ("real",), [((3,),), ((2, 2),)])],
    "empty_like": [Case(lambda a: _assign(np.empty_like(a), a), ("real",), [((3,),)])],
    "full_like": [Case(lambda a: np.full_like(a, 2.5) * a, ("real",), [((3,),)])],
    "shape": [Case(lambda a: a * np.shape(a)[0], ("real",), [((3,),)])],
    "ndim": [Case(lambda a: a * np.ndim(a), ("real",), [((3,),), ((2, 2),)])],
    "size": [Case(lambda a: a * np.size(a), ("real",), [((3,),)])],
}


def _assign(out, a):
    out[0] = a[0] * a[1]
    out[1:] = np.sin(a[1:])
    return out


#: rows added for issue 13 (NumPy as real code writes it); test_tiers compiles them all
ISSUE_13 = ["rint", "round", "trunc", "fix", "fmod", "remainder", "floor_divide", "divmod", "copysign", "cbrt",
            *(["erf", "erfc", "gammaln", "psi", "expit", "log_expit", "logit", "xlogy", "xlog1py"] if special else []),
            "sinc", "heaviside", "ptp", "nanmax", "nanmin", "count_nonzero", "trapezoid", "gradient", "polyval",
            "interp", "linspace", "isclose", "all", "any", "nanprod", "nanvar", "nanstd", "cumulative_sum",
            "cumulative_prod", "ediff1d", "convolve", "vander", "meshgrid", "broadcast_arrays", "block", "dstack",
            "atleast_3d", "rot90", "take_along_axis", "cov", "corrcoef", "sort", "median", "quantile",
            "percentile", "fmax", "fmin", "nan_to_num", "piecewise", "signbit", "real",
            "imag", "conj", "append", "insert", "delete", "split", "array_split", "hsplit", "vsplit", "isnan", "isinf", "isfinite", "average", "nansum", "nanmean", "kron", "det", "inv",
            "solve", "tril", "triu", "pad"]

#: rows added for issue 26 (operations of realistic programs); test_tiers compiles them all
ISSUE_26 = ["maximum.accumulate", "minimum.accumulate", "diff", "norm", "vector_norm", "matrix_norm", "multi_dot",
            "correlate", "argmax", "argmin", "sliding_window_view", "take", "take_along_axis",
            *(["signal.convolve", "signal.correlate", "signal.convolve2d", "signal.correlate2d"] if signal else [])]
