"""Sample regions of the array tier (``runtime/regions.py``): pieces of an array
program that work within one sample (element functions, products and
slices over small trailing axes) run per sample by one compiled kernel, with
the values of NumPy's steps (to rounding: a kernel sums in its own order)."""

import numpy as np
import pytest

import symjac as sj
from symjac.ir import tensor as t
from symjac.runtime import fused, regions, tensor_eval

RNG = np.random.default_rng(41)


@pytest.fixture
def ran(monkeypatch):
    """The regions whose kernel served a call."""
    seen: list = []
    real = regions.RegionLoop._run

    def spy(self, values, out=None):
        got = real(self, values, out)
        if got is not None:
            seen.append(self.region)
        return got

    monkeypatch.setattr(regions.RegionLoop, "_run", spy)
    fused.clear()
    yield seen
    fused.clear()


def _arrays(result):
    return list(result) if isinstance(result, tuple) else [result]


def _per_point(X):
    """A per-point computation over (n, 3) points: rotations, norms, a projection."""
    def f(r, c):
        v = X - c  # (n, 3)
        theta = np.sqrt(np.sum(r * r, axis=1, keepdims=True))
        u = r / theta
        cross = np.stack([u[:, 1] * v[:, 2] - u[:, 2] * v[:, 1], u[:, 2] * v[:, 0] - u[:, 0] * v[:, 2],
                          u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]], axis=1)
        w = v * np.cos(theta) + cross * np.sin(theta) + u * np.einsum("ij,ij->i", u, v)[:, None] * (1 - np.cos(theta))
        p = w[:, :2] / w[:, 2:3]
        return np.concatenate([(p * (1 + 0.1 * np.sum(p * p, axis=1, keepdims=True))).ravel(), theta[:, 0]])
    return f


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_per_sample_computation_runs_as_one_kernel_with_numpys_values(ran, dtype):
    n = 1000
    X = (RNG.normal(size=(n, 3)) + [0, 0, 8]).astype(dtype)
    r = (0.1 * RNG.normal(size=(n, 3))).astype(dtype)
    c = (0.1 * RNG.normal(size=(n, 3))).astype(dtype)
    f = _per_point(X)
    tangents = (np.ones_like(r), np.zeros_like(c))
    for transform, args in ((sj.jit(f), (r, c)), (sj.jvp(f, argnums=(0, 1)), (r, c, tangents))):
        with sj.using_tier("array"), sj.compiling("never"):
            want = _arrays(transform(*args))
        with sj.using_tier("array"), sj.compiling("sync"):
            got = [_arrays(transform(*args)) for _ in range(8)]
        tol = 1e-12 if dtype == np.float64 else 1e-4
        for g in got:
            for a, b in zip(g, want, strict=True):
                assert a.dtype == dtype
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    assert ran, "no region's kernel served"
    assert all(r_.sig[1] == (n,) for r_ in ran)


def test_the_sparse_jacobians_colors_loop_outside_the_kernel(ran):
    """A sparse Jacobian's compressed sweep: arrays (colors, points, 3) over (points, 3)
    operands; its regions have the colors in front (P) and run once per color."""
    n = 1000
    X = RNG.normal(size=(n, 3)) + [0, 0, 8]
    f = _per_point(X)
    idx = RNG.integers(0, 20, n)

    def g(cams):
        C = cams[idx]
        return f(C[:, :3], C[:, 3:])

    cams = 0.1 * RNG.normal(size=(20, 6))
    with sj.using_tier("array"), sj.compiling("never"):
        want = sj.jacobian(g, sparse=True)(cams)
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [sj.jacobian(g, sparse=True)(cams) for _ in range(8)]
    assert any(r.sig[0] and r.sig[1] == (n,) for r in ran), [r.sig for r in ran]
    for m in got:
        assert (m.indices == want.indices).all() and (m.indptr == want.indptr).all()
        np.testing.assert_allclose(m.data, want.data, rtol=1e-12, atol=1e-12)


