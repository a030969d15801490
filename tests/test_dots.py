"""Dense layers as loops (``backend/dots.py``): sums of constant multiples of
shared values run as loops over coefficient tables, with the tape's bits.

The hand-built programs mix every form a sum's term takes after lowering
(``mul(c, v)``, ``mul(v, c)``, a bare value, a first term negated, ``sub``
for a negative coefficient, a product used elsewhere too) with special values
in the inputs (inf, NaN, -0.0, overflow) and coefficients (0.0, -0.0, huge),
and compare the kernel, the vectorised batch kernel and the tape bit for bit.
"""

import numpy as np
import pytest
from test_vector import _load, _same

import symjac as sj
from symjac.backend import printer
from symjac.backend.dots import find_dots
from symjac.backend.emit import body_ir
from symjac.backend.emitter import TextEmitter
from symjac.backend.ssa import KernelSpec, Program, from_text, to_text, uses
from symjac.runtime import dispatch
from symjac.runtime import tape as _tape

rng = np.random.default_rng(11)
SPECIAL = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e308, -1e308, 1e-310]


def _layer(m: int, n: int, dtype, shared_product: bool = True, own_operands: bool = False):
    """``m`` sums over the same ``n`` operands (``own_operands``: over copies of
    them, one per sum), each with its own coefficients, written in every form
    lowering produces; also stores each sum times 2."""
    p = Program()

    def op(name, *args, payload=None):
        p.ops.append((name, args, payload))
        return len(p.ops) - 1

    loads = [op("load", payload=(0, i)) for i in range(n)]
    shared = op("mul", op("const", payload=3.0), loads[1]) if shared_product else None
    two = op("const", payload=2.0)
    sums = []
    for j in range(m):
        acc = None
        if own_operands:
            loads = [op("mul", op("load", payload=(0, i)), op("const", payload=1.0)) for i in range(n)]
        for i, v in enumerate(loads):
            if i == 1 and shared is not None:
                term, negative = shared, j % 2 == 1  # a product also stored on its own: a bare operand
            elif i == 2:
                term, negative = v, j % 3 == 0  # a bare value: coefficient 1
            else:
                c = float(rng.choice([rng.standard_normal(), 0.0, -0.0, float(np.finfo(dtype).max) / 4, 0.5]))
                negative = bool(rng.integers(2))
                c_id = op("const", payload=c)
                term = op("mul", c_id, v) if (i + j) % 2 else op("mul", v, c_id)
            if acc is None:
                acc = op("neg", term) if negative else term
            else:
                acc = op("sub" if negative else "add", acc, term)
        sums.append(acc)
    for j, s in enumerate(sums):
        p.stores.append((0, j, s))
        p.stores.append((0, m + j, op("mul", s, two)))  # the sums used after the loop
    if shared is not None:
        p.stores.append((0, 2 * m, shared))
    n_out = len(p.stores)
    spec = KernelSpec(f"dots_{m}x{n}_{np.dtype(dtype).name}_{int(shared_product)}", [("x", (n,))],
                      [(n_out,)], np.dtype(dtype), "dot chains")
    return p, spec


