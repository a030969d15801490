"""Matrix products off OpenBLAS's threads: NumPy's own BLAS, one thread per block.

An array program with compiled loops (``fused.py``, ``regions.py``) runs two
thread pools: Numba's, for its loops, and OpenBLAS's, for NumPy's matrix
products.  After each product OpenBLAS's threads spin for ~0.1 s before they
sleep, and on two cores they took the cores from the loops that came next: a
PINN Laplacian's sample loops measured 94 ns a sample serial against 227 on
both cores, so they ran serial.  Here such a plan's products run without
OpenBLAS's threads (:func:`kind`): a tall product (many rows, few columns)
cut into one block of rows per Numba thread and a stack of products into
blocks of entries, each block one single-threaded call of the same OpenBLAS
``gemm`` NumPy calls; a small product on the calling thread, BLAS's thread
count at 1.  Nothing else spins (the PINN Laplacian at width 32: 3.3 -> 2.3
ms a call; its loops then measured faster on both cores).

The BLAS is the library NumPy itself loaded (a NumPy wheel's
``scipy_openblas64_``): it is only looked up among the libraries already in
the process (``RTLD_NOLOAD``), never loaded from disk.  Its ``cblas_?gemm`` is
called by symbol from a small Numba module written to the kernel cache like
any kernel module (its machine code then comes from Numba's disk cache); its
thread count is set to 1 around each product, under a lock, and put back.
Where anything is missing (another BLAS, another platform, a failed
self-check) NumPy's ``matmul`` serves, as it does until the module is loaded.
Bits: a block's rows are summed by the same kernel as NumPy's, but BLAS may
pick other kernels for a smaller block, so results may differ from
``np.matmul``'s within rounding.
"""

from __future__ import annotations

import ctypes
import glob
import math
import os
import threading

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import cache
from .wrappers import num_threads, threads_usable

#: a product runs on Numba's threads when its result has at least MIN_ROWS rows per thread ...
MIN_ROWS = 64
#: ... and at least TALL times as many rows as its inner and as its output dimension (a logistic
#: regression's Xᵀ D X, 100 x 1,000 @ 1,000 x 100, cut by rows: 0.45x NumPy's)
TALL = 4
#: a product of at most SMALL multiply-adds that is neither runs on the calling thread, BLAS's
#: thread count at 1 (a GMM's sums over its 1,000 points, 25 x 1,000 @ 1,000 x 10)
SMALL = 1 << 20
#: ... and one of at most QUIET multiply-adds runs as NumPy's matmul, nothing around it: OpenBLAS
#: runs it on the calling thread anyway (measured: its other threads used no CPU tick over 20,000
#: products of up to 262,144 multiply-adds, nor over 3,000 of 512,000; 1,000,000 woke them), and
#: setting the thread count around it cost ~5 us a product (a GMM at (2, 5), whose two products
#: are such: 536 against 591 us a call, in-process A/B)
QUIET = 1 << 18

#: (symbol prefix in NumPy's OpenBLAS, symbol here) per dtype
_GEMM = {np.dtype(np.float64): ("scipy_cblas_dgemm64_", "symjac_cblas_dgemm"),
         np.dtype(np.float32): ("scipy_cblas_sgemm64_", "symjac_cblas_sgemm")}
#: the same for matrix-vector products (``whole.py``'s kernels: a ``gemm`` of one column took
#: ~14 µs for a 128 x 128 matrix, a ``gemv`` ~1.8)
_GEMV = {np.dtype(np.float64): ("scipy_cblas_dgemv64_", "symjac_cblas_dgemv")}
_SET_THREADS = "scipy_openblas_set_num_threads64_"
_GET_THREADS = "scipy_openblas_get_num_threads64_"
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_REVISION = 1  #: in the module's text: a change to the intrinsic below gives a new file (and cache)


