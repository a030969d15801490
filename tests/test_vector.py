"""Batch kernels vectorised across samples (``backend/vector.py``): every record
on blocks of samples gives the per-sample kernel's bits and NumPy's values;
batch sizes around the block width, both dtypes, special values, batched and
shared inputs mixed, the serial and the parallel sample loop."""

import ctypes

import numba
import numpy as np
import pytest
from test_ops import _agree, _program

import symjac as sj
from symjac.backend import kernels as _kernels
from symjac.backend.emit import OUTLINE_USES, _schedule, body_ir
from symjac.backend.emitter import BATCH_CALLS
from symjac.backend.ssa import Arguments, KernelSpec, Program
from symjac.backend.vector import batch_body_ir, block_width
from symjac.ir.ops import BY_NAME
from symjac.runtime import tape as _tape
from symjac.runtime.jit import cache as _cache
from symjac.runtime.jit import native, wrappers

rng = np.random.default_rng(3)


def _load(program, spec, batched, name):
    source = _kernels.module_source(program, spec, batched)
    path = _cache.write_module(source, f"{spec.name}_{'b' if batched else 's'}_{_cache.source_digest(source)}")
    kernel = _cache.load_function(path, name, lambda: source)
    nd = 2 if batched else 1
    wrappers.compile_kernel(kernel, wrappers.signature([nd], [nd], spec.dtype))
    return kernel


def _same(got, want) -> bool:
    """Bit for bit, except that a NaN may have either sign: LLVM may commute the
    operands of ``fadd``/``fmul`` (differently in vector and scalar code), and
    x86 returns the first operand's NaN."""
    got, want = np.asarray(got), np.asarray(want)
    nan = np.isnan(want)
    return bool(np.array_equal(np.isnan(got), nan) and got[~nan].tobytes() == want[~nan].tobytes())


def _fold(program, x, dtype):
    """The program evaluated with the records' NumPy references (``fold``)."""
    values = []
    with np.errstate(all="ignore"):
        for op, args, payload in program.ops:
            if op == "load":
                values.append(x[payload[1]])
            elif op == "const":
                values.append(dtype(payload))
            else:
                values.append(dtype(BY_NAME[op].fold(*(values[a] for a in args))))
    out = np.zeros(len(program.stores), dtype)
    for _, flat, value in program.stores:
        out[flat] = values[value]
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_record_on_blocks_of_samples_gives_the_per_sample_kernels_bits(dtype):
    """Each sample of the batch is a different permutation of the special
    values, so every lane of every operation sees other operands."""
    program, spec, x, _ = _program(dtype)
    width = block_width(dtype)
    size = 2 * width + 3  # two whole blocks and a remainder
    X = np.stack([x] + [rng.permutation(x) for _ in range(size - 1)])
    single = _load(program, spec, None, spec.name)
    serial = _load(program, spec, [True], f"{spec.name}_batch_serial")
    parallel = _load(program, spec, [True], f"{spec.name}_batch")
    n_out = len(program.stores)
    got_serial = np.empty((size, n_out), dtype)
    serial(X, got_serial)
    for s in (0, width - 1, width, size - 1):  # lanes 0 and W-1 of whole blocks, and the remainder
        want = np.empty(n_out, dtype)
        single(X[s], want)
        assert _same(got_serial[s], want), f"sample {s}"
        assert np.all(_agree(got_serial[s], _fold(program, X[s], dtype), dtype)), f"sample {s} against NumPy"
    was = numba.get_num_threads()
    try:  # one thread: the serial range inside the parallel kernel; two: a part each (a block | the rest)
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            got_parallel = np.full((size, n_out), np.nan, dtype)
            parallel(X, got_parallel)
            assert _same(got_parallel, got_serial), f"{threads} threads"  # separately compiled: a NaN's sign may differ
    finally:
        numba.set_num_threads(was)


def _f(x, w, s):
    """Arithmetic, libm, exact intrinsics, comparisons and selects, a shared
    matrix ``w`` and a shared scalar ``s``."""
    y = x @ w
    return np.stack([
        np.sin(y[0]) * x[1] + s,
        np.where(x[2] > 0, np.sqrt(np.abs(x[0])), x[1] ** 3),
        np.tanh(x[0] - x[2]) / (1.0 + y[1] ** 2),
        np.maximum(x[0], s * x[1]) + np.floor(y[0]) * np.exp(-x[2] * x[2]),
    ])