def _node(shape):
    return t.input_(0, "x", shape, np.float64)


def test_a_region_stays_convex():
    """A sum over the samples (not per sample) read back by a later per-sample step: that
    step cannot join the region its sum depends on (the region would wait for itself)."""
    with t.building():
        x = _node((1000, 3))
        y = t.apply(lambda a: a * a + 1, [x], np.float64)
        y2 = t.apply(lambda a: a * 3 - a, [y], np.float64)
        total = t.einsum([y2], ["ab"], "b")  # (3,): over the samples
        z = t.apply(lambda a, b: a * b + a, [y2, total], np.float64)
        z2 = t.apply(lambda a: a / 2 + a * a, [z], np.float64)
        found = regions.find(t.topo_order([z2]), [z2], np.float64)
    owner = {m: k for k, r in enumerate(found) for m in r.members}
    assert owner.get(y) == owner.get(y2) is not None
    assert owner.get(z) != owner.get(y)
    assert total not in owner
    for r in found:
        inputs = {a for a, *_ in r.inputs}
        for a in inputs:  # no input of a region depends on the region
            assert not set(t.topo_order([a])) & set(r.members)


def test_a_region_takes_in_a_lone_product_its_next_member_reads():
    """A PINN layer's ``Σ_d J[:, d, :]²`` of a wide product's result has no member operand,
    so it starts a region alone; the element function that reads it joins the tanh's
    region and takes it in (one kernel, no (n, 32) array written between them), unless
    its operand depends on that region (then it stays out: the region would wait for
    itself); the values are NumPy's either way."""
    with t.building():
        W = t.input_(1, "W", (32, 32), np.float64)
        h = t.apply(lambda a: a * a + 1, [_node((500, 32))], np.float64)  # a region's member
        hp = t.apply(lambda a: 1 - a * a, [h], np.float64)
        J = t.input_(2, "J", (500, 2, 32), np.float64)
        JW = t.einsum([W, J], ["ab", "cdb"], "cda")  # wide: BLAS's
        lone = t.einsum([JW, JW], ["abc", "abc"], "ac")
        out = t.apply(lambda a, b: a * b + a, [hp, lone], np.float64)
        # the same, with the wide product's operand depending on the tanh's region
        JW2 = t.einsum([W, t.einsum([hp, J], ["ac", "abc"], "abc")], ["ab", "cdb"], "cda")
        lone2 = t.einsum([JW2, JW2], ["abc", "abc"], "ac")
        out2 = t.apply(lambda a, b: a * b + a, [hp, lone2], np.float64)
    found = regions.find(t.topo_order([out]), [out], np.float64)
    owner = {m: k for k, r in enumerate(found) for m in r.members}
    assert owner.get(out) == owner.get(h) == owner.get(lone) is not None
    found = regions.find(t.topo_order([out2]), [out2], np.float64)
    owner = {m: k for k, r in enumerate(found) for m in r.members}
    assert owner.get(h) is not None and owner.get(lone2) != owner.get(h)
    X = RNG.normal(size=(500, 32))
    Wv, Jv = RNG.normal(size=(32, 32)), RNG.normal(size=(500, 2, 32))
    hv = X * X + 1
    hpv = 1 - hv * hv
    jw = np.einsum("ab,cdb->cda", Wv, Jv)
    want = hpv * np.einsum("abc,abc->ac", jw, jw) + hpv
    plan = tensor_eval.Plan([out], 3, np.float64, fused.fuse)
    np.testing.assert_allclose(plan.run([X, Wv, Jv])[0], want, rtol=1e-13)


