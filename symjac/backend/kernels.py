"""Kernel modules: the text of the files that hold compiled kernels.

A kernel module holds its program as data (``SYMJAC_NATIVE``: the body's
symbol and the program text) and one-line ``@njit`` wrappers that call the
body (``runtime/jit/native.py``), so the file alone compiles the kernel in any process
(the compile child too); the body's object code and Numba's disk cache of the
wrappers (sealed, beside the file: ``numba_cache.py``, installed when the
module is loaded) serve later processes.  The text holds only names symjac
generates (checked against a strict pattern here, where it is written) and
numbers: never a user's string.

Numba keys its disk cache on the source file, not on the intrinsics the file
calls, so every module carries ``bodies.code_stamp()``: a digest of the records,
the emitter and the versions involved.  A change to any of them gives new
module text, hence new file names and fresh compiles instead of stale
machine code.  The tape interpreter's module (:func:`vm_source`) is generated
the same way, into the kernel cache directory.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Sequence

from . import bodies
from .ssa import KernelSpec, Program, to_text
from .vector import block_width

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,150}")
_LITERAL = re.compile(r"[A-Za-z0-9_ .,;|+\-]*")  # opcode names, numbers, separators


def identifier(name: str) -> str:
    """``name`` if it is a plain ASCII identifier symjac may write into a
    module; ValueError otherwise (names are sanitised before they get here)."""
    if not _IDENTIFIER.fullmatch(name) or keyword.iskeyword(name):
        raise ValueError(f"refusing to write {name!r} into a kernel module: not a plain identifier")
    return name


def kernel_name(name: str) -> str:
    """A kernel name from any string: non-ASCII-alphanumerics become ``_``."""
    clean = re.sub(r"[^A-Za-z0-9_]", "_", name)[:120] or "kernel"
    return f"k_{clean}" if clean[0].isdigit() or keyword.iskeyword(clean) else clean


def _program_literal(program: Program, spec: KernelSpec, batched: Sequence[bool] | None = None) -> str:
    text = to_text(program, spec, batched)
    if not _LITERAL.fullmatch(text):  # repr() of floats and opcode names only: never reached
        raise ValueError("program text with unexpected characters")
    return text


def _header() -> list[str]:
    return [
        "# symjac kernel module (generated; do not edit). SYMJAC_NATIVE names the kernel body's symbol and",
        "# holds its program (opcode names and numbers), which symjac compiles to machine code through",
        "# LLVM IR (symjac.runtime.jit.native) before Numba compiles or loads the wrappers that call it",
        "# (through symjac.runtime.jit.wrappers).",
        "# symjac gives the wrappers a disk cache in __pycache__ beside this file (symjac.runtime.jit.numba_cache).",
        f"# symjac-ir {bodies.code_stamp()}",
    ]


def module_source(program: Program, spec: KernelSpec, batched: Sequence[bool] | None = None) -> str:
    """The module for ``program``: ``<name>(inputs..., outputs...)``, or with
    ``batched`` (a flag per input) ``<name>_batch`` (samples in parallel) and
    ``<name>_batch_serial``."""
    name = identifier(spec.name)
    ins = [f"a{i}" for i in range(len(spec.inputs))]
    outs = [f"out{k}" for k in range(len(spec.outputs))]
    args = ", ".join(ins + outs)
    packed = f"({''.join(n + ', ' for n in ins)}), ({''.join(n + ', ' for n in outs)})"
    text = _program_literal(program, spec, batched)
    kind = "kernel" if batched is None else "batch"
    symbol = identifier(bodies.symbol_for(text, kind))
    lines = [*_header()]
    if batched is None:
        lines += [
            "from numba import njit",
            "from symjac.runtime.jit.wrappers import native_call",
            "",
            f'SYMJAC_NATIVE = ("{symbol}", "{kind}", "{text}")',
            "",
            "",
            "@njit(nogil=True)",
            f"def {name}({args}):",
            f'    native_call({packed}, "{symbol}")',
        ]
        return "\n".join(lines) + "\n"
    block = block_width(spec.dtype)
    lines += [
        "from numba import njit, prange",
        "from symjac.runtime.jit.wrappers import native_range, thread_count",
        "",
        f'SYMJAC_NATIVE = ("{symbol}", "{kind}", "{text}")',
        "",
        "",
        "@njit(nogil=True, parallel=True)",
        f"def {name}_batch({args}):",
        "    n = out0.shape[0]",
        "    parts = min(n, thread_count())  # one range of samples per thread",
        "    if parts <= 1:",
        f'        native_range({packed}, 0, n, "{symbol}")',
        "        return",
        "    for c in prange(parts):",
        f"        lo = c * n // parts // {block} * {block}  # whole blocks of samples, but for the last part",
        f"        hi = n if c == parts - 1 else (c + 1) * n // parts // {block} * {block}",
        f'        native_range({packed}, lo, hi, "{symbol}")',
        "",
        "",
        "@njit(nogil=True)",
        f"def {name}_batch_serial({args}):",
        f'    native_range({packed}, 0, out0.shape[0], "{symbol}")',
    ]
    return "\n".join(lines) + "\n"


def vm_source() -> str:
    """The tape interpreter's module (see ``tape.py``).  One dispatcher per
    entry point and nothing shared between them, so a damaged Numba cache is
    emptied and rebuilt function by function.  Not ``nogil``: see ``tape.py``."""
    store = [
        "for s in range(store_idx.shape[0]):",
        "    {out}store_idx[s]] = work[store_val[s]]",
        "for s in range(const_idx.shape[0]):",
        "    {out}const_idx[s]] = const_val[s]",
    ]
    params = "code, consts, {inputs}, store_idx, store_val, const_idx, const_val, {rest}"
    entries = ", ".join(f'("{identifier(bodies.vm_symbol(d))}", "vm", "{d}")' for d in ("float64", "float32"))
    return "\n".join([
        "# symjac tape interpreter (generated; do not edit): the dispatch loop is emitted from the",
        "# operation records (symjac.backend.emit.vm_ir) and compiled by symjac.runtime.jit.native.",
        f"# symjac-ir {bodies.code_stamp()}",
        "import numpy as np",
        "from numba import njit, prange",
        "from symjac.runtime.jit.wrappers import vm_step",
        "",
        f"SYMJAC_NATIVE = [{entries}]",
        "",
        "",
        "@njit",
        f"def run({params.format(inputs='inputs', rest='work, out')}):",
        "    vm_step(code, consts, inputs, inputs, work)",
        *("    " + line.format(out="out[") for line in store),
        "",
        "",
        "@njit(parallel=True)",
        f"def run_batch({params.format(inputs='batched, shared', rest='out')}):",
        "    n = max(code.shape[0], 1)",
        "    for i in prange(batched.shape[0]):",
        "        work = np.empty(n, dtype=consts.dtype)",
        "        vm_step(code, consts, batched[i], shared, work)",
        *("        " + line.format(out="out[i, ") for line in store),
        "",
        "",
        "@njit",
        f"def run_batch_serial({params.format(inputs='batched, shared', rest='out')}):",
        "    work = np.empty(max(code.shape[0], 1), dtype=consts.dtype)",
        "    for i in range(batched.shape[0]):",
        "        vm_step(code, consts, batched[i], shared, work)",
        *("        " + line.format(out="out[i, ") for line in store),
        "",
    ])