def _batch(n, dtype):
    X = rng.standard_normal((n, 3)).astype(dtype)
    specials = np.array([[np.inf, 1.0, 2.0], [np.nan, -0.0, 0.5], [-0.0, 0.0, -0.0], [1e30, -np.inf, 3.0]], dtype)
    X[: min(n, 4)] = specials[: min(n, 4)]
    return X


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batch_sizes_around_the_block_width_match_the_per_sample_kernel(dtype):
    width = block_width(dtype)
    w = rng.standard_normal((3, 2)).astype(dtype)
    s = dtype(0.75)
    V = sj.vmap(sj.jacobian(_f), in_axes=(0, None, None))
    J = sj.jacobian(_f)
    with sj.compiling("sync"):
        info = V.compile(_batch(1, dtype), w, s)
        assert info.tier == "kernel", info.error
        assert J.compile(_batch(1, dtype)[0], w, s).tier == "kernel"
        for n in (0, 1, width - 1, width, width + 1, 2 * width + 5, 7 * width + width - 1):
            X = _batch(n, dtype)
            with np.errstate(all="ignore"):
                got = V(X, w, s)
                want = np.stack([J(x, w, s) for x in X]) if n else np.zeros((0, 4, 3), dtype)
            assert got.dtype == dtype and got.shape == want.shape
            assert _same(got, want), f"batch of {n}"
    assert V.info(X, w, s).tier == "kernel"


def test_vector_batch_agrees_with_autograd():
    autograd = pytest.importorskip("autograd")
    anp = pytest.importorskip("autograd.numpy")

    def f(x, w, s):
        y = anp.dot(x, w)
        return anp.stack([anp.sin(y[0]) * x[1] + s, anp.tanh(x[0] - x[2]) / (1.0 + y[1] ** 2),
                          anp.exp(-x[2] * x[2]) * y[1]])

    def g(x, w, s):
        y = x @ w
        return np.stack([np.sin(y[0]) * x[1] + s, np.tanh(x[0] - x[2]) / (1.0 + y[1] ** 2),
                         np.exp(-x[2] * x[2]) * y[1]])

    X, w = rng.standard_normal((29, 3)), rng.standard_normal((3, 2))
    with sj.compiling("sync"):
        got = sj.vmap(sj.jacobian(g), in_axes=(0, None, None))(X, w, 0.5)
    want = np.stack([autograd.jacobian(f)(x, w, 0.5) for x in X])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


def test_the_batch_body_is_vectorised_and_shows_it():
    width = block_width(np.float64)
    text = sj.vmap(sj.jacobian(lambda x: np.sin(x) * x[::-1])).source(np.zeros((2, 3)), llvm=True)
    assert f"fmul <{width} x double>" in text and ".block(" in text
    assert "call double @cos(double" in text  # libm lane by lane: libm's bits


def _lorenz(u):
    x, y, z = u[0], u[1], u[2]
    return np.stack([10.0 * (y - x), x * (28.0 - z) - y, x * y - (8.0 / 3.0) * z])


def test_memory_bound_programs_keep_the_sample_loop_with_the_same_results():
    """Lorenz's Jacobian writes 9 entries from 3 operations: the batch body
    loops over samples (writing a block's rows together was slower)."""
    V, J = sj.vmap(sj.jacobian(_lorenz)), sj.jacobian(_lorenz)
    text = V.source(np.zeros((2, 3)), llvm=True)
    assert "x double>" not in text and "i64 %start, i64 %stop" in text
    with sj.compiling("sync"):
        assert V.compile(np.zeros((2, 3))).tier == "kernel"
        for n in (0, 1, 7, 9, 33):
            X = _batch(n, np.float64)
            with np.errstate(all="ignore"):
                want = np.stack([J(x) for x in X]) if n else np.zeros((0, 3, 3))
                assert _same(V(X), want), f"batch of {n}"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rows_read_and_written_in_tiles_match_the_per_sample_kernel(dtype):
    """A small tanh network whose input (W + 3 entries) and Jacobian (2 x (W + 3))
    fill whole tiles of W entries and leave some over."""
    width = block_width(dtype)
    A = (rng.standard_normal((5, width + 3)) / 4).astype(dtype)
    B = (rng.standard_normal((2, 5)) / 2).astype(dtype)

    def net(x):
        return np.asarray(B) @ np.tanh(np.asarray(A) @ x)

    V, J = sj.vmap(sj.jacobian(net)), sj.jacobian(net)
    sample = np.zeros((1, width + 3), dtype)
    assert "shufflevector" in V.source(sample, llvm=True)
    with sj.compiling("sync"):
        assert V.compile(sample).tier == "kernel" and J.compile(sample[0]).tier == "kernel"
        for n in (1, width - 1, width, 2 * width + 3):
            X = rng.standard_normal((n, width + 3)).astype(dtype)
            X[0, :3] = [np.inf, -0.0, np.nan]
            with np.errstate(all="ignore"):
                got, want = V(X), np.stack([J(x) for x in X])
            assert got.dtype == dtype and _same(got, want), f"batch of {n}"


