"""Re-exports of the code generation stages, for the runtime's existing imports.

The stages live in ``program.py`` (DAG -> SSA program), ``printer.py`` (the
Python-style rendering ``.source()`` shows), ``emit.py`` (the LLVM IR the kernels
and the tape run), ``native.py`` (compiling it) and ``kernels.py`` (kernel module
files).
This module goes once the runtime imports those directly.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Sequence

from ..ir import ops as _ops
from .compiler import source_digest
from .kernels import kernel_name, module_source
from .printer import render
from .program import KernelSpec, Program, lower

#: Every SSA opcode, in the records' order (the tape interpreter's numbering).
OPCODES = tuple(op.name for op in _ops.RECORDS)

__all__ = ["OPCODES", "KernelSpec", "Program", "ir_text", "kernel_name", "kernel_source", "lower", "render", "safe_names",
           "source_digest"]


def kernel_source(program: Program, spec: KernelSpec, roll: bool = True, batched=None) -> str:
    """The kernel module's text (what is written to disk and compiled)."""
    return module_source(program, spec, batched)


def ir_text(program: Program, spec: KernelSpec, batched=None) -> str:
    """The LLVM IR of the kernel's body, as emitted (before LLVM optimises it)."""
    from .native import ir_text as text
    from .program import to_text

    return text(to_text(program, spec, batched), "kernel" if batched is None else "batch")


def safe_names(names: Sequence[str]) -> list[str]:
    """Parameter names usable as identifiers: ASCII word characters, not a
    keyword, unique.  (Names the printer invents avoid whatever these are.)"""
    out: list[str] = []
    for name in names:
        name = re.sub(r"[^A-Za-z0-9_]", "_", name) or "arg"
        if name[0].isdigit() or keyword.iskeyword(name):
            name = f"arg_{name}"
        while name in out:
            name += "_"
        out.append(name)
    return out