class _Library:
    def __init__(self, lib) -> None:
        self.set_threads = lib[_SET_THREADS]
        self.set_threads.argtypes, self.set_threads.restype = [ctypes.c_int], None
        self.get_threads = lib[_GET_THREADS]
        self.get_threads.argtypes, self.get_threads.restype = [], ctypes.c_int
        self.gemm = {dt: ctypes.cast(lib[name], ctypes.c_void_p).value for dt, (name, _) in _GEMM.items()}
        self.gemv = {dt: ctypes.cast(lib[name], ctypes.c_void_p).value for dt, (name, _) in _GEMV.items()}


_library: _Library | None | bool = False  # False: not looked up yet
_lock = threading.Lock()  # around a threaded product (the BLAS thread count is the process's)
_state_lock = threading.Lock()
_lowered: list = []  # the BLAS thread count a running threaded product set to 1 from (put back after a fork)
_state: dict = {}  # dtype -> "started", "ready" or "none"
_functions: dict = {}  # dtype -> the loaded Numba functions (rows, batches)


def _forget_after_fork() -> None:
    """In a forked child: a product running on the parent's threads does not go on here."""
    global _lock, _state_lock
    _lock, _state_lock = threading.Lock(), threading.Lock()
    if _lowered and isinstance(_library, _Library):  # forked in the middle of one: the count put back
        _library.set_threads(_lowered.pop())
    for dt, state in list(_state.items()):
        if state == "started":  # (the parent's background load): asked again on the next run
            del _state[dt]


os.register_at_fork(after_in_child=_forget_after_fork)


def library() -> _Library | None:
    """NumPy's OpenBLAS, if it is the ILP64 ``scipy_openblas64_`` already in the process."""
    global _library
    if _library is False:
        _library = None
        try:
            from llvmlite import binding as llvm

            directory = os.path.dirname(os.path.abspath(np.__file__)) + ".libs"
            found = sorted(glob.glob(os.path.join(glob.escape(directory), "libscipy_openblas64_*.so")))
            if found and hasattr(os, "RTLD_NOLOAD"):
                lib = _Library(ctypes.CDLL(found[0], mode=os.RTLD_NOLOAD | os.RTLD_LAZY))
                for dt, (_, symbol) in _GEMM.items():
                    llvm.add_symbol(symbol, lib.gemm[dt])
                for dt, (_, symbol) in _GEMV.items():
                    llvm.add_symbol(symbol, lib.gemv[dt])
                _library = lib
        except (OSError, AttributeError):  # not loaded by NumPy, or without those symbols
            _library = None
    return _library


@intrinsic(prefer_literal=True)
def gemm_block(typingctx, symbol, ta, tb, m, n, k, a, lda, b, ldb, c, ldc):
    """``gemm_block("symjac_cblas_?gemm", ta, tb, m, n, k, a, lda, b, ldb, c, ldc)``:
    ``C = op(A) @ op(B)`` in row-major order, the matrices given by address."""
    if not isinstance(symbol, types.StringLiteral):
        return None
    name = symbol.literal_value
    real = ir.DoubleType() if name.endswith("dgemm") else ir.FloatType()
    i32, i64 = ir.IntType(32), ir.IntType(64)

    def codegen(context, builder, signature, args):
        ints = [context.cast(builder, v, t, types.int64) for v, t in zip(args[1:], signature.args[1:], strict=True)]
        ta_, tb_, m_, n_, k_, a_, lda_, b_, ldb_, c_, ldc_ = ints
        ptr = real.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, real, ptr, i64, ptr, i64, real, ptr, i64])
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        builder.call(fn, [ir.Constant(i32, _ROW_MAJOR), builder.trunc(ta_, i32), builder.trunc(tb_, i32), m_, n_, k_,
                          ir.Constant(real, 1.0), builder.inttoptr(a_, ptr), lda_, builder.inttoptr(b_, ptr), ldb_,
                          ir.Constant(real, 0.0), builder.inttoptr(c_, ptr), ldc_])
        return context.get_dummy_value()

    return types.void(symbol, *([types.int64] * 11)), codegen


