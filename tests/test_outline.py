"""Long records used often (``exp``, ``tanh``) are emitted once per kernel
module as a function the program calls (``emit.OUTLINE_USES``): the same bits
as inline code and the tape, in single and vectorised batch kernels."""

import numpy as np
import pytest
from test_vector import _load, _same

from symjac.backend.emit import OUTLINE_USES, body_ir
from symjac.backend.ssa import KernelSpec, Program, from_text, to_text
from symjac.backend.vector import batch_body_ir
from symjac.runtime import tape as _tape

SPECIAL = [np.inf, -np.inf, np.nan, -0.0, 0.0, 710.0, -745.5, 20.0, -20.0, 1e-300]


def _program(n: int, dtype):
    """``exp`` and ``tanh`` of each input, and their sum, ``n`` inputs."""
    p = Program()
    for i in range(n):
        p.ops.append(("load", (), (0, i)))
        x = len(p.ops) - 1
        p.ops += [("exp", (x,), None), ("tanh", (x,), None), ("add", (x + 1, x + 2), None)]
        p.stores += [(0, 3 * i, x + 1), (0, 3 * i + 1, x + 2), (0, 3 * i + 2, x + 3)]
    spec = KernelSpec(f"outline_{n}_{np.dtype(dtype).name}", [("x", (n,))], [(3 * n,)], np.dtype(dtype), "outline")
    return p, spec


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_outlined_records_give_the_inline_codes_and_the_tapes_bits(dtype):
    n = OUTLINE_USES + 4
    program, spec = _program(n, dtype)
    prog, layout = from_text(to_text(program, spec))
    assert body_ir("s", prog, layout).count("define internal") == 2  # exp and tanh, once each
    few, few_spec = _program(OUTLINE_USES - 1, dtype)
    prog, layout = from_text(to_text(few, few_spec))
    assert "define internal" not in body_ir("s", prog, layout)  # used too few times: inline
    prog, layout = from_text(to_text(program, spec, [True]))
    assert batch_body_ir("b", prog, layout).count("define internal") == 2

    rng = np.random.default_rng(5)
    with np.errstate(over="ignore"):
        xs = np.array([rng.permutation(np.resize(SPECIAL, n)) for _ in range(19)], dtype=dtype)
    want = np.zeros((len(xs), 3 * n), dtype)
    tape = _tape.encode(program, [n], [3 * n], dtype)
    for s, x in enumerate(xs):
        tape.run(x, want[s])
    kernel = _load(program, spec, None, spec.name)
    for s, x in enumerate(xs):
        got = np.zeros(3 * n, dtype)
        kernel(x, got)
        assert _same(got, want[s])
    batch = _load(program, spec, [True], f"{spec.name}_batch_serial")
    got = np.zeros_like(want)
    batch(xs, got)
    assert _same(got, want)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(want[:, 0::3], np.exp(xs), rtol=4 * np.finfo(dtype).eps)