def test_wide_products_stay_blas():
    """A product with a wide inner axis (a layer's weights) is not a member."""
    with t.building():
        h = _node((1000, 256))
        W = t.input_(1, "W", (256, 256), np.float64)
        z = t.einsum([h, W], ["ab", "cb"], "ac")
        assert regions.roles(z, regions.signature(z) or ((), (1000,))) is None
        small = t.einsum([h, h], ["ab", "ab"], "a")
        assert regions.signature(small) == ((), (1000,))
        assert regions.roles(small, ((), (1000,))) is None  # (256 multiply-adds a sample: over the limit)
        h2 = t.input_(3, "h2", (1000, 128), np.float64)
        at_limit = t.einsum([h2, h2], ["ab", "ab"], "a")  # (128: a PINN's two tangents at width 64)
        assert regions.roles(at_limit, ((), (1000,))) is not None
        narrow = t.einsum([_node((1000, 4)), t.input_(2, "v", (1000, 4), np.float64)], ["ab", "ab"], "a")
        assert [r.member for r in regions.roles(narrow, ((), (1000,)))] == [True, True]


def test_regions_that_would_wait_for_each_other_are_dropped():
    """A member of one region reading a second region's member, and a later member of the
    second reading the first: as single steps the two would each wait for the other, so
    one of them is left as NumPy steps."""
    with t.building():
        x, y = _node((1000, 3)), t.input_(1, "y", (1000, 3), np.float64)
        a1 = t.apply(lambda a: a * a + 1, [x], np.float64)
        a2 = t.apply(lambda a: a * 3 - a, [a1], np.float64)
        b1 = t.apply(lambda a: a * a - 2, [y], np.float64)
        b2 = t.apply(lambda a: a / 3 + a, [b1], np.float64)
        n = t.apply(lambda a, b: a * b + a, [a2, b2], np.float64)  # joins a1's region, reading b2
        m = t.apply(lambda a, b: a - b * a, [b2, a1], np.float64)  # joins b1's region, reading a1
        roots = [n, m]
        found = regions.find(t.topo_order(roots), roots, np.float64)
    owner = {node: k for k, r in enumerate(found) for node in r.members}
    assert owner.get(a1) is not None and owner.get(a1) == owner.get(n)
    assert owner.get(b1) is None and owner.get(m) is None  # (the later region dropped)
    # and the rewritten program computes what the original does
    from symjac.runtime import tensor_eval

    X, Y = RNG.normal(size=(1000, 3)), RNG.normal(size=(1000, 3))
    with sj.compiling("never"):
        plain = tensor_eval.Plan(roots, 2, np.float64).run([X, Y])
        cut = tensor_eval.Plan(roots, 2, np.float64, fused.fuse).run([X, Y])
    for p_, c_ in zip(plain, cut, strict=True):
        np.testing.assert_allclose(c_, p_, rtol=1e-15)


def test_a_region_only_downstream_of_a_cycle_is_kept():
    """Of regions A and B waiting for each other and C reading A after them, the one dropped
    is on the cycle (B): C only waits, and stays a region once B is gone."""
    with t.building():
        x, y = _node((1000, 3)), t.input_(1, "y", (1000, 3), np.float64)
        a1 = t.apply(lambda a: a * a + 1, [x], np.float64)
        b1 = t.apply(lambda a: a * a - 2, [y], np.float64)
        n = t.apply(lambda a, b: a * b + a, [a1, b1], np.float64)
        m = t.apply(lambda a, b: a - b * a, [b1, a1], np.float64)
        c1 = t.apply(lambda a: a * 5, [n], np.float64)
        c2 = t.apply(lambda a: a - 1, [c1], np.float64)
        order = t.topo_order([c2, m])

    def region(members):
        return regions.Region(((), (1000,)), members, [], [members[-1]], np.dtype(np.float64), {})

    A, B, C = region([a1, n]), region([b1, m]), region([c1, c2])  # (A reads b1, B reads a1: a cycle)
    kept = regions._acyclic(order, [A, B, C])
    assert kept == [A, C]


def test_small_pieces_are_left_to_numpy():
    """A region whose arrays all have fewer than ``fused.MIN_ENTRIES`` entries is not built
    (a kernel call costs about what NumPy's few passes over it do)."""
    with t.building():
        x = _node((500, 3))
        y = t.apply(lambda a: a * a + 1, [x], np.float64)
        z = t.apply(lambda a, b: a * b - a, [y, x], np.float64)
        assert regions.find(t.topo_order([z]), [z], np.float64) == []
        big = _node((1000, 3))
        y = t.apply(lambda a: a * a + 1, [big], np.float64)
        z = t.apply(lambda a, b: a * b - a, [y, big], np.float64)
        assert [len(r.members) for r in regions.find(t.topo_order([z]), [z], np.float64)] == [2]


