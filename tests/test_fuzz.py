"""Property-based fuzzing: random NumPy programs against NumPy, HIPS autograd,
finite differences and SymPy.

Each example is a random straight-line program over the supported primitives
(``fuzz_programs.py``: elementwise functions inside their domains, broadcasting
binary operations, reductions with axes, contractions, indexing and slicing,
reshapes, joins, ``where``/``maximum``/``clip``..., 0-d to 3-d, one to three
arguments and random ``argnums``), called on random inputs.  The properties:

* ``jit`` gives NumPy's value, shape and dtype;
* the Jacobian equals autograd's, and along random directions the finite
  differences of the program itself; JVP and VJP equal the Jacobian
  contracted with ``v`` / ``u`` and satisfy ⟨u, J v⟩ = ⟨uᵀJ, v⟩; ``grad`` and
  ``divergence`` where they apply;
* the Hessian equals autograd's and mixed finite differences; ``hvp``,
  ``laplacian``, ``jacobian(grad)`` and the Jacobians of a ``jvp``/``vjp``
  called inside a traced function agree with it;
* float32 programs keep NumPy's dtypes and agree with the float64 references
  to float32 accuracy;
* the symbolic Jacobian, evaluated by SymPy, equals the compiled one;
* a small sample is compiled to Numba kernels, which must give the tape's bits;
* with IEEE special values (inf, nan, -0.0, huge, subnormal) as inputs and
  constants, ``jit`` gives NumPy's values: NaN where NumPy has NaN, the same
  infinities, the same finite values (the sign of a zero sum aside: NumPy
  starts sums at +0.0, see docs/numerics.md).

Finite differences are only compared when every point of the stencil takes
the same branches (of ``where``, ``maximum``, ``abs``, ``floor``...) as the
point itself, and examples whose kinks are within a hair of a tie (where
conventions legitimately differ) are rejected.  Profiles: ``fuzz_profiles.py``.
"""

from __future__ import annotations

import warnings

import fuzz_programs as fp
import numpy as np
import pytest
import sympy as sp
from fuzz_profiles import fuzz_settings
from hypothesis import assume, event, given, note
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import symjac as sj
from symjac.testing import numerical_jvp, numerical_second

autograd = pytest.importorskip("autograd")
AUTOGRAD = fp.autograd_namespace()


pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


# ----- examples ---------------------------------------------------------------------------


class Case:
    """A program, its arguments and what to differentiate (prints as a reproducer)."""

    def __init__(self, program: fp.Program, args: list, argnums, seed: int):
        self.program, self.args, self.argnums, self.seed = program, args, argnums, seed

    @property
    def nums(self) -> tuple[int, ...]:
        return self.argnums if isinstance(self.argnums, tuple) else (self.argnums,)

    @property
    def n_out(self) -> int:
        return len(self.program.outputs)

    def __repr__(self) -> str:
        args = ", ".join(f"np.array({np.asarray(a).tolist()!r}, dtype=np.{np.asarray(a).dtype})"
                         if isinstance(a, np.ndarray) else repr(a) for a in self.args)
        return f"\n{self.program.source}\nargs = [{args}]\nargnums = {self.argnums!r}\n"


@st.composite
def cases(draw, dtype=np.float64, max_depth=4, max_out_size=12):
    # Float32 programs get float32 constant arrays, and NumPy functions of constants
    # only on float32 scalars: a float64 constant (an array, or np.sin(0.5), a
    # np.float64) makes NumPy compute in float64, which symjac does not (the compute
    # dtype comes from the arguments only) -- test_fuzz_regressions.py::
    # test_float64_constant_makes_float32_code_compute_in_float64.  Float64
    # arguments mixed in (below) still exercise promotion.
    const_dtype = "float32" if dtype == np.float32 else ""
    program = draw(fp.programs(max_depth=max_depth, max_out_size=max_out_size, const_dtype=const_dtype))
    width = 32 if dtype == np.float32 else 64
    elements = st.floats(-2, 2, width=width, allow_subnormal=False)
    args = []
    for shape in program.shapes:
        if shape == () and dtype == np.float64 and draw(st.integers(0, 3)) == 0:
            args.append(draw(elements))  # a Python float: a 0-d float64 runtime input
        elif dtype == np.float32 and draw(st.integers(0, 5)) == 0:  # mixed precision: NumPy promotes
            args.append(draw(arrays(np.float64, shape, elements=elements, fill=st.nothing())))
        else:
            args.append(draw(arrays(dtype, shape, elements=elements, fill=st.nothing())))
    n = len(args)
    nums = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
    argnums = nums[0] if len(nums) == 1 and draw(st.booleans()) else tuple(nums)
    return Case(program, args, argnums, draw(st.integers(0, 2**32 - 1)))