@intrinsic(prefer_literal=True)
def gemv_block(typingctx, symbol, ta, m, n, a, lda, x, y):
    """``gemv_block("symjac_cblas_dgemv", ta, m, n, a, lda, x, y)``: ``y = op(A) @ x``, ``A``
    of ``m x n`` in row-major order, the arrays given by address (unit strides)."""
    if not isinstance(symbol, types.StringLiteral) or symbol.literal_value != "symjac_cblas_dgemv":
        return None
    real = ir.DoubleType()
    i32, i64 = ir.IntType(32), ir.IntType(64)

    def codegen(context, builder, signature, args):
        ta_, m_, n_, a_, lda_, x_, y_ = [context.cast(builder, v, t, types.int64)
                                         for v, t in zip(args[1:], signature.args[1:], strict=True)]
        ptr = real.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i64, i64, real, ptr, i64, ptr, i64, real, ptr, i64])
        fn = cgutils.get_or_insert_function(builder.module, fnty, symbol.literal_value)
        one = ir.Constant(i64, 1)
        builder.call(fn, [ir.Constant(i32, _ROW_MAJOR), builder.trunc(ta_, i32), m_, n_, ir.Constant(real, 1.0),
                          builder.inttoptr(a_, ptr), lda_, builder.inttoptr(x_, ptr), one, ir.Constant(real, 0.0),
                          builder.inttoptr(y_, ptr), one])
        return context.get_dummy_value()

    return types.void(symbol, *([types.int64] * 7)), codegen


def module_source() -> str:
    lines = [
        "# symjac threaded products (generated; do not edit): matrix products cut into blocks of rows",
        "# or of batch entries, one single-threaded BLAS call per Numba thread and block",
        "# (symjac.runtime.jit.blas).",
        f"# revision {_REVISION}",
        "from numba import njit, prange",
        "from symjac.runtime.jit.blas import gemm_block",
        "from symjac.runtime.jit.wrappers import thread_count",
        "",
    ]
    for dt, (_, symbol) in _GEMM.items():
        lines += [
            "",
            "@njit(nogil=True, parallel=True)",
            f"def rows_{dt.name}(ta, tb, m, n, k, a, lda, step_a, b, ldb, c, ldc, least):",
            "    parts = max(1, min(thread_count(), m // least))",
            "    for p in prange(parts):",
            "        lo = p * m // parts",
            "        hi = (p + 1) * m // parts",
            f'        gemm_block("{symbol}", ta, tb, hi - lo, n, k, a + lo * step_a, lda, b, ldb, '
            f"c + lo * ldc * {dt.itemsize}, ldc)",
            "",
            "",
            "@njit(nogil=True, parallel=True)",
            f"def batches_{dt.name}(ta, tb, nb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc):",
            "    parts = max(1, min(thread_count(), nb))",
            "    for p in prange(parts):",
            "        for i in range(p * nb // parts, (p + 1) * nb // parts):",
            f'            gemm_block("{symbol}", ta, tb, m, n, k, a + i * sa, lda, b + i * sb, ldb, c + i * sc, ldc)',
            "",
        ]
    return "\n".join(lines)


def _load(dtype: np.dtype) -> None:
    """Load (or compile) the module's functions for ``dtype`` and check them against NumPy's."""
    from . import wrappers

    ready = False
    try:
        if library() is not None:
            source = module_source()
            path = cache.write_module(source, f"blas_rows_{cache.source_digest(source)}")
            rows = cache.load_function(path, f"rows_{dtype.name}", lambda: source)
            wrappers.compile_kernel(rows, types.none(*([types.int64] * 13)))
            batches = cache.load_function(path, f"batches_{dtype.name}", lambda: source)
            wrappers.compile_kernel(batches, types.none(*([types.int64] * 15)))
            _functions[dtype] = (rows, batches)
            ready = _checked(dtype)
    except Exception:  # noqa: BLE001 -- NumPy's matmul serves
        pass
    if not ready:
        _functions.pop(dtype, None)
    _state[dtype] = "ready" if ready else "none"


