"""The operation records and the LLVM backend built from them: every record's
emitter against its NumPy reference on IEEE special values (on the tape and in
a compiled kernel, float64 and float32), the Python rendering run as plain
Python against the kernel, names the printer invents never colliding with
parameters, no user string in generated modules, the LLVM IR view, and a
damaged cache of the tape interpreter."""

import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import sympy as sp

import symjac as sj
from symjac.backend import kernels as _kernels
from symjac.backend.ssa import KernelSpec, Program
from symjac.ir.ops import BY_NAME, RECORDS, Op
from symjac.runtime import dispatch
from symjac.runtime import tape as _tape
from symjac.runtime.dispatch import compiled_for
from symjac.runtime.jit import cache as _cache
from symjac.runtime.jit import wrappers

SPECIAL = [-np.inf, -1e300, -3.5, -2.0, -1.0, -0.5, -1e-300, -0.0, 0.0, 1e-300, 0.5, 1.0, 2.0, 3.5, 1e300,
           np.inf, np.nan]
COMPUTED = [op for op in RECORDS if op.emit is not None]


def _grid(op: Op, dtype):
    big = np.finfo(dtype).max / 2  # 1e300 and 1e-300 scaled into the dtype's range
    values = np.array([v if not np.isfinite(v) or v == 0 or 1e-30 < abs(v) < 1e30
                       else np.sign(v) * (big if abs(v) > 1 else np.finfo(dtype).tiny) for v in SPECIAL], dtype)
    if op.arity == 3:  # select: the condition takes the special values, the branches two numbers
        return [np.array(c, dtype=dtype)
                for c in zip(*itertools.product(values, [1.5, -2.5], [-0.0, np.nan]), strict=True)]
    return [np.array(c, dtype=dtype) for c in zip(*itertools.product(values, repeat=op.arity), strict=True)]


def _program(dtype):
    """One program applying every record to every point of its grid."""
    program, inputs, segments = Program(), [], {}
    for op in COMPUTED:
        columns = _grid(op, dtype)
        start = len(program.stores)
        for point in zip(*columns, strict=True):
            args = []
            for value in point:
                program.ops.append(("load", (), (0, len(inputs))))
                inputs.append(value)
                args.append(len(program.ops) - 1)
            program.ops.append((op.name, tuple(args), None))
            program.stores.append((0, len(program.stores), len(program.ops) - 1))
        segments[op.name] = (start, len(program.stores), columns)
    spec = KernelSpec(f"every_record_{np.dtype(dtype).name}", [("x", (len(inputs),))],
                      [(len(program.stores),)], np.dtype(dtype), "every record")
    return program, spec, np.array(inputs, dtype=dtype), segments


def _agree(got, want, dtype):
    """Bit for bit where the reference is not finite or zero; within a few
    ulps elsewhere (NumPy's SIMD transcendental functions are not libm's)."""
    got, want = np.asarray(got, dtype), np.asarray(want, dtype)
    nan = np.isnan(want)
    exact = ~np.isfinite(want) | (want == 0)
    same = (got == want) & (np.signbit(got) == np.signbit(want))
    close = np.isclose(got, want, rtol=8 * np.finfo(dtype).eps, atol=0)
    return np.where(nan, np.isnan(got), np.where(exact, same, close))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_record_matches_numpy_on_special_values_on_tape_and_kernel(dtype):
    program, spec, x, segments = _program(dtype)
    out_tape = np.zeros(len(program.stores), dtype)
    _tape.encode(program, [x.size], [out_tape.size], dtype).run(x, out_tape)
    source = _kernels.module_source(program, spec)
    path = _cache.write_module(source, f"{spec.name}_{_cache.source_digest(source)}")
    kernel = _cache.load_function(path, spec.name, lambda: source)
    wrappers.compile_kernel(kernel, wrappers.signature([1], [1], dtype))
    out_kernel = np.zeros_like(out_tape)
    kernel(x, out_kernel)
    np.testing.assert_array_equal(out_kernel, out_tape)  # the same emitters: the same bits
    failures = []
    for op in COMPUTED:
        start, stop, columns = segments[op.name]
        with np.errstate(all="ignore"):
            want = np.array([op.fold(*(dtype(v) for v in point)) for point in zip(*columns, strict=True)],
                            dtype)
        ok = _agree(out_tape[start:stop], want, dtype)
        for j in np.nonzero(~ok)[0]:
            point = tuple(float(c[j]) for c in columns)
            failures.append(f"{op.name}{point}: got {out_tape[start + j]!r}, NumPy {want[j]!r}")
    assert not failures, "\n".join(failures[:40])