# ----- running the program ----------------------------------------------------------------


def _outputs(value, n_out: int) -> list:
    return list(value) if n_out > 1 else [value]


FD_ROOM = 0.05  # finite differences need this distance to a singular point


def _reference(case: Case, tie: float):
    """NumPy's outputs, after rejecting examples with a kink within ``tie`` of a tie,
    and the kinks' decisions (``None`` if finite differences cannot be trusted here)."""
    with np.errstate(all="raise", under="ignore"):  # valid by construction: NaN or overflow is a generator bug
        out = _outputs(case.program.function(fp.NUMPY)(*case.args), case.n_out)
    rec = fp.Recorder()
    case.program.function(rec)(*case.args)
    decisions, margin = rec.decisions, min(rec.margins, default=np.inf)
    if min(rec.singular, default=np.inf) < FD_ROOM:
        decisions = None
    n = len(case.program.lines)
    event(f"program lines: {'0-2' if n <= 2 else '3-5' if n <= 5 else '6-10' if n <= 10 else '11+'}")
    if margin < tie:
        event("rejected: a kink at a tie")
    assume(margin >= tie)
    return out, decisions


def _same_branches(case: Case, decisions):
    """``f`` that records whether any call takes another branch than ``decisions``."""
    state = {"ok": decisions is not None}

    def f(*args):
        rec = fp.Recorder()
        out = case.program.function(rec)(*args)
        if decisions is None or len(rec.decisions) != len(decisions) or any(
            d.shape != e.shape or not np.array_equal(d, e) for d, e in zip(rec.decisions, decisions, strict=True)
        ):
            state["ok"] = False
        return out

    return f, state


def _oracle(case: Case, k: int):
    """Output ``k`` of the program under autograd.numpy."""
    fn = case.program.function(AUTOGRAD)
    # (* 1.0: a constant int output has no vector space in autograd)
    return (lambda *a: fn(*a)[k] * 1.0) if case.n_out > 1 else (lambda *a: fn(*a) * 1.0)


def _ag(op, fn, *index, shape=None):
    def run(*args):
        with warnings.catch_warnings():
            # autograd warns when an output does not depend on the argument (a zero block)
            warnings.filterwarnings("ignore", message="Output seems independent of input")
            out = op(fn, *index)(*args)
        # autograd sometimes returns a 0-d argument's derivative with shape (1,)
        return out if shape is None or np.shape(out) == shape else np.reshape(out, shape)

    return run


def _f64(args) -> list:
    return [np.asarray(a, dtype=np.float64) if isinstance(a, np.ndarray) else a for a in args]


# ----- comparisons ------------------------------------------------------------------------


def _close(got, want, rtol: float, atol: float, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(w64), initial=0.0)))
    err = float(np.max(np.abs(g64 - w64), initial=0.0))
    assert np.all(np.isfinite(g64)), f"{what}: non-finite result {got}"
    assert err <= atol + rtol * scale, (
        f"{what}: max |error| {err:.3g} > {atol + rtol * scale:.3g}\n  got:  {g64.reshape(-1)[:12]}\n"
        f"  want: {w64.reshape(-1)[:12]}"
    )