def _checked(dtype: np.dtype) -> bool:
    """Whether the loaded functions give NumPy's products (both layouts of each operand)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 256, 24)).astype(dtype), rng.standard_normal((3, 24, 20)).astype(dtype)
    want = np.matmul(a, b)
    for x, y in ((a, b), (np.asfortranarray(a[0]).reshape(1, 256, 24), np.asfortranarray(b[0]).reshape(1, 24, 20)),
                 (a.transpose(0, 2, 1).copy().transpose(0, 2, 1), b)):
        out = np.empty((len(x), 256, 20), dtype)
        if not _batches(x, y, out) or not np.allclose(out, want[:len(x)], rtol=1e-4, atol=1e-4):
            return False
        out = np.empty((256, 20), dtype)
        if not _rows(x[0], y[0], out) or not np.allclose(out, want[0], rtol=1e-4, atol=1e-4):
            return False
    return True


def state(dtype) -> str:
    """"new", "started" (loading in the background), "ready" or "none" (NumPy's matmul serves)."""
    return _state.get(np.dtype(dtype), "new")


def start(dtype, wait: bool) -> None:
    """Load the threaded products for ``dtype``: now (``wait``), else on the background compile thread."""
    from . import jobs

    dtype = np.dtype(dtype)
    if dtype not in _GEMM:
        return
    with _state_lock:
        new = dtype not in _state
        if new:
            _state[dtype] = "started"
    if new and not wait:
        jobs.submit(lambda: _load(dtype))
    elif new:
        _load(dtype)
    elif wait and _state.get(dtype) == "started":
        jobs.wait_all()


def _layout(x: np.ndarray) -> tuple[int, int, int] | None:
    """``(trans, ld, step)`` of a matrix (the last two axes of ``x``) BLAS reads in place: step is
    the bytes from one row of the product's operand to the next."""
    s0, s1 = x.strides[-2:]
    item = x.itemsize
    if s1 == item and s0 % item == 0 and s0 >= max(1, x.shape[-1]) * item:
        return _NO_TRANS, s0 // item, s0
    if s0 == item and s1 % item == 0 and s1 >= max(1, x.shape[-2]) * item:
        return _TRANS, s1 // item, s0
    return None


class _OneThread:
    """BLAS's thread count at 1 inside (under the lock: the count is the process's), put back after."""

    __slots__ = ("lib", "before")

    def __init__(self, lib: _Library) -> None:
        self.lib = lib

    def __enter__(self):
        _lock.acquire()
        self.before = self.lib.get_threads()
        if self.before != 1:
            _lowered.append(self.before)
            self.lib.set_threads(1)

    def __exit__(self, *exc):
        if self.before != 1:
            self.lib.set_threads(self.before)
            _lowered.clear()
        _lock.release()


def one_thread(lib: _Library) -> _OneThread:
    """A context in which BLAS runs on one thread (``chains.py``: blocks shared among the cores)."""
    return _OneThread(lib)


def _operands(a, b, out, nd: int):
    """The functions and the BLAS layouts of ``out = a @ b`` (``nd``-d each), or None."""
    fns = _functions.get(out.dtype)
    lib = library()
    if fns is None or lib is None or not threads_usable() or a.dtype != out.dtype or b.dtype != out.dtype or not a.ndim == b.ndim == nd:
        return None
    la, lb = _layout(a), _layout(b)
    if la is None or lb is None or out.shape != np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (
            a.shape[-2], b.shape[-1]) or out.strides[-1] != out.itemsize:
        return None
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):  # (NumPy's copies first; BLAS would not)
        return None
    ldc = out.strides[-2] // out.itemsize
    if out.strides[-2] % out.itemsize or ldc < max(1, b.shape[-1]):
        return None
    return fns, lib, la, lb, ldc


