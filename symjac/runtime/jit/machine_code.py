"""LLVM IR text -> object code, with llvmlite alone.

This module imports nothing from symjac, so a child process can run it
without importing the package (1-2 s of SymPy and Numba): the background
optimisation of large kernel bodies runs here, in a child (:func:`main`,
started by ``jobs.compile_ir_in_subprocess``).  The reason is llvmlite's
one process-wide lock around every LLVM call: an ``-O3`` code generation of a
20,000-operation body holds it for seconds (a minute on a loaded machine), and
every compile or load in the process -- a small kernel's, a Numba wrapper's,
the tape interpreter's -- waited for it.  In the child it holds the child's lock.

The same function compiles in both processes: the object code is the same,
byte for byte, and so are the results (no fast-math, no contraction, at any
level).
"""

from __future__ import annotations

import hashlib
import os
import sys

import llvmlite.binding as llvm

#: bodies of at most this many IR lines get LLVM's SLP vectoriser (Lorenz batches 0.77x -> 0.95x a
#: hand-written Numba loop); larger ones do not: on a 1,861-line Hessian body (the second derivatives of a
#: softmax over an outer product) it fails an assertion of llvmlite's LLVM (SLPVectorizer.cpp,
#: incrementUnscheduledDeps) and aborts the process, and on big bodies it mostly costs compile time
SLP_MAX_LINES = 600
#: the optimiser child's niceness: where cores are short, the work callers wait for (a small
#: kernel's compile before its first call returns) goes first.  A small vmap's kernel ready
#: while a 19,004-operation body optimised, against alone (2 cores, shared; medians of 3 fresh
#: processes): 2.2x at 0, 1.2x at 5, 0.9x at 10; the optimisation itself took about as long
NICE = 5
#: bytes of the digest before the object code a child writes (a garbled stream is refused)
DIGEST = 16
_initialized = False


def target_machine(opt: int = 3):
    """The host's target machine; ``opt`` is the code generator's level (0: fast
    instruction selection and register allocation)."""
    global _initialized
    if not _initialized:  # (no lock of ours, which a fork could leave held: LLVM's initialisation may run twice)
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _initialized = True
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=opt, codemodel="jitdefault", jit=True)


def compile_ir(source: str, quick: bool = False) -> bytes:
    """Machine code (an object file) for the LLVM IR ``source``: fully
    optimised, or (``quick``) compiled in about a fifth of the time."""
    tm = target_machine(0 if quick else 3)
    module = llvm.parse_assembly(source, context=llvm.create_context())  # a private context: thread-safe
    module.triple, module.data_layout = tm.triple, str(tm.target_data)
    module.verify()
    options = llvm.create_pipeline_tuning_options(speed_level=1 if quick else 3)
    # no loop vectorizer: loops here walk rerolled entries with strided stores, which it
    # turns into scatters (slow on x86: 8x slower Lorenz batches on Zen 4).  SLP: small bodies only
    options.loop_vectorization = False
    options.slp_vectorization = not quick and source.count("\n") <= SLP_MAX_LINES
    builder = llvm.create_pass_builder(tm, options)
    builder.getModulePassManager().run(module, builder)
    return tm.emit_object(module)


def seal(code: bytes) -> bytes:
    """The digest a child writes before the object code."""
    return hashlib.blake2b(code, digest_size=DIGEST).digest()


_PR_SET_PDEATHSIG = 1  # prctl option: the signal a child receives when its parent dies


def die_with_parent(parent: int | None = None) -> None:
    """In a child (Linux): receive SIGTERM when the parent dies, so a compile
    never outlives the program that asked for it.  With ``parent`` (its pid), a
    child whose parent died before this call exits at once."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        raise SystemExit(1)


def main(argv: list[str]) -> int:
    """The optimiser child: LLVM IR on stdin -> its digest and fully optimised
    object code on stdout.  ``argv``: the parent's pid."""
    if sys.platform.startswith("linux"):
        die_with_parent(int(argv[0]))
    if hasattr(os, "nice"):
        os.nice(NICE)
    source = sys.stdin.buffer.read().decode()
    code = compile_ir(source)
    sys.stdout.buffer.write(seal(code) + code)
    sys.stdout.buffer.flush()
    return 0