def _blocks(result, case: Case, depth: int = 1) -> dict:
    """A transform result nested [output][argnum]... as {(k, i, ...): array}."""
    per_out = result if case.n_out > 1 else (result,)
    tuple_args = isinstance(case.argnums, tuple)
    out = {}
    for k, r in enumerate(per_out):
        if depth == 1:
            for m, i in enumerate(case.nums):
                out[(k, i)] = r[m] if tuple_args else r
        else:
            for m, i in enumerate(case.nums):
                for p, j in enumerate(case.nums):
                    out[(k, i, j)] = r[m][p] if tuple_args else r
    return out


def _per_arg(result, case: Case) -> dict:
    return dict(zip(case.nums, result if isinstance(case.argnums, tuple) else (result,), strict=True))


def _pack_args(values: dict, case: Case):
    return tuple(values[i] for i in case.nums) if isinstance(case.argnums, tuple) else values[case.nums[0]]


def _contract_in(J, v, x_ndim: int):
    return np.tensordot(J, v, axes=x_ndim) if x_ndim else J * v


def _contract_out(u, J, y_ndim: int):
    return np.tensordot(u, J, axes=y_ndim) if y_ndim else u * J


# ----- the properties ---------------------------------------------------------------------


@fuzz_settings("first")
@given(cases())
def test_values_and_first_derivatives(case):
    prog, args = case.program, case.args
    want, decisions = _reference(case, tie=1e-6)
    f = prog.function(fp.NUMPY)
    note(f"ops: {sorted(prog.ops)}")

    got = _outputs(sj.jit(f)(*args), case.n_out)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert np.asarray(g).dtype == np.asarray(w).dtype, f"value {k}: dtype {np.asarray(g).dtype}, numpy {np.asarray(w).dtype}"
        _close(g, w, 1e-11, 1e-12, f"value {k}")

    J = _blocks(sj.jacobian(f, case.argnums)(*args), case)
    for (k, i), block in J.items():
        assert block.shape == np.shape(want[k]) + np.shape(args[i]), "layout: out_shape + in_shape"
        ref = _ag(autograd.jacobian, _oracle(case, k), i, shape=block.shape)(*args)
        _close(block, ref, 1e-9, 1e-10, f"jacobian[out {k}, arg {i}] vs autograd")

    rng = np.random.default_rng(case.seed)
    v = {i: rng.standard_normal(np.shape(args[i])) for i in case.nums}
    u = [rng.standard_normal(np.shape(w)) for w in want]
    jv = _outputs(sj.jvp(f, case.argnums)(*args, _pack_args(v, case)), case.n_out)
    uj = _per_arg(sj.vjp(f, case.argnums)(*args, tuple(u) if case.n_out > 1 else u[0]), case)
    for k in range(case.n_out):
        want_jv = sum(_contract_in(J[k, i], v[i], np.ndim(args[i])) for i in case.nums)
        _close(jv[k], want_jv, 1e-10, 1e-11, f"jvp[out {k}] vs jacobian · v")
    for i in case.nums:
        want_uj = sum(_contract_out(u[k], J[k, i], np.ndim(want[k])) for k in range(case.n_out))
        _close(uj[i], want_uj, 1e-10, 1e-11, f"vjp[arg {i}] vs uᵀ · jacobian")
    lhs = sum(float(np.vdot(u[k], jv[k])) for k in range(case.n_out))
    rhs = sum(float(np.vdot(uj[i], v[i])) for i in case.nums)
    _close(lhs, rhs, 1e-10, 1e-11, "⟨u, J v⟩ = ⟨uᵀJ, v⟩")

    for i in case.nums:  # finite differences of the program itself, one argument at a time
        g, same = _same_branches(case, decisions)
        h = 1e-3 * max(1.0, float(np.max(np.abs(args[i]), initial=0.0)))
        fd, fd_half = numerical_jvp(g, args, i, v[i], h), numerical_jvp(g, args, i, v[i], h / 2)
        if not same["ok"]:
            event("finite differences skipped: a kink or singularity within reach")
            continue
        got_fd = np.concatenate([np.reshape(_contract_in(J[k, i], v[i], np.ndim(args[i])), -1)
                                 for k in range(case.n_out)])
        # the stencil's own error (large for fast oscillations such as sin(170 x)),
        # estimated from two step sizes, is allowed on top of the tolerance
        stencil = float(np.max(np.abs(fd - fd_half), initial=0.0))
        _close(got_fd, fd_half, 1e-5, 1e-6 + stencil, f"jacobian[arg {i}] · v vs finite differences")

    if case.n_out == 1 and np.shape(want[0]) == ():
        grads = _per_arg(sj.grad(f, case.argnums)(*args), case)
        for i in case.nums:
            ref = _ag(autograd.grad, _oracle(case, 0), i, shape=np.shape(args[i]))(*args)
            _close(grads[i], ref, 1e-9, 1e-10, f"grad[arg {i}] vs autograd")
    if case.n_out == 1 and not isinstance(case.argnums, tuple) and np.shape(want[0]) == np.shape(args[case.argnums]):
        n = int(np.size(args[case.argnums]))
        trace = np.trace(np.reshape(J[0, case.argnums], (n, n))) if n else 0.0
        _close(sj.divergence(f, case.argnums)(*args), trace, 1e-10, 1e-11, "divergence vs trace(J)")