def _rows(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """``out[...] = a @ b`` (matrices) in blocks of rows on Numba's threads; False where the
    operands do not allow it."""
    found = _operands(a, b, out, 2)
    if found is None:
        return False
    fns, lib, la, lb, ldc = found
    (m, k), n = a.shape, b.shape[1]
    with _OneThread(lib):
        fns[0](la[0], lb[0], m, n, k, a.ctypes.data, la[1], la[2], b.ctypes.data, lb[1], out.ctypes.data, ldc,
               MIN_ROWS)
    return True


def _batches(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """``out[...] = a @ b`` (stacks of matrices, or one of them broadcast) in blocks of batch
    entries on Numba's threads; False where the operands do not allow it."""
    found = _operands(a, b, out, 3)
    if found is None or out.strides[0] % out.itemsize:
        return False
    fns, lib, la, lb, ldc = found
    nb, m, k = out.shape[0], a.shape[1], a.shape[2]
    sa, sb = (x.strides[0] if x.shape[0] > 1 else 0 for x in (a, b))
    with _OneThread(lib):
        fns[1](la[0], lb[0], nb, m, b.shape[2], k, a.ctypes.data, la[1], sa, b.ctypes.data, lb[1], sb,
               out.ctypes.data, ldc, out.strides[0])
    return True


def _alone(a: np.ndarray, b: np.ndarray, out: np.ndarray | None):
    """NumPy's ``matmul`` with BLAS's thread count at 1: a small product, no thread woken."""
    lib = library()
    if lib is None:
        return np.matmul(a, b, out=out)
    with _OneThread(lib):
        return np.matmul(a, b, out=out)


def tall(m: int, n: int, k: int) -> bool:
    """Whether an ``m x k @ k x n`` product is cut into blocks of rows (see the constants)."""
    return n >= 1 and k >= 1 and m >= 2 * MIN_ROWS and m >= TALL * max(n, k)


def kind(shape_a: tuple, shape_b: tuple) -> str | None:
    """How :func:`matmul` runs ``a @ b`` of these shapes: ``"rows"`` (a tall product cut into
    blocks of rows), ``"batches"`` (a stack of products cut into blocks of entries),
    ``"alone"`` (a small product, on the calling thread), ``"quiet"`` (a product OpenBLAS runs
    on the calling thread itself: NumPy's), or None (NumPy's, on BLAS's threads)."""
    batch = math.prod(np.broadcast_shapes(tuple(shape_a[:-2]), tuple(shape_b[:-2])))
    work = batch * math.prod(shape_a[-2:]) * (shape_b[-1] if len(shape_b) > 1 else 1)
    if work <= QUIET:
        return "quiet"
    if work <= SMALL:
        return "alone"
    if len(shape_a) == len(shape_b) == 2 and tall(shape_a[0], shape_b[1], shape_a[1]):
        return "rows"
    if len(shape_a) == len(shape_b) == 3 and max(shape_a[0], shape_b[0]) >= 2 and min(shape_a + shape_b) >= 1:
        return "batches"
    return None


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None, how: str | None = None):
    """``np.matmul(a, b, out=out)``, on Numba's threads (or, for a small product, with BLAS on
    one thread) where the functions are loaded and the operands allow it; ``how``: their
    :func:`kind`, if known."""
    if a.dtype not in _functions:
        return np.matmul(a, b, out=out)
    how = how or kind(a.shape, b.shape)
    if how == "alone":  # (on the calling thread: whatever Numba's thread count)
        return _alone(a, b, out)
    if how in ("rows", "batches") and num_threads() > 1:
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        target = np.empty(shape, a.dtype) if out is None else out  # (NumPy's would wake BLAS's threads)
        if (_rows if how == "rows" else _batches)(a, b, target):
            return target
        out = target  # (refused: NumPy's, into the array just made)
    return np.matmul(a, b, out=out)


def matmul_as(how: str):
    """:func:`matmul` for operands whose :func:`kind` is ``how`` (a plan's product, of fixed shapes)."""
    if how == "quiet":
        return np.matmul
    return lambda a, b, out=None: matmul(a, b, out, how)