def _inputs(n: int, samples: int, dtype):
    x = rng.standard_normal((samples, n)).astype(dtype)
    with np.errstate(over="ignore"):  # (1e308 in float32: inf)
        for s in range(1, samples):
            x[s, rng.integers(n, size=2)] = rng.choice(SPECIAL, size=2)
    return x


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m,n", [(9, 8), (16, 12)])
def test_dot_loops_give_the_tapes_bits_single_and_batched(dtype, m, n):
    program, spec = _layer(m, n, dtype)
    groups = find_dots(program, uses(program))
    assert [len(g.roots) for g in groups] == [m]  # all sums, in one loop
    assert len(groups[0].operands) == n
    xs = _inputs(n, 21, dtype)  # 21: whole blocks of samples and a remainder
    n_out = spec.outputs[0][0]
    want = np.zeros((len(xs), n_out), dtype)
    tape = _tape.encode(program, [n], [n_out], dtype)
    for s, x in enumerate(xs):
        tape.run(x, want[s])
    kernel = _load(program, spec, None, spec.name)
    for s, x in enumerate(xs):
        got = np.zeros(n_out, dtype)
        kernel(x, got)
        assert _same(got, want[s]), (s, got, want[s])
    batch = _load(program, spec, [True], f"{spec.name}_batch_serial")
    got = np.zeros_like(want)
    batch(xs, got)
    assert _same(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_rendering_shows_the_loops_and_runs_to_the_tapes_bits(dtype):
    """``.source()`` shows what runs: a dense layer is a loop over a table, and
    the rendering, run as Python, computes the kernel's bits."""
    m, n = 9, 8
    program, spec = _layer(m, n, dtype)
    text = printer.render(program, spec)
    assert text.count("dense layer") == 1 and f"for _i in range(1, {n}):" in text
    straight = printer.render(program, spec, roll=False)  # (each sum written out)
    assert "dense layer" not in straight and text.count(" * ") < straight.count(" * ") // 4
    namespace: dict = {}
    exec(compile(text, "<rendering>", "exec"), namespace)
    n_out = spec.outputs[0][0]
    tape = _tape.encode(program, [n], [n_out], dtype)
    for x in _inputs(n, 9, dtype):
        want, got = np.zeros(n_out, dtype), np.zeros(n_out, dtype)
        tape.run(x, want)
        with np.errstate(all="ignore"):
            namespace[spec.name](x, got)
        assert _same(got, want), (x, got, want)


def test_the_loop_replaces_the_straight_line_code():
    program, spec = _layer(32, 32, np.float64, shared_product=False)
    prog, layout = from_text(to_text(program, spec))
    rolled, straight = body_ir("s", prog, layout), body_ir("s", prog, layout, roll=False)
    assert "llvm.loop.unroll.disable" in rolled
    assert rolled.count("fmul") < 150 < 1024 <= straight.count("fmul")


def test_sums_over_different_operands_or_too_few_stay_straight_line():
    program, _ = _layer(9, 8, np.float64)
    assert len(find_dots(program, uses(program))) == 1
    apart, _ = _layer(9, 8, np.float64, own_operands=True)  # the same sums, no two over the same values
    assert find_dots(apart, uses(apart)) == []
    small, _ = _layer(3, 8, np.float64)  # 3 sums of 8 terms: 24 terms, below MIN_WORK
    assert find_dots(small, uses(small)) == []
    short, _ = _layer(40, 3, np.float64)  # 3 terms a sum: below MIN_TERMS
    assert find_dots(short, uses(short)) == []


def test_an_mlp_kernel_computes_its_layers_in_loops_with_the_tapes_bits():
    w1, w2 = rng.standard_normal((6, 24)) / 3, rng.standard_normal((24, 24)) / 5
    w3 = rng.standard_normal((24, 3))

    def mlp(x):
        return np.tanh(np.tanh(x @ w1) @ w2) @ w3

    x = rng.standard_normal(6)
    jac = sj.jacobian(mlp)
    with sj.compiling("never"):
        on_tape = jac(x)
    compiled = dispatch.compiled_for(jac.request, (x,))
    # the weights are inputs read on every call (trace/reads.py): the loops read them from there
    assert compiled.read_paths == ["w1", "w2", "w3"]
    groups = find_dots(compiled.program, uses(compiled.program), sources=lambda i: True)
    assert sum(len(g.roots) * len(g.operands) for g in groups) >= 24 * 24  # at least the middle layer
    assert {g.source for g in groups} <= {1, 2, 3}
    jac.compile(x)
    assert jac.info(x).tier == "kernel"
    assert jac(x).tobytes() == on_tape.tobytes()
    # and the derivative is the right one
    h1 = np.tanh(x @ w1)
    h2 = np.tanh(h1 @ w2)
    want = (w3.T * (1 - h2**2)) @ (w2.T * (1 - h1**2)) @ w1.T
    np.testing.assert_allclose(jac(x), want, rtol=1e-12, atol=1e-14)
    xs = rng.standard_normal((19, 6))
    batch = sj.vmap(jac)
    batch.compile(xs)
    batched = batch(xs)
    for s in range(len(xs)):
        assert batched[s].tobytes() == jac(xs[s]).tobytes()


def test_tables_of_the_same_bits_are_one_global():
    e = TextEmitter("double", "m")
    a = e.table([1.5, -2.0, 0.0], "double")
    assert e.table([1.5, -2.0, 0.0], "double") == a and len(e.globals) == 1
    assert e.table([1.5, -2.0, -0.0], "double") != a  # equal as numbers, not as bits
    assert e.table([1, 2], "i64") != e.table([1.0, 2.0], "double")
    assert len(e.globals) == 4
    # an outlined record's function shares them: one module
    program, spec = _layer(16, 12, np.float64)
    prog, layout = from_text(to_text(program, spec))
    text = body_ir("s", prog, layout)
    constants = [line.split(" = ", 1)[1] for line in text.splitlines() if "private unnamed_addr constant" in line]
    assert len(constants) == len(set(constants))


def _input_layer(m: int, n: int, dtype, bias: bool = False):
    """``m`` sums ``W[j, 0] * x[0] + W[j, 1] * x[1] + ...`` with the weights ``W``
    an input (a model's weights read on every call), products written both ways
    round; also one sum with a subtraction (its coefficients stay straight-line).
    ``bias``: each of the ``m`` sums has a value added last (``x @ W + b``: the term
    without a coefficient read from ``W``)."""
    p = Program()

    def op(name, *args, payload=None):
        p.ops.append((name, args, payload))
        return len(p.ops) - 1

    xs = [op("load", payload=(0, i)) for i in range(n)]
    sums = []
    for j in range(m + 1):
        acc = None
        for i, v in enumerate(xs):
            w = op("load", payload=(1, j % m * n + i))
            term = op("mul", w, v) if (i + j) % 2 else op("mul", v, w)
            acc = term if acc is None else op("sub" if j == m and i == 2 else "add", acc, term)
        if bias and j < m:
            acc = op("add", acc, xs[j % n])
        sums.append(acc)
    for j, s in enumerate(sums):
        p.stores.append((0, j, s))
    spec = KernelSpec(f"wdots_{m}x{n}{'b' * bias}_{np.dtype(dtype).name}", [("x", (n,)), ("w", (m, n))],
                      [(len(sums),)], np.dtype(dtype), "dot chains over an input")
    return p, spec


def _load_two(program, spec, batched):
    """The kernel of a program with inputs ``x`` (n,) and ``w`` (m, n): single, or
    the serial batch kernel (``batched``: which inputs have a batch axis)."""
    from symjac.backend import kernels as _kernels
    from symjac.runtime.jit import cache as _cache
    from symjac.runtime.jit import wrappers

    source = _kernels.module_source(program, spec, batched)
    stem = f"{spec.name}_{'b' + ''.join(map(str, map(int, batched))) if batched else 's'}"
    path = _cache.write_module(source, f"{stem}_{_cache.source_digest(source)}")
    name = spec.name if batched is None else f"{spec.name}_batch_serial"
    kernel = _cache.load_function(path, name, lambda: source)
    lead = [int(b) for b in batched] if batched else [0, 0]
    wrappers.compile_kernel(kernel, wrappers.signature([1 + lead[0], 2 + lead[1]], [1 + bool(batched)], spec.dtype))
    return kernel


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dot_loops_over_weights_read_from_an_input_give_the_tapes_bits(dtype, bias):
    m, n = 9, 8
    program, spec = _input_layer(m, n, dtype, bias)
    groups = find_dots(program, uses(program), sources=lambda i: True)
    assert [(len(g.roots), g.source) for g in groups] == [(m, 1)]  # the sum with a subtraction is left out
    if bias:  # (each loop's sum is the one before the bias, which is added after it as written)
        stored = {v for _, _, v in program.stores}
        assert not set(groups[0].roots) & stored
        assert all(program.ops[v][0] == "add" and program.ops[v][1][0] in groups[0].roots
                   for _, j, v in program.stores if j < m)
    assert not find_dots(program, uses(program))  # (no constant coefficients: nothing without sources)
    xs = _inputs(n, 21, dtype)
    w = _inputs(m * n, 1, dtype)[0].reshape(m, n)
    w[0, 0], w[3, 5] = -0.0, np.inf
    n_out = m + 1
    want = np.zeros((len(xs), n_out), dtype)
    tape = _tape.encode(program, [n, m * n], [n_out], dtype)
    for s, x in enumerate(xs):
        tape.run(np.concatenate([x, w.reshape(-1)]), want[s])
    kernel = _load_two(program, spec, None)
    for s, x in enumerate(xs):
        got = np.zeros(n_out, dtype)
        kernel(x, w, got)
        assert _same(got, want[s]), (s, got, want[s])
    for batched in ([True, False], [True, True]):  # weights shared by the batch (one splat), or per sample
        batch = _load_two(program, spec, batched)
        got = np.zeros_like(want)
        batch(xs, np.broadcast_to(w, (len(xs), m, n)).copy() if batched[1] else w, got)
        assert _same(got, want)
    text = printer.render(program, spec)
    assert "as loops over w's entries" in text
    namespace: dict = {}
    exec(compile(text, "<rendering>", "exec"), namespace)
    for s, x in enumerate(xs[:5]):
        got = np.zeros(n_out, dtype)
        with np.errstate(all="ignore"):
            namespace[spec.name](x, w, got)
        assert _same(got, want[s]), (x, got, want[s])
