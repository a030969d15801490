"""Random array programs give the scalar tier's results on the array tier.

Hypothesis composes programs from the operations the array tier traces
(element functions with broadcasting, products with constant matrices,
reductions, slices, concatenation, branches), and each is run on both tiers:
values, Jacobians and gradients must agree to rounding.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symjac as sj

N = 4
_rng = np.random.default_rng(5)
M = _rng.normal(size=(N, N)) / 2
C = _rng.normal(size=N)

UNARY = {
    "sin": np.sin,
    "tanh": np.tanh,
    "square": lambda a: a * a,
    "soft": lambda a: np.sqrt(a * a + 1.0),
    "log1p_sq": lambda a: np.log1p(a**2),
    "exp_tanh": lambda a: np.exp(np.tanh(a)),
    "leaky": lambda a: np.where(a > 0, a, 0.1 * a),
    "M_at": lambda a: M @ a,
    "at_M": lambda a: a @ M,
    "reverse": lambda a: a[::-1],
    "centred": lambda a: a - a.mean(),
    "shifted_max": lambda a: a - np.max(a),
    "lse": lambda a: a * np.log(np.sum(np.exp(a))),
    "outer_sum": lambda a: np.outer(a, np.cos(a)).sum(axis=0),
    "plus_const": lambda a: a + C,
    "matrix_round_trip": lambda a: (a.reshape(2, 2).T * 2.0).ravel(),
}
BINARY = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "max": np.maximum,
    "select": lambda a, b: np.where(a > b, a * b, b - a),
    "splice": lambda a, b: np.concatenate([a[:2], b[2:]]),
    "stack_sum": lambda a, b: np.stack([a, b]).sum(axis=0) * 0.5,
}

step = st.one_of(
    st.tuples(st.just("u"), st.sampled_from(sorted(UNARY)), st.integers(0, 5)),
    st.tuples(st.just("b"), st.sampled_from(sorted(BINARY)), st.integers(0, 5), st.integers(0, 5)),
)


def _program(steps):
    def f(x):
        regs = [x]
        for s in steps:
            if s[0] == "u":
                regs.append(UNARY[s[1]](regs[s[2] % len(regs)]))
            else:
                regs.append(BINARY[s[1]](regs[s[2] % len(regs)], regs[s[3] % len(regs)]))
        # every step reaches the output
        return regs[-1] + sum(r * (0.1 * (k + 1)) for k, r in enumerate(regs[1:-1]))

    return f


def _on(tier, T, *args):
    with sj.using_tier(tier):
        out = T(*args)
        info = T.info(*args)
    return out, info


@pytest.fixture(autouse=True)
def _tape_only():
    with sj.compiling("never"):  # the scalar tier on its tape interpreter: no compile per example
        yield


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(step, min_size=1, max_size=6), st.lists(st.floats(-1.5, 1.5), min_size=N, max_size=N))
def test_random_array_programs_agree_across_tiers(steps, values):
    f = _program(steps)
    # distinct entries, none the negative of another: a max over entries has no tie to split
    # (the scalar tier splits ties pairwise, the array tier equally; both are documented)
    x = np.array(values) * 0.1 + np.array([0.11, 0.23, 0.37, 0.51])

    def loss(y):
        return np.sum(f(y) ** 2)

    for T in (sj.jit(f), sj.jacobian(f), sj.grad(loss)):
        expected, _ = _on("scalar", T, x)
        got, info = _on("array", T, x)
        assert info.tier == "array", info.why
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-11)
