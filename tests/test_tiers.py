"""The tape interpreter and the specialised kernels run the same program and
must return the same bits; the switch from one to the other is visible."""

import numpy as np
import pytest
from primitive_cases import CASES, DOMAINS, ISSUE_13, ISSUE_26

import symjac as sj
from symjac import examples

#: the pools a combined function takes, one argument per domain (in DOMAINS' order)
POOLS = list(DOMAINS)
#: the pools differentiated (not those of rounding cases, whose derivative is zero)
SMOOTH = tuple(i for i, d in enumerate(POOLS) if d not in ("frac", "near_int"))


def _combined(shape, part=0, parts=1):
    """One function computing every primitive case that accepts ``shape`` arguments
    (every ``parts``-th of them from the ``part``-th), so a handful of kernels cover
    the whole table."""
    picked = [(name, c) for name, cases in CASES.items() for c in cases if all(s == shape for s in c.shapes[0])
              and len(c.shapes[0]) <= 2][part::parts]

    def everything(*pools):
        by_name = dict(zip(POOLS, pools, strict=True))
        return tuple(np.asarray(c.fn(*(by_name[d] for d in c.domains))) * 1.0 for _, c in picked)

    return everything, picked


def _args(shape, seed=0):
    rng = np.random.default_rng(seed)
    return [DOMAINS[d](rng, shape) for d in POOLS]


def _both(transform, args):
    with sj.compiling("never"):
        tape = transform(*args)
    info = transform.compile(*args)
    assert info.tier == "kernel" and info.state == "ready", info
    kernel = transform(*args)
    return tape, kernel


def _assert_identical(a, b):
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for p, q in zip(a, b, strict=True):
            _assert_identical(p, q)
    else:
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_array_equal(a, b)  # bit for bit (NaNs in the same places)


#: the table split in parts, one function each: an optimiser's time grows faster than a
#: function's size, and the parts run in parallel under xdist
PARTS = 4


def test_the_parts_cover_every_primitive():
    whole = [name for name, _ in _combined(())[1]]
    parts = [name for part in range(PARTS) for name, _ in _combined((), part, PARTS)[1]]
    assert len(whole) > 60 and sorted(parts) == sorted(whole)


@pytest.mark.parametrize("part", range(PARTS))
@pytest.mark.parametrize("kind", ["jit", "jacobian"])
def test_every_primitive_gives_identical_bits_on_tape_and_kernel(kind, part):
    fn, picked = _combined((), part, PARTS)
    assert len(picked) > 60 // PARTS
    transform = sj.jit(fn) if kind == "jit" else sj.jacobian(fn, argnums=SMOOTH)
    args = _args(())
    tape, kernel = _both(transform, args)
    _assert_identical(tape, kernel)


@pytest.mark.parametrize("make", examples.ALL, ids=lambda m: m.__name__[5:])
def test_examples_give_identical_bits_on_tape_and_kernel(make):
    ex = make()
    transform = sj.hessian(ex.fn) if ex.scalar else sj.jacobian(ex.fn, argnums=1 if ex.name in ("pendulum", "robertson") else 0)
    tape, kernel = _both(transform, ex.args)
    _assert_identical(tape, kernel)


def test_float32_identical_bits():
    fn, _ = _combined((3,))
    args = [a.astype(np.float32) for a in _args((3,))]
    tape, kernel = _both(sj.jit(fn), args)
    _assert_identical(tape, kernel)


def test_background_compile_serves_the_tape_then_swaps_in_the_kernel():
    def heavy(x):
        y = x
        for k in range(12):
            y = np.sin(y * (k + 1)) + np.cos(y[::-1]) * y.sum()
        return y

    x = np.linspace(0.1, 1.0, 8)
    f = sj.jacobian(heavy)
    with sj.compiling("background"):
        first = f(x)
        info = f.info(x)
        assert info.tier == "tape" and info.state == "compiling"
    sj.wait_for_kernels()
    info = f.info(x)
    assert info.tier == "kernel" and info.state == "ready" and info.compile_seconds > 0
    np.testing.assert_array_equal(f(x), first)
    stats = sj.cache_info()
    assert stats.tape_calls >= 1 and stats.kernel_calls >= 1



def _every_case(names=None):
    """One function computing every primitive case (of the rows ``names``) at its
    first shapes, with the arguments of all cases concatenated: one kernel covers them."""
    picked = [(name, c) for name, cases in CASES.items() for c in cases if names is None or name in names]
    rng = np.random.default_rng(0)
    args, spans = [], []
    for _, c in picked:
        spans.append((len(args), len(c.domains)))
        args += [DOMAINS[d](rng, s) for d, s in zip(c.domains, c.shapes[0], strict=True)]

    fns = tuple(c.fn for _, c in picked)  # (a closure's tuple: the cases run on the traced view, SciPy's too)

    def everything(*a):
        return tuple(np.asarray(fn(*a[i:i + n])) * 1.0 for fn, (i, n) in zip(fns, spans, strict=True))

    return everything, args


def _products(fn, args):
    """jit, jvp and vjp of ``fn`` with respect to every argument, with their vectors."""
    rng = np.random.default_rng(1)
    nums = tuple(range(len(args)))
    out = fn(*args)
    v = tuple(rng.standard_normal(np.shape(a)) for a in args)
    u = tuple(rng.standard_normal(np.shape(o)) for o in out)
    return [(sj.jit(fn), args), (sj.jvp(fn, argnums=nums), [*args, v]), (sj.vjp(fn, argnums=nums), [*args, u])]


def test_rows_of_issue_13_give_identical_bits_on_tape_and_kernel():
    # values and reverse mode here (about 15 s of Numba compiling); jvp too in the slow test below
    for transform, args in _products(*_every_case(ISSUE_13))[::2]:
        tape, kernel = _both(transform, args)
        _assert_identical(tape, kernel)


def test_rows_of_issue_26_give_identical_bits_on_tape_and_kernel():
    # positions (integer selects), running extrema, norms, windows and convolutions: values and reverse mode
    for transform, args in _products(*_every_case(ISSUE_26))[::2]:
        tape, kernel = _both(transform, args)
        _assert_identical(tape, kernel)


@pytest.mark.slow
def test_every_case_gives_identical_bits_on_tape_and_kernel():
    for transform, args in _products(*_every_case()):
        tape, kernel = _both(transform, args)
        _assert_identical(tape, kernel)