@fuzz_settings("second")
@given(cases(max_depth=3, max_out_size=6))
def test_second_derivatives(case):
    prog, args = case.program, case.args
    want, decisions = _reference(case, tie=1e-6)
    f = prog.function(fp.NUMPY)
    note(f"ops: {sorted(prog.ops)}")
    H = _blocks(sj.hessian(f, case.argnums)(*args), case, depth=2)
    for (k, i, j), block in H.items():
        assert block.shape == np.shape(want[k]) + np.shape(args[i]) + np.shape(args[j])
        ref = _ag(autograd.jacobian, _ag(autograd.jacobian, _oracle(case, k), i), j, shape=block.shape)(*args)
        _close(block, ref, 1e-8, 1e-9, f"hessian[out {k}, args {i}, {j}] vs autograd")

    rng = np.random.default_rng(case.seed)
    for i in case.nums:
        v, w = rng.standard_normal(np.shape(args[i])), rng.standard_normal(np.shape(args[i]))
        g, same = _same_branches(case, decisions)
        fd = numerical_second(g, args, i, v, w)
        if not same["ok"]:
            event("finite differences skipped: a kink or singularity within reach")
            continue
        nd = np.ndim(args[i])
        got = np.concatenate([np.reshape(_contract_in(_contract_in(H[k, i, i], w, nd), v, nd), -1)
                              for k in range(case.n_out)])
        # (mixed differences of oscillating functions are coarse: symjac.testing's own
        # second-derivative check allows 1e-3 as well)
        _close(got, fd, 1e-3, 1e-4, f"hessian[arg {i}] (v, w) vs finite differences")

    if case.n_out == 1 and not isinstance(case.argnums, tuple):
        # transforms called inside a traced function: d/dx (J(x) v) and d/dx (uᵀ J(x))
        i, nd, nd_out = case.argnums, np.ndim(args[case.argnums]), np.ndim(want[0])
        v, u = rng.standard_normal(np.shape(args[i])), rng.standard_normal(np.shape(want[0]))
        jvp_f, vjp_f = sj.jvp(f, i), sj.vjp(f, i)
        inner_jvp = sj.jacobian(lambda *a: jvp_f(*a, v) * 1.0, i)(*args)
        _close(inner_jvp, _contract_in(H[0, i, i], v, nd), 1e-9, 1e-10, "jacobian of a traced jvp vs hessian · v")
        inner_vjp = sj.jacobian(lambda *a: vjp_f(*a, u) * 1.0, i)(*args)
        _close(inner_vjp, _contract_out(u, H[0, i, i], nd_out), 1e-9, 1e-10, "jacobian of a traced vjp vs uᵀ · hessian")

    if case.n_out == 1 and np.shape(want[0]) == ():
        v = {i: rng.standard_normal(np.shape(args[i])) for i in case.nums}
        hv = _per_arg(sj.hvp(f, case.argnums)(*args, _pack_args(v, case)), case)
        for i in case.nums:
            want_hv = sum(_contract_in(H[0, i, j], v[j], np.ndim(args[j])) for j in case.nums)
            _close(hv[i], want_hv, 1e-9, 1e-10, f"hvp[arg {i}] vs hessian · v")
        if not isinstance(case.argnums, tuple):
            i = case.argnums
            n = int(np.size(args[i]))
            trace = np.trace(np.reshape(H[0, i, i], (n, n))) if n else 0.0
            _close(sj.laplacian(f, i)(*args), trace, 1e-9, 1e-10, "laplacian vs trace(H)")
            _close(sj.jacobian(sj.grad(f, i), i)(*args), H[0, i, i], 1e-10, 1e-11, "jacobian(grad) vs hessian")


