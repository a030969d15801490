"""Generated kernels: golden sources (codegen never changes silently), loop
rerolling, and bit equality of rolled kernels with the tape."""

import os
from pathlib import Path

import numpy as np
import pytest

import symjac as sj

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SYMJAC_UPDATE_GOLDEN") == "1"


def tridiagonal(x):
    left = np.concatenate([[0.0], x[:-1]])
    right = np.concatenate([x[1:], [0.0]])
    return left - 2 * x + right + np.sin(x) * x ** 2


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def safe_sqrt(x):
    return np.sum(np.where(x < 1, x, np.sqrt(x)) * x)


CASES = {
    "tridiagonal_sparse_jacobian": (sj.jacobian(tridiagonal, sparse=True), (np.zeros(20),)),
    "tridiagonal_dense_jacobian": (sj.jacobian(tridiagonal), (np.zeros(12),)),
    "rosen_grad": (sj.grad(rosen), (np.zeros(4),)),
    "rosen_hessian": (sj.hessian(rosen), (np.zeros(3),)),
    "safe_sqrt_grad": (sj.grad(safe_sqrt), (np.zeros(3),)),
    "pendulum_jvp": (sj.jvp(lambda y, g: np.stack([y[1], -g * np.sin(y[0])])), (np.zeros(2), 9.81, np.zeros(2))),
}


pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_source_matches_golden_file(name):
    transform, args = CASES[name]
    source = transform.source(*args).split("\n", 1)[1]  # without the path line
    path = GOLDEN / f"{name}.py.txt"
    if UPDATE or not path.exists():
        path.write_text(source)
        if not UPDATE:
            pytest.fail(f"golden file {path.name} was missing; written now, check it in")
    assert source == path.read_text(), (
        f"generated code for {name} changed; if intended, rerun with SYMJAC_UPDATE_GOLDEN=1"
    )


def test_repeated_entries_are_rolled_into_loops():
    src = sj.jacobian(tridiagonal, sparse=True).source(np.zeros(500))
    assert src.count("\n") < 40  # not one line per entry
    assert "for _k in range(500):" in src and "out0[3 * _k]" in src


def test_rolled_kernels_give_the_tapes_bits():
    x = np.random.default_rng(0).uniform(-2, 2, 64)
    for transform in (sj.jacobian(tridiagonal, sparse=True), sj.jacobian(tridiagonal),
                      sj.hessian(rosen), sj.vmap(sj.grad(rosen))):
        arg = x if not isinstance(transform, type(sj.vmap(rosen))) else x.reshape(16, 4)
        tape = transform(arg)
        info = transform.compile(arg)
        assert info.tier == "kernel"
        kernel = transform(arg)
        if hasattr(tape, "toarray"):
            tape, kernel = tape.toarray(), kernel.toarray()
        np.testing.assert_array_equal(tape, kernel)


def test_entries_sharing_work_are_not_rolled():
    """Rolling an entry whose operations other entries also use would
    recompute them; such entries stay straight-line."""
    f = lambda x: np.sin(x.sum()) * x  # noqa: E731  every entry shares sin(sum)
    src = sj.jacobian(f).source(np.zeros(12))
    assert src.count("np.sin(") == 1 and src.count("np.cos(") == 1
