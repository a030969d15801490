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
}


CASES: dict[str, list[Case]] = {
    # arithmetic
    "add": [_b(lambda a, b: np.add(a, b)), _b(lambda a, b: a + b * 2.5 + 1)],
    "subtract": [_b(lambda a, b: np.subtract(a, b)), _b(lambda a, b: 1.0 - a - b)],
    "multiply": [_b(lambda a, b: np.multiply(a, b)), _b(lambda a, b: 3 * a * b * b)],
    "divide": [_b(lambda a, b: np.divide(a, b), "real", "pos"), _b(lambda a, b: (a / b) / 3, "pos", "pos")],
    "negative": [_u(lambda a: np.negative(a) * a), _u(lambda a: -(-a) + a)],
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
    "log1p": [_u(lambda a: np.log1p(a), "pos")],
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
    # piecewise
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
    "prod": [
        Case(lambda a: np.prod(a), ("real",), [((3,),), ((2, 3),)]),
        Case(lambda a: np.prod(a, axis=0), ("real",), [((5, 2),)]),
    ],
    "amax": [Case(lambda a: np.max(a * a, axis=-1) + a.max(), ("apart",), [((3,),), ((2, 3),)])],
    "amin": [Case(lambda a: np.min(a, axis=0) * a.min(), ("apart",), [((3,),), ((3, 2),)])],
    "cumsum": [Case(lambda a: np.cumsum(a * a, axis=-1), ("real",), [((4,),), ((2, 3),)])],
    "cumprod": [Case(lambda a: np.cumprod(a), ("real",), [((4,),), ((2, 2),)])],
    "diff": [Case(lambda a: np.diff(a * a), ("real",), [((4,),), ((2, 3),)]), Case(lambda a: np.diff(a, n=2, axis=0), ("real",), [((4, 2),)])],
    "trace": [Case(lambda a: np.trace(a * a), ("real",), [((3, 3),), ((2, 3),)])],
    "norm": [
        Case(lambda a: np.linalg.norm(a), ("real",), [((3,),), ((2, 3),)]),
        Case(lambda a: np.linalg.norm(a, axis=-1), ("real",), [((2, 3),)]),
        Case(lambda a: np.linalg.norm(a, ord=1) + np.linalg.norm(a, np.inf), ("apart",), [((4,),)], hessian=False),
    ],
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