@fuzz_settings("float32")
@given(cases(dtype=np.float32))
def test_float32_programs(case):
    prog, args = case.program, case.args
    want32, decisions = _reference(case, tie=1e-3)
    f = prog.function(fp.NUMPY)
    note(f"ops: {sorted(prog.ops)}")
    args64 = _f64(args)
    want64 = _outputs(prog.function(fp.NUMPY_AS_FLOAT64)(*args64), case.n_out)
    got = _outputs(sj.jit(f)(*args), case.n_out)
    for k in range(case.n_out):
        assert np.asarray(got[k]).dtype == np.asarray(want32[k]).dtype, (
            f"value {k}: dtype {np.asarray(got[k]).dtype}, numpy {np.asarray(want32[k]).dtype}")
        # as accurate as NumPy's own evaluation (float32 intermediates included), up to rounding
        slack = 8 * float(np.max(np.abs(np.asarray(want32[k], np.float64) - want64[k]), initial=0.0))
        if np.asarray(want32[k]).dtype == np.float64:  # NumPy promoted: float64 accuracy is due
            _close(got[k], want64[k], 1e-11, 1e-12 + slack, f"promoted value {k} vs float64")
        else:
            _close(got[k], want64[k], 1e-4, 1e-5 + slack, f"float32 value {k} vs float64")
    J = _blocks(sj.jacobian(f, case.argnums)(*args), case)
    J64 = _blocks(sj.jacobian(f, case.argnums)(*args64), case)
    for (k, i), block in J.items():
        ref = _ag(autograd.jacobian, _oracle(case, k), i, shape=block.shape)(*args64)
        # (float32 constants in the program: autograd evaluates e.g. log(np.float32(0.5)) in float32)
        _close(J64[k, i], ref, 1e-6, 1e-7, f"jacobian[out {k}, arg {i}] at float32 points vs autograd")
        assert block.dtype == np.result_type(np.asarray(want32[k]).dtype, np.asarray(args[i]).dtype, np.float32)
        _close(block, ref, 2e-3, 2e-4, f"float32 jacobian[out {k}, arg {i}] vs autograd")


def _sympy_number(expr, values: dict) -> float:
    """Evaluate a SymPy expression by SymPy, once per distinct subexpression."""
    memo: dict = {}

    def ev(e):
        hit = memo.get(e)
        if hit is not None:
            return hit
        if e.is_Symbol:
            r = sp.Float(values[e.name], 30)
        elif not e.args:
            r = e
        else:
            r = e.func(*[ev(a) for a in e.args])
            if getattr(r, "is_number", False) and not r.is_Number:
                r = r.evalf(30)
        memo[e] = r
        return r

    return float(ev(sp.sympify(expr)))


def _symbol_values(case: Case) -> dict:
    values = {}
    for name, a in zip(case.program.params, case.args, strict=True):
        arr = np.asarray(a, dtype=np.float64)
        if arr.ndim == 0:
            values[name] = float(arr)
        for idx in np.ndindex(arr.shape):
            values[f"{name}_{'_'.join(map(str, idx))}"] = float(arr[idx])
    return values


def _flatten(result) -> list:
    if isinstance(result, tuple):
        return [x for r in result for x in _flatten(r)]
    return [result]