def _points(name, dtype, gen):
    """Points over every branch of symjac's own ``tanh`` and ``exp``."""
    if name == "tanh":
        edges = [2.0 ** -28, -(2.0 ** -29), 1.0, -1.0, np.nextafter(1.0, 0), 22.0, np.nextafter(22.0, 0), 1e-300,
                 -5e-324, 1e30]
        spread = [gen.uniform(-1, 1, 2000), gen.uniform(-25, 25, 2000)]
    else:  # the whole finite range, overflow and the subnormal results
        top, bottom = (709.79, -745.2) if dtype == np.float64 else (88.73, -103.9)
        edges = [0.5, -0.5, 709.78, 709.79, -708.39, -708.4, -744.4, 88.72, 88.73, -87.33, -103.2, 1e30, -1e30]
        spread = [gen.uniform(-1, 1, 2000), gen.uniform(bottom, top, 2000)]
    tiny = 10.0 ** gen.uniform(-12, 1.5, 2000) * gen.choice([-1, 1], 2000)
    return np.concatenate([*spread, tiny, edges]).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, ulps", [("tanh", 2), ("exp", 1)])
def test_own_elementary_functions_are_within_their_ulps_and_the_same_everywhere(name, ulps, dtype):
    """tanh and exp are symjac's own arithmetic (so they vectorise): against
    mpmath at points over every branch, results below the normal range within
    one subnormal step, NumPy's special values, and the same bits in a batch, a
    single kernel and the tape."""
    import mpmath

    fn = getattr(np, name)
    x = _points(name, dtype, np.random.default_rng(11))
    with mpmath.workprec(80):
        exact = np.array([float(getattr(mpmath, name)(mpmath.mpf(float(v)))) for v in x])
    with np.errstate(over="ignore"):
        exact = exact.astype(dtype)
    with sj.compiling("sync"):
        got = sj.vmap(sj.jit(fn))(x)
        single = sj.jit(fn)(x)
    with sj.compiling("never"):
        tape = sj.jit(fn)(x[:-1])  # a new shape: a new program, on the tape interpreter
    assert got.tobytes() == single.tobytes() and got[:-1].tobytes() == tape.tobytes()
    normal = np.isfinite(exact) & (np.abs(exact) >= np.finfo(dtype).tiny)
    err = np.abs(got[normal].astype(np.float64) - exact[normal]) / np.spacing(np.abs(exact[normal])).astype(np.float64)
    assert err.max() <= ulps, f"{err.max()} ulp at x = {x[normal][np.argmax(err)]!r}"
    with np.errstate(invalid="ignore"):  # inf - inf where both overflow
        rest = np.abs(got[~normal].astype(np.float64) - exact[~normal])
    assert np.all((got[~normal] == exact[~normal]) | (rest <= np.finfo(dtype).smallest_subnormal))
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype)
    with sj.compiling("sync"):
        out = sj.vmap(sj.jit(fn))(special)
    assert out.tobytes()[: 4 * special.itemsize] == fn(special[:4]).tobytes() and np.isnan(out[4])


def test_small_batch_bodies_run_unrolled_blocks_of_samples_over_any_range():
    """A small batch body (``emit.UNROLL_WORK``) runs whole blocks of
    ``UNROLL_SAMPLES`` samples written out, then the rest: every range
    ``start..stop`` gives each sample the single kernel's bits, writes its
    structural zeros and constants, and touches no sample outside the range."""
    from symjac.backend import emit

    def lorenz(u):
        x, y, z = u[0], u[1], u[2]
        return np.stack([10.0 * (y - x), x * (28.0 - z) - y, x * y - (8.0 / 3.0) * z])

    X = np.random.default_rng(5).standard_normal((23, 3)) * 10
    X[3] = [np.nan, -0.0, np.inf]
    V = sj.vmap(sj.jacobian(lorenz))
    V.compile(X)
    with sj.compiling("never"):
        want = np.stack([sj.jacobian(lorenz)(x) for x in X])
    assert _same(V(X), want)
    program = V._fast[2]  # (the batch program the call used)
    assert program.info().tier == "kernel"
    assert "sdiv i64" in V.source(X, llvm=True)  # the block loop
    assert len(program.compiled.program.ops) + len(program.compiled.program.stores) <= emit.UNROLL_WORK
    symbol = wrappers._bodies(program.kernel)[0].symbol
    body = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        native._slot(symbol).value)
    for start, stop in [(0, 23), (0, 4), (1, 4), (2, 11), (5, 5), (7, 23), (22, 23)]:
        out = np.full((23, 3, 3), 7.0)
        body(X.ctypes.data, out.ctypes.data, start, stop)
        assert _same(out[start:stop], want[start:stop]), (start, stop)
        assert (np.delete(out, np.s_[start:stop], axis=0) == 7.0).all()  # nothing else written