def _rendered(transform, args):
    """The rendering run as plain Python, and the tape's (= kernel's) outputs."""
    compiled = compiled_for(transform.request, args)
    if compiled.reads is not None:  # arrays the function reads (its weights) come after the arguments
        compiled, args = dispatch.with_reads(transform.request, args, compiled)
    text = transform.source(*args[:len(args) - len(compiled.read_paths)]).split("\n", 1)[1]
    namespace: dict = {}
    exec(compile(text, "<rendering>", "exec"), namespace)
    function = namespace[compiled.spec.name]
    inputs = [np.asarray(args[i] if k is None else args[i][k], dtype=compiled.dtype)
              for i, k in compiled.leaves]
    params = [a.reshape(shape) if shape else compiled.dtype.type(a) for a, (_, shape) in
              zip(inputs, compiled.spec.inputs, strict=True)]
    outs = [np.zeros(s, compiled.dtype) for s in compiled.spec.outputs]
    with np.errstate(all="ignore"):
        function(*params, *outs)
    flat = np.concatenate([a.reshape(-1) for a in inputs]) if inputs else np.zeros(0, compiled.dtype)
    buf = np.zeros(compiled.out_offsets.total, compiled.dtype)
    compiled.tape.run(flat, buf)
    slots = compiled.out_offsets.split(buf)
    return [o.reshape(-1) for o in outs], [slot[: o.size] for slot, o in zip(slots, outs, strict=True)]


def _examples():
    from symjac import examples

    for make in examples.ALL:
        ex = make()
        yield ex.name, (sj.hessian(ex.fn) if ex.scalar else sj.jacobian(ex.fn)), ex.args