def test_constant_and_zero_entries_of_outputs(ran):
    """Entries a region's program knows (a constant, an exact zero) are written too: the
    outputs come zeroed where the kernel skips zeros, and constants are stored."""
    n = 1000
    A = RNG.normal(size=(n, 3))

    def f(b):
        y = A * b + A * A  # (n, 3)
        z = np.concatenate([y * y - b[0], np.ones((n, 1)) * 3.0, np.zeros((n, 1)), y[:, :1] * b[1]], axis=1)
        return z * (z + 1.0)

    b = RNG.normal(size=3)
    want = f(b)
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [sj.jit(f)(b) for _ in range(8)]
        jac = [sj.jacobian(f)(b) for _ in range(8)]
    assert ran
    for g_ in got:
        np.testing.assert_allclose(g_, want, rtol=1e-13, atol=1e-13)
    with sj.using_tier("array"), sj.compiling("never"):
        jac_want = sj.jacobian(f)(b)
    for j in jac:
        np.testing.assert_allclose(j, jac_want, rtol=1e-13, atol=1e-13)


def test_large_outputs_are_written_into_the_plans_reused_arrays(monkeypatch):
    """A region's large outputs that other steps read are written into arrays of the plan's
    pool, the same ones call after call, whatever those held before."""
    n = 4000
    A = RNG.normal(size=(n, 3))
    M = RNG.normal(size=(3, 100))
    R = RNG.normal(size=(3, 3))
    given: list = []
    real = regions.RegionLoop._run

    def spy(self, values, out=None):
        if out is not None:
            for o in out:
                if o is not None:
                    o.fill(np.nan)  # (what a reused array may hold from the call before)
        got = real(self, values, out)
        if got is not None:
            given.append([o.__array_interface__["data"][0] for o in out if o is not None] if out else [])
        return got

    def f(b):
        y = A * b + A * A  # (n, 3)
        z = np.tanh(y @ R) * y  # (a product of 3 x 3 a sample: in the region)
        return (z * (z + 1.0)) @ M  # (a wide product: read by BLAS, outside the region)

    bs = [RNG.normal(size=3) for _ in range(8)]
    want = [f(b) for b in bs]
    monkeypatch.setattr(regions.RegionLoop, "_run", spy)
    fused.clear()
    try:
        with sj.using_tier("array"), sj.compiling("sync"):
            T = sj.jit(f)
            got = [T(b) for b in bs]
    finally:
        fused.clear()
    for g_, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g_, w, rtol=1e-13, atol=1e-12)
    assert len(given) >= 2 and given[-1]  # the kernel ran, into pooled arrays
    assert given[-1] == given[-2]  # the same arrays both times


# ----- random per-sample programs: the region kernels against NumPy's steps ------------------

_M = RNG.normal(size=(4, 4)) / 2
_ROW = {
    "sin": np.sin,
    "tanh": np.tanh,
    "square": lambda a: a * a,
    "soft": lambda a: np.sqrt(a * a + 1.0),
    "at_M": lambda a: a @ _M,  # a product over the trailing axis (16 multiply-adds a sample)
    "reverse": lambda a: a[:, ::-1],
    "row_sum": lambda a: a * np.sum(a, axis=1, keepdims=True),
    "leaky": lambda a: np.where(a > 0, a, 0.1 * a),
    "rotate": lambda a: np.concatenate([a[:, 1:], a[:, :1]], axis=1),
    "pairs": lambda a: (a.reshape(-1, 2, 2) * 2.0).reshape(-1, 4),
}
_ROW2 = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "max": np.maximum,
    "splice": lambda a, b: np.concatenate([a[:, :2], b[:, 2:]], axis=1),
    "dot": lambda a, b: a * np.einsum("ij,ij->i", a, b)[:, None],
}