def _layered_program(n: int, dtype):
    """``out[i] = exp(tanh(tanh(x[i]))) + tanh(x[n-1-i])``: n independent tanh of
    the inputs, n of those (each waiting for one of the first), n exp of those."""
    program = Program()
    for i in range(n):
        program.ops.append(("load", (), (0, i)))
    first = []
    for i in range(n):
        program.ops.append(("tanh", (i,), None))
        first.append(len(program.ops) - 1)
    outs = []
    for i in range(n):
        program.ops.append(("tanh", (first[i],), None))
        program.ops.append(("exp", (len(program.ops) - 1,), None))
        program.ops.append(("add", (len(program.ops) - 1, first[n - 1 - i]), None))
        outs.append(len(program.ops) - 1)
    program.stores = [(0, i, v) for i, v in enumerate(outs)]
    spec = KernelSpec(f"layered{n}_{np.dtype(dtype).name}", [("x", (n,))], [(n,)], np.dtype(dtype), "layers")
    return program, spec


def test_independent_applications_are_scheduled_together_after_their_operands():
    n = 18
    program, _ = _layered_program(n, np.float64)
    items = _schedule(program, {"tanh", "exp"}, set(), [])
    order = [k for item in items for k in (item if isinstance(item, list) else [item])]
    assert sorted(order) == list(range(len(program.ops)))
    seen = set()
    for k in order:  # every operand before its use
        assert all(a in seen for a in program.ops[k][1]), k
        seen.add(k)
    groups = [item for item in items if isinstance(item, list)]
    assert [(program.ops[g[0]][0], len(g)) for g in groups] == [("tanh", n), ("tanh", n), ("exp", n)]
    assert _schedule(program, set(), set(), []) == list(range(len(program.ops)))  # nothing to batch: as written


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [18, 6])
def test_independent_long_records_run_on_wide_vectors_with_the_per_sample_kernels_bits(n, dtype):
    """n independent tanh, twice, and n exp, BATCH_CALLS at a time on wider
    vectors (whole groups and one padded to BATCH_CALLS), in the batch body
    (BATCH_CALLS blocks) and the single kernel (BATCH_CALLS values): used often
    enough (18), each group is one call of the record's outlined code; less
    often (6), the record's code on the wide vectors in place.  Special
    values; the batch, the single kernel and the tape give the same bits."""
    width = block_width(dtype)
    program, spec = _layered_program(n, dtype)
    t = "double" if dtype == np.float64 else "float"
    groups = -(-n // BATCH_CALLS)
    for text, lanes in ((batch_body_ir("probe", program, Arguments(np.dtype(dtype), [n], [False], [True], [n])), width),
                        (body_ir("probe", program, Arguments(np.dtype(dtype), [n], [False], None, [n])), 1)):
        wide = f"<{BATCH_CALLS * lanes} x {t}>"
        if n >= OUTLINE_USES:
            assert text.count(f"call {wide} @probe.tanh.w") == 2 * groups
            assert text.count(f"call {wide} @probe.exp.w") == groups
        else:
            assert "@probe.tanh" not in text and f"fdiv {wide}" in text
    specials = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-300, -5e-324, 30.0, -22.0, 0.75, -0.75, 1.0,
                         710.0, 1e30, 3.0, -2.5, 0.125, -1e-9], dtype)
    size = 3 * width + 5
    X = np.stack([rng.permutation(specials)[:n] for _ in range(size)])
    single = _load(program, spec, None, spec.name)
    batch = _load(program, spec, [True], f"{spec.name}_batch_serial")
    got = np.empty((size, n), dtype)
    with np.errstate(all="ignore"):
        batch(X, got)
        for s in range(size):
            want, taped = np.empty(n, dtype), np.zeros(n, dtype)
            single(X[s], want)
            _tape.encode(program, [n], [n], dtype).run(X[s], taped)
            assert _same(got[s], want) and _same(taped, want), f"sample {s}"
            assert np.all(_agree(got[s], _fold(program, X[s], dtype), dtype)), f"sample {s} against NumPy"