@pytest.mark.parametrize("name, transform, args", list(_examples()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_rendering_run_as_python_agrees_with_the_kernel(name, transform, args):
    with sj.compiling("never"):
        rendered, kernel = _rendered(transform, args)
    for r, k in zip(rendered, kernel, strict=True):
        np.testing.assert_allclose(r, k, rtol=1e-12, atol=1e-300)


def test_the_rendering_of_every_primitive_agrees_with_the_kernel():
    from test_tiers import SMOOTH, _args, _combined

    fn, _ = _combined(())
    with sj.compiling("never"):
        for transform in (sj.jit(fn), sj.jacobian(fn, argnums=SMOOTH)):
            rendered, kernel = _rendered(transform, _args(()))
            for r, k in zip(rendered, kernel, strict=True):
                np.testing.assert_allclose(r, k, rtol=1e-12, atol=1e-300)


# ----- names ---------------------------------------------------------------------------------

INVENTED = ["b", "n", "i", "k", "out0", "out1", "flat0", "flat_x", "t0", "t1", "_t0", "_k", "_a0", "np", "range",
            "_select", "_safe_mul", "a0", "kernel", "sample", "njit", "prange", "_C0_IDX", "_L0_OUT"]


def _named_after_invented_names():
    params = ", ".join(INVENTED)
    body = " + ".join(f"numpy.sin({p}) * {p}" for p in INVENTED)
    namespace = {"numpy": np}
    exec(f"def f({params}):\n    return numpy.where({INVENTED[0]} > 0, numpy.sqrt(numpy.abs({INVENTED[1]})), "
         f"{INVENTED[2]}) * ({body})", namespace)
    return namespace["f"]


def test_parameters_named_like_invented_names_get_compiled_vmap_kernels():
    f = _named_after_invented_names()
    rng = np.random.default_rng(0)
    X = [rng.uniform(-1, 1, (6, 3)) for _ in INVENTED]
    for transform in (sj.vmap(sj.jacobian(f)), sj.vmap(sj.jit(f), in_axes=(0,) * 3 + (None,) * (len(INVENTED) - 3))):
        axes = transform.in_axes if isinstance(transform.in_axes, tuple) else (0,) * len(INVENTED)
        args = [x if ax == 0 else x[0] for x, ax in zip(X, axes, strict=True)]
        info = transform.compile(*args)
        assert info.tier == "kernel", info.error
        got = transform(*args)
        want = np.stack([transform.inner(*[a[s] if ax == 0 else a for a, ax in zip(args, axes, strict=True)])
                         for s in range(6)])
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_the_rendering_with_parameters_named_like_invented_names_runs():
    f = _named_after_invented_names()
    args = [np.linspace(0.1, 0.9, 3) + j for j in range(len(INVENTED))]
    with sj.compiling("never"):
        rendered, kernel = _rendered(sj.jacobian(f, argnums=(0, 1, 2)), args)
    for r, k in zip(rendered, kernel, strict=True):
        np.testing.assert_allclose(r, k, rtol=1e-12)


HOSTILE = 'f"""\nraise SystemExit("user code ran")\n"""\u00e9\u00b2 # \n\r'


def test_a_hostile_function_name_never_reaches_generated_code():
    def f(x):
        return np.sin(x) * x

    f.__name__ = f.__qualname__ = HOSTILE
    x = np.linspace(0.1, 1.0, 4)
    with sj.compiling("sync"):
        for transform in (sj.jacobian(f), sj.vmap(sj.grad(lambda x: np.sum(f(x))))):
            arg = x if not isinstance(transform, type(sj.vmap(f))) else x.reshape(2, 2)
            info = transform.compile(arg)
            assert info.tier == "kernel", info.error
            with open(info.path) as fh:
                module = fh.read()
            assert "user code ran" not in module and '"""' not in module
            assert all(c.isascii() for c in module)
    np.testing.assert_allclose(sj.jacobian(f)(x), np.diag(np.cos(x) * x + np.sin(x)))
    rendering = sj.jacobian(f).source(x)
    assert "user code ran" not in rendering.replace("user_code_ran", "")  # the title has identifiers only
    exec(compile(rendering, "<rendering>", "exec"), {})  # and running the rendering runs no user code


def test_module_writer_refuses_a_name_that_is_not_an_identifier():
    spec = KernelSpec('x"; import os', [("x", (1,))], [(1,)], np.dtype(np.float64), "t")
    with pytest.raises(ValueError, match="not a plain identifier"):
        _kernels.module_source(Program(), spec)


# ----- the LLVM IR view, the tape interpreter's cache ---------------------------------------------


def test_source_shows_the_llvm_ir_on_request():
    f = sj.jacobian(lambda x: np.sin(x) * x[::-1])
    text = f.source(np.zeros(3), llvm=True)
    assert "define void @symjac_" in text and "call double @sin(double" in text
    assert "declare double @sin(double) #0" in text and "fmul double" in text and "nobuiltin" in text
    with open(f.info(np.zeros(3)).path) as fh:
        symbol = text.split("define void @", 1)[1].split("(", 1)[0]
        assert symbol in fh.read()  # the body the kernel module calls
    batch = sj.vmap(f).source(np.zeros((2, 3)), llvm=True)
    assert "i64 %start, i64 %stop" in batch and "call double @cos(double" in batch


_DAMAGED_VM = """
import warnings, numpy as np, symjac as sj
from symjac.runtime import tape
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    with sj.compiling("never"):
        J = sj.jacobian(lambda x: np.sin(x) * x)(np.array([0.5, 1.0]))
        tape._function("run", np.float64)  # the Numba wrapper, which loads in the background
        J = sj.jacobian(lambda x: np.sin(x) * x)(np.array([0.5, 1.0]))
print(J.tobytes().hex())
print("|".join(str(w.message) for w in caught))
"""


def test_a_damaged_cache_of_the_tape_interpreter_is_rebuilt_with_a_warning(tmp_path):
    env = dict(os.environ, SYMJAC_CACHE_DIR=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", _DAMAGED_VM], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    files = list((tmp_path / "kernels" / "__pycache__").glob("tape_vm_*.nb*"))
    assert files, "the interpreter's machine code is cached next to its module"
    for p in files:
        p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 3])
    again = subprocess.run([sys.executable, "-c", _DAMAGED_VM], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    want = sj.jacobian(lambda x: np.sin(x) * x)(np.array([0.5, 1.0]))
    assert again.stdout.splitlines()[0] == want.tobytes().hex()
    assert "could not be read" in again.stdout.splitlines()[1], textwrap.shorten(again.stdout, 300)


_BODY = """
import numpy as np, symjac as sj
sj.set_compile_mode("sync")
x = np.linspace(0.1, 1.0, 5)
J = sj.jacobian(lambda x: np.sin(x) * np.roll(x, 1) + x ** 3)
print(J(x).tobytes().hex(), sj.cache_info().compiles, J.info(x).tier)
"""


@pytest.mark.parametrize("damage", ["truncated", "flipped", "writable by others"])
def test_a_damaged_or_untrusted_kernel_body_is_compiled_again_never_loaded(tmp_path, damage):
    env = dict(os.environ, SYMJAC_CACHE_DIR=str(tmp_path))

    again_err = []

    def run():
        out = subprocess.run([sys.executable, "-c", _BODY], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        again_err[:] = [out.stderr]
        return out.stdout.split()

    first = run()
    (obj,) = (tmp_path / "kernels").glob("symjac_kernel_*.o")
    data = obj.read_bytes()
    if damage == "truncated":
        obj.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        obj.write_bytes(data[:-100] + bytes(b ^ 0xFF for b in data[-100:]))
    else:
        os.chmod(obj, 0o666)
    for p in (tmp_path / "kernels").glob("*.ok"):
        p.unlink()  # the Numba wrappers compile again too, so the body must be resolvable
    for p in (tmp_path / "kernels" / "__pycache__").glob("*"):
        p.unlink()
    again = run()
    assert again[0] == first[0] and again[2] == "kernel"
    assert "was changed, or is not private to you" in again_err[0], "the README promises a warning"
    assert obj.read_bytes() == data and not obj.stat().st_mode & 0o022  # rewritten from a fresh compile


def test_sympy_differentiates_the_piecewise_constant_heads_to_zero():
    """rint, trunc and floor_divide differentiate to zero in symjac; SymPy's own
    ``diff`` of an expression holding them (``.symbolic()`` output) says so too
    instead of raising AttributeError."""
    x, y = sp.symbols("x y")
    for name in ("rint", "trunc"):
        head = BY_NAME[name].head
        assert sp.diff(head(x) * x, x) == head(x)
    assert sp.diff(BY_NAME["floor_divide"].head(x, y), x) == 0
