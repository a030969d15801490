"""Every row of the primitive table: value against NumPy, first and second
derivatives against finite differences, over scalar, vector, matrix and
broadcast shapes.  Runs on the tape interpreter (the same program the
kernels compile; ``test_tiers.py`` checks they agree bit for bit)."""

import numpy as np
import pytest
from primitive_cases import CASES, DOMAINS

import symjac as sj
from symjac.testing import numerical_jvp
from symjac.trace.primitives import TABLE


@pytest.fixture(autouse=True, scope="module")
def _tape_only():
    with sj.compiling("never"):
        yield


def _params():
    for name, cases in CASES.items():
        for ci, case in enumerate(cases):
            for shapes in case.shapes:
                yield pytest.param(name, ci, shapes, id=f"{name}-{ci}-{'x'.join(map(str, shapes))}")


def _args(case, shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [DOMAINS[d](rng, s) for d, s in zip(case.domains, shapes, strict=True)]


def _numerical_jacobian(fn, args, argnum):
    x = np.asarray(args[argnum], dtype=float)
    cols = []
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = 1.0
        cols.append(numerical_jvp(fn, args, argnum, e.reshape(x.shape)))
    out_shape = np.shape(fn(*args))
    return np.stack(cols, axis=-1).reshape(out_shape + x.shape) if cols else np.zeros(out_shape + x.shape)


@pytest.mark.parametrize("name, ci, shapes", list(_params()))
def test_value_matches_numpy(name, ci, shapes):
    case = CASES[name][ci]
    args = _args(case, shapes)
    want = case.fn(*args)
    got = sj.jit(case.fn)(*args)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name, ci, shapes", list(_params()))
def test_jacobian_matches_finite_differences(name, ci, shapes):
    case = CASES[name][ci]
    args = _args(case, shapes)
    for argnum in range(len(args)):
        J = sj.jacobian(case.fn, argnum)(*args)
        want = _numerical_jacobian(case.fn, args, argnum)
        assert J.shape == want.shape, "layout: out_shape + in_shape"
        np.testing.assert_allclose(J, want, rtol=1e-7, atol=1e-8, err_msg=f"argnum {argnum}")


@pytest.mark.parametrize("name, ci, shapes", list(_params()))
def test_jvp_and_vjp_agree_with_the_jacobian(name, ci, shapes):
    # (the Jacobian is checked against finite differences above)
    case = CASES[name][ci]
    args = _args(case, shapes)
    rng = np.random.default_rng(2)
    out_shape = np.shape(case.fn(*args))
    for argnum in range(len(args)):
        J = sj.jacobian(case.fn, argnum)(*args)
        x = np.asarray(args[argnum])
        v, u = rng.standard_normal(x.shape), rng.standard_normal(out_shape)
        Jm = J.reshape(int(np.prod(out_shape)), x.size)
        np.testing.assert_allclose(np.reshape(sj.jvp(case.fn, argnum)(*args, v), -1), Jm @ v.reshape(-1),
                                   rtol=1e-12, atol=1e-12, err_msg=f"jvp, argnum {argnum}")
        np.testing.assert_allclose(np.reshape(sj.vjp(case.fn, argnum)(*args, u), -1), u.reshape(-1) @ Jm,
                                   rtol=1e-12, atol=1e-12, err_msg=f"vjp, argnum {argnum}")


@pytest.mark.parametrize("name, ci, shapes", list(_params()))
def test_hessian_matches_finite_differences_of_jacobian(name, ci, shapes):
    case = CASES[name][ci]
    if not case.hessian:
        pytest.skip("not twice differentiable at the test points")
    args = _args(case, shapes)
    rng = np.random.default_rng(1)
    for argnum in range(len(args)):
        x = np.asarray(args[argnum], dtype=float)
        v = rng.standard_normal(x.shape)
        H = sj.hessian(case.fn, argnum)(*args)
        jac = sj.jacobian(case.fn, argnum)
        want = numerical_jvp(lambda *a, _jac=jac: _jac(*a), args, argnum, v)
        got = np.tensordot(H, v, axes=x.ndim) if x.ndim else H * v
        np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-6, atol=1e-7, err_msg=f"argnum {argnum}")


def test_every_row_of_the_table_has_a_case():
    from primitive_cases import special

    from symjac.trace.primitives import SciPyFunction, SciPyUfunc

    names = {row.name for row in TABLE
             if special is not None or not isinstance(row.numpy[0], (SciPyUfunc, SciPyFunction))}
    assert set(CASES) == names, (
        f"rows without cases: {sorted(names - set(CASES))}; cases without rows: {sorted(set(CASES) - names)}"
    )


def test_supported_operations_lists_every_numpy_callable():
    listed = {name for name, _, _ in sj.supported_operations()}
    for row in TABLE:
        for fn in row.numpy:
            assert any(name.endswith(fn.__name__) for name in listed), fn


def test_every_record_is_exercised_by_a_case():
    """Each node type (ir/ops.py) appears in the program of some case, so none goes untested."""
    from symjac.ir.ops import OPCODE, RECORDS
    from symjac.runtime.dispatch import compiled_for

    seen = set()
    for cases in CASES.values():
        for case in cases:
            args = _args(case, case.shapes[-1])
            for transform in (sj.jit(case.fn), sj.hessian(case.fn) if case.hessian else sj.grad(
                    lambda *a, f=case.fn: np.sum(f(*a)))):
                compiled = compiled_for(transform.request, args)
                seen.update(op for op, _, _ in compiled.program.ops)
                batched = [True] + [False] * (len(compiled.in_shapes) - 1)
                sizes = [int(np.prod(s)) for s in compiled.in_shapes]
                codes = compiled.tape.for_batch(sizes, batched).code[:, 0]
                seen.update(op.name for op in RECORDS if OPCODE[op.name] in codes)
    missing = {op.name for op in RECORDS} - seen
    assert not missing, f"records no case exercises: {sorted(missing)}; add a case to primitive_cases.py"