@fuzz_settings("symbolic")
@given(cases(max_depth=3, max_out_size=6))
def test_symbolic_jacobian_evaluated_by_sympy_equals_the_compiled_one(case):
    _reference(case, tie=1e-6)
    f = case.program.function(fp.NUMPY)
    transform = sj.jacobian(f, case.argnums)
    numeric = _flatten(transform(*case.args))
    symbolic = _flatten(transform.symbolic(*case.args))
    values = _symbol_values(case)
    for n, (num, sym) in enumerate(zip(numeric, symbolic, strict=True)):
        entries = [sym] if not hasattr(sym, "shape") else list(np.asarray(sym.tolist(), dtype=object).reshape(-1))
        if getattr(sym, "shape", None) is not None:
            assert tuple(sym.shape) == np.shape(num) or (np.ndim(num) == 1 and tuple(sym.shape) in ((np.size(num), 1),))
        got = np.array([_sympy_number(e, values) for e in entries]).reshape(np.shape(num))
        _close(got, num, 1e-10, 1e-11, f"symbolic jacobian block {n} evaluated by SymPy vs compiled")


@fuzz_settings("kernel")
@given(cases(max_depth=3, max_out_size=6))
def test_kernels_give_the_tapes_bits(case):
    _reference(case, tie=1e-6)
    f = case.program.function(fp.NUMPY)
    for transform in (sj.jit(f), sj.jacobian(f, case.argnums)):
        with sj.compiling("never"):
            tape = _flatten(transform(*case.args))
        info = transform.compile(*case.args)
        assert info.tier == "kernel" and info.state == "ready", info
        kernel = _flatten(transform(*case.args))
        for a, b in zip(tape, kernel, strict=True):
            assert np.asarray(a).dtype == np.asarray(b).dtype
            np.testing.assert_array_equal(a, b)


# ----- IEEE special values ------------------------------------------------------------------


@st.composite
def special_cases(draw):
    program = draw(fp.programs(max_depth=3, max_out_size=6, specials=True))
    elements = st.one_of(st.sampled_from(fp.SPECIAL_VALUES), st.floats(-2, 2))
    args = [draw(arrays(np.float64, shape, elements=elements, fill=st.nothing())) for shape in program.shapes]
    return Case(program, args, 0, 0)


def _same_specials(got, want, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, what
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w64)
    assert np.array_equal(np.isnan(g64), nan), f"{what}: NaN at {np.isnan(g64)}, NumPy {nan}\n {g64}\n {w64}"
    inf = np.isinf(w64)
    assert np.array_equal(g64[inf], w64[inf]) and not np.isinf(g64[~inf & ~nan]).any(), (
        f"{what}: infinities differ\n got:  {g64}\n want: {w64}")
    fin = ~inf & ~nan
    # last bits may differ (libm against NumPy's own loops, a product with a reciprocal), relative to each entry
    close = np.abs(g64[fin] - w64[fin]) <= 1e-12 * np.abs(w64[fin]) + 1e-300
    assert close.all(), f"{what}: finite values differ\n got:  {g64}\n want: {w64}"


#: operations left out of this property, with the reason: contractions treat a
#: constant zero entry as structurally zero (0 * inf contributes 0, not NaN:
#: docs/numerics.md); small np.linalg.det/inv/solve are closed forms (cofactors),
#: which round differently from NumPy's LU (an entry exactly 0 in one is 1e-17 in
#: the other, beyond any relative tolerance; test_primitives checks their values)
SPECIALS_SKIP = ("np.dot", "np.matmul", "@", "np.einsum", "np.tensordot", "np.inner", "np.outer", "np.vdot",
                 "np.cross", "np.linalg.norm", "np.trace", "np.linalg.det", "np.linalg.inv", "np.linalg.solve")


@fuzz_settings("special")
@given(special_cases())
def test_special_values_match_numpy(case):
    assume(not any(op.startswith(SPECIALS_SKIP) for op in case.program.ops))
    f = case.program.function(fp.NUMPY)
    note(f"ops: {sorted(case.program.ops)}")
    with np.errstate(all="ignore"):
        want = _outputs(f(*case.args), case.n_out)
        got = _outputs(sj.jit(f)(*case.args), case.n_out)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _same_specials(g, w, f"value {k}")