def _row_program(steps):
    def f(x):
        regs = [x]
        for s in steps:
            if s[0] == "u":
                regs.append(_ROW[s[1]](regs[s[2] % len(regs)]))
            else:
                regs.append(_ROW2[s[1]](regs[s[2] % len(regs)], regs[s[3] % len(regs)]))
        return regs[-1] + 0.5 * regs[len(regs) // 2]
    return f


def test_random_per_sample_programs_give_numpys_values():
    """Programs of row-wise operations on (2048, 4) arrays: values and JVPs by the region
    kernels (compiled at once) against the same programs' NumPy steps."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    step = st.one_of(st.tuples(st.just("u"), st.sampled_from(sorted(_ROW)), st.integers(0, 5)),
                     st.tuples(st.just("b"), st.sampled_from(sorted(_ROW2)), st.integers(0, 5), st.integers(0, 5)))
    X = RNG.uniform(-1, 1, (2048, 4))
    V = RNG.normal(size=(2048, 4))
    served: list = []
    real = regions.RegionLoop._run

    def spy(self, values, out=None):
        got = real(self, values, out)
        served.append(got is not None)
        return got

    @hypothesis.settings(max_examples=8, deadline=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(st.lists(step, min_size=3, max_size=7))
    def check(steps):
        f = _row_program(steps)
        with sj.using_tier("array"), sj.compiling("never"):
            want = [sj.jit(f)(X), sj.jvp(f)(X, V)]
        with sj.using_tier("array"), sj.compiling("sync"):
            runs = [[sj.jit(f)(X), sj.jvp(f)(X, V)] for _ in range(4)]  # (kernel and NumPy in turn, then the faster)
        for got in runs:
            for g_, w_ in zip(got, want, strict=True):
                np.testing.assert_allclose(g_, w_, rtol=1e-11, atol=1e-11)

    regions.RegionLoop._run = spy
    try:
        check()
    finally:
        regions.RegionLoop._run = real
    assert any(served), "no region kernel served any of the programs"


def test_a_region_of_constants_is_computed_once_when_planned():
    from symjac.runtime import tensor_eval

    with t.building():
        c = t.const(RNG.normal(size=(1000, 3)))
        y = t.apply(lambda a: a * a + 1, [c], np.float64)
        z = t.apply(lambda a, b: a * b - a, [y, c], np.float64)
        assert [len(r.members) for r in regions.find(t.topo_order([z]), [z], np.float64)] == [2]
        x = _node((3,))
        out = t.apply(lambda a, b: a + b, [t.einsum([z], ["ab"], "b"), x], np.float64)  # (over the samples)
    plan = tensor_eval.Plan([out], 1, np.float64, fused.fuse)
    assert not any(isinstance(loop, regions.RegionLoop) for loop in plan.fused)  # (nothing to compile)
    X = RNG.normal(size=3)
    C = c.param.value
    np.testing.assert_allclose(plan.run([X])[0], ((C * C + 1) * C - (C * C + 1)).sum(axis=0) + X, rtol=1e-13)


def test_region_outputs_never_share_memory_with_reused_arrays():
    """A cast member hands out its operand itself (another step's array, drawn from the
    plan's pool): the region's NumPy steps copy it, so the next call does not overwrite it."""
    n = 4000
    m = RNG.random((n, 3)) < 0.5
    y = RNG.normal(size=(n, 3))

    def f(x):
        c = np.where(m, x, x * x).astype(np.float64)
        return c, np.sin(c) * c + y * c

    x1, x2 = (RNG.normal(size=(n, 3)).astype(np.float32) for _ in range(2))
    with sj.using_tier("array"), sj.compiling("never"):
        T = sj.jit(f)
        c1, _ = T(x1)
        kept = c1.copy()
        c2, _ = T(x2)
    np.testing.assert_array_equal(c1, kept)
    assert not np.shares_memory(c1, c2)


def test_a_region_computes_in_the_programs_dtype():
    """A float32 member first, float64 results: the kernel computes in float64, as the
    program's NumPy steps do (not in the first member's float32)."""
    x = RNG.normal(size=(3000, 3)).astype(np.float32)
    y = RNG.normal(size=(3000, 3))

    def f(x, y):
        a = (np.sin(x) * x).astype(np.float64)
        return a * y + y * y

    with sj.using_tier("array"), sj.compiling("never"):
        want = sj.jit(f)(x, y)
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [sj.jit(f)(x, y) for _ in range(6)]
    for g_ in got:
        assert g_.dtype == np.float64
        np.testing.assert_allclose(g_, want, rtol=1e-14, atol=1e-14)


def test_empty_trailing_blocks_and_read_only_arguments():
    x = RNG.normal(size=(3000, 3))

    def f(x):
        y = np.sin(x) * x
        z = y * np.sum(y * x, axis=1, keepdims=True)
        return z, z[:, 3:]

    with sj.using_tier("array"), sj.compiling("sync"):
        for _ in range(4):
            z, empty = sj.jit(f)(x)
            assert empty.shape == (3000, 0)
    # a caller's read-only view of an array it updates: read again on every call
    buf = RNG.normal(size=(3000, 3))
    view = buf.view()
    view.flags.writeable = False
    g = lambda a: np.sin(a) * np.sum(a * a, axis=1, keepdims=True)  # noqa: E731
    with sj.using_tier("array"), sj.compiling("sync"):
        T = sj.jit(g)
        for _ in range(8):
            buf[:] = RNG.normal(size=(3000, 3))
            np.testing.assert_allclose(T(view), g(buf), rtol=1e-13, atol=1e-13)


def test_a_pinns_tangents_at_width_64_join_a_region():
    """The forward Laplacian's tangents of a width-64 layer, (4,096, 2, 64): the derivative
    times them, and their squares summed over the two tangents, are one region (as NumPy
    steps they were two passes over 524,288 entries each)."""
    with t.building():
        d = t.input_(0, "d", (4096, 64), np.float64)
        jz = t.input_(1, "jz", (4096, 2, 64), np.float64)
        jh = t.einsum([d, jz], ["ab", "acb"], "acb")
        sq = t.einsum([jh, jh], ["acb", "acb"], "ab")
        out = t.apply(lambda a, b: a * (1 - b), [sq, d], np.float64)
        found = regions.find(t.topo_order([out, jh]), [out, jh], np.float64)
    assert [sorted(m.op for m in r.members) for r in found] == [["einsum", "einsum", "map"]]
    plan = tensor_eval.Plan([out, jh], 2, np.float64, fused.fuse)
    for loop in plan.fused:
        loop.start(wait=True)
    D, JZ = RNG.normal(size=(4096, 64)), RNG.normal(size=(4096, 2, 64))
    JH = D[:, None, :] * JZ
    for _ in range(3):
        got_out, got_jh = plan.run([D, JZ])
        np.testing.assert_allclose(got_jh, JH, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(got_out, (JH ** 2).sum(axis=1) * (1 - D), rtol=1e-12, atol=1e-12)


# ----- small regions: pieces of tiny arrays as one kernel (``regions.SMALL_SIG``) -----

IDX = np.array([1, 0, 2, 2])  # constant indices, one repeated (its gradient's scatter adds them up)


def _packed(p):
    """Parameters packed and unpacked on arrays of a few entries (a GMM's, an optimiser's):
    slices, a gather by constant indices, sums and element functions; its gradient scatters
    and embeds."""
    a, b = p[:3], p[3:]
    L = np.concatenate([np.zeros(1), b])[IDX]
    q = np.exp(a) * L[:3] + np.sum(a ** 2) - L[3]
    return np.sum(np.log1p(q ** 2)) + 0.5 * np.sum(b ** 2) - np.sum(a)


def test_small_pieces_run_as_one_kernel_with_numpys_values(ran):
    p = RNG.normal(size=6)
    for transform in (sj.jit(_packed), sj.grad(_packed), sj.hessian(_packed)):
        with sj.using_tier("array"), sj.compiling("never"):
            want = transform(p)
        with sj.using_tier("array"), sj.compiling("sync"):
            got = [transform(p) for _ in range(8)]
        for g_ in got:
            np.testing.assert_allclose(g_, want, rtol=1e-13, atol=1e-14)
    small = [r for r in ran if r.sig == regions.SMALL_SIG]
    assert small, "no small region's kernel served"
    assert {"gather", "scatter", "embed"} <= {m.op for r in small for m in r.members}
    assert all(max(m.size for m in r.members) <= regions.SMALL for r in small)


def test_small_regions_keep_numpys_special_values(ran):
    """inf, NaN and signed zeros through a small region's kernel as through NumPy's steps."""
    def f(p):
        q = np.log(p[:4]) * p[4:] + np.sqrt(p[:4])
        return np.concatenate([q / p[4:], np.exp(q) - 1.0, p[:4] / 0.0])

    p = np.array([1.5, -1.0, 0.0, np.inf, np.nan, 2.0, -0.0, 1e308])
    with sj.using_tier("array"), sj.compiling("never"):
        want = sj.jit(f)(p)
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [sj.jit(f)(p) for _ in range(8)]
    assert any(r.sig == regions.SMALL_SIG for r in ran)
    for g_ in got:
        np.testing.assert_array_equal(np.isnan(g_), np.isnan(want))
        np.testing.assert_array_equal(g_[~np.isnan(want)], want[~np.isnan(want)])
        np.testing.assert_array_equal(np.signbit(g_[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))


def test_a_structural_zero_times_inf_is_nan_in_a_small_region(ran):
    """``[0, x] @ W`` with an infinite ``W[0, 0]``: NumPy's product gives NaN (0 * inf), and so
    must the region's kernel (a product's zero entries are not dropped from its sums)."""
    def f(x, W):
        return np.tanh(np.concatenate([np.zeros(1), x]) @ W) ** 2 * x[:2] + np.sum(x)

    x = np.array([0.5, -1.0, 2.0])
    W = RNG.normal(size=(4, 2))
    W[0, 0] = np.inf
    with sj.using_tier("array"), sj.compiling("never"):
        want = sj.jit(f)(x, W)
    assert np.isnan(want[0]) and np.isfinite(want[1])
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [sj.jit(f)(x, W) for _ in range(8)]
    assert any(r.sig == regions.SMALL_SIG and any(m.op == "einsum" for m in r.members) for r in ran)
    for g_ in got:
        np.testing.assert_array_equal(np.isnan(g_), np.isnan(want))
        np.testing.assert_allclose(g_[1], want[1], rtol=1e-14)


def test_small_regions_take_gathers_by_constant_indices_within_bounds_only():
    with t.building():
        x = t.input_(0, "x", (3,), np.float64)
        y = t.apply(lambda a: a * a + 1, [x], np.float64)
        inside = t.gather(y, [t.const(np.array([2, -3, 0]))], 0)
        outside = t.gather(y, [t.const(np.array([0, 3]))], 0)
        given = t.gather(y, [t.input_(1, "k", (2,), np.int64)], 0)  # (indices known only at run time)
    assert regions.roles(inside, regions.SMALL_SIG) is not None
    assert regions.roles(outside, regions.SMALL_SIG) is None
    assert regions.roles(given, regions.SMALL_SIG) is None


def test_small_regions_merge_where_they_stay_convex():
    """A step reading two small regions merges them into one; one that reads a value outside
    (a product over large arrays) that depends on a region cannot take that region in."""
    with t.building():
        x = t.input_(0, "x", (4,), np.float64)
        big = t.input_(1, "X", (1000, 4), np.float64)
        a1 = t.apply(lambda a: a * a + 1, [x], np.float64)
        a2 = t.apply(lambda a: a - 3, [a1], np.float64)
        b1 = t.apply(lambda a: 2 * a - 1, [x], np.float64)
        b2 = t.apply(lambda a: a * a, [b1], np.float64)
        both = t.apply(lambda a, b: a * b, [a2, b2], np.float64)
        via = t.einsum([big, t.apply(lambda a: a / 2, [both], np.float64)], ["ab", "b"], "a")  # (1000,)
        back = t.einsum([big, via], ["ab", "a"], "b")  # (4,): over the rows, depends on the region
        last = t.apply(lambda a, b: a + b, [both, back], np.float64)
        last2 = t.apply(lambda a: a * 3, [last], np.float64)
        order = t.topo_order([last2])
        found = regions.find(order, [last2], np.float64)
    owner = {m: k for k, r in enumerate(found) for m in r.members}
    assert owner.get(a1) == owner.get(a2) == owner.get(b1) == owner.get(b2) == owner.get(both) is not None
    assert owner.get(last) != owner.get(both)
    for r in found:
        for a in {a for a, *_ in r.inputs}:  # no input of a region depends on the region
            assert not set(t.topo_order([a])) & set(r.members)


def test_a_small_region_read_through_an_outside_value_is_not_merged():
    """A step joining region A reads a member of region C and a value outside that depends on
    C: merging C into A would make A wait for itself, so the two stay apart (and both stay)."""
    with t.building():
        x = t.input_(0, "x", (4,), np.float64)
        y = t.input_(1, "y", (4,), np.float64)
        big = t.input_(2, "X", (1000, 4), np.float64)
        a1 = t.apply(lambda a: a * a + 1, [x], np.float64)
        a2 = t.apply(lambda a: a - 3, [a1], np.float64)
        c1 = t.apply(lambda a: 2 * a - 1, [y], np.float64)
        c2 = t.apply(lambda a: a * a, [c1], np.float64)
        c3 = t.apply(lambda a: a + 5, [c2], np.float64)
        c4 = t.apply(lambda a: a / 7, [c3], np.float64)
        back = t.einsum([big, t.einsum([big, c4], ["ab", "b"], "a")], ["ab", "a"], "b")  # (4,): depends on C
        n = t.apply(lambda a, c, b: a * c + b, [a2, c4, back], np.float64)
        n2 = t.apply(lambda a: a * 3, [n], np.float64)
        found = regions.find(t.topo_order([n2]), [n2], np.float64)
    owner = {m: k for k, r in enumerate(found) for m in r.members}
    assert owner.get(a1) == owner.get(n) is not None
    assert owner.get(c1) == owner.get(c4) is not None and owner.get(c1) != owner.get(a1)


def test_a_small_regions_max_and_min_are_numpys(ran):
    """np.max / np.min of small arrays in a small region: NaN wins, as in NumPy's steps."""
    def f(p):
        q = np.sin(p) * 2.0
        m = np.max(q.reshape(2, 3), axis=1)
        return np.exp(q - np.max(q)) + np.min(q) * np.concatenate([m, m, m])

    for p in (RNG.normal(size=6), np.array([0.5, np.nan, -1.0, 2.0, np.inf, -0.0])):
        with sj.using_tier("array"), sj.compiling("never"):
            want = [sj.jit(f)(p), sj.jacobian(f)(p)]
        with sj.using_tier("array"), sj.compiling("sync"):
            runs = [[sj.jit(f)(p), sj.jacobian(f)(p)] for _ in range(8)]
        for got in runs:
            for g_, w_ in zip(got, want, strict=True):
                np.testing.assert_array_equal(np.isnan(g_), np.isnan(w_))
                np.testing.assert_allclose(g_, w_, rtol=1e-13, atol=1e-14)
    assert any(m.op == "reduce" for r in ran if r.sig == regions.SMALL_SIG for m in r.members)
    with t.building():
        x = t.input_(0, "x", (2, 3), np.float64)
        y = t.reduce_(t.apply(lambda a: a * a, [x], np.float64), "max", (1,))
    assert regions.roles(y, regions.SMALL_SIG) is not None
