"""Kernel bodies: a program's text -> its symbol and its LLVM IR.

A kernel module names its body by ``(symbol, kind, text)`` (``SYMJAC_NATIVE``,
see ``kernels.py``): the program's text, the kind of body it becomes
(``"kernel"``: one evaluation; ``"batch"``: a range of samples; ``"vm"``: the
tape interpreter for a dtype) and a symbol bound to both.  :class:`KernelBody` turns
that into IR, which is all the toolchain (``runtime/jit``) receives: it never
looks at the kind, so a new kind of body is a branch here and nowhere else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .. import _fingerprint
from .emit import body_ir, vm_ir
from .ssa import KernelSpec, Program, from_text, to_text
from .vector import batch_body_ir, vectorize


def code_stamp() -> str:
    """A digest of everything that decides the machine code of a module with
    a given text (see :mod:`symjac._fingerprint`: the whole package and the
    versions it generates code with)."""
    return _fingerprint.fingerprint()[:16]


def symbol_for(text: str, kind: str) -> str:
    """The body's symbol: a digest of the program text, its kind and the fingerprint."""
    return f"symjac_{kind}_" + hashlib.blake2b(f"{code_stamp()}|{kind}|{text}".encode(), digest_size=10).hexdigest()


def vm_symbol(dtype: npt.DTypeLike) -> str:
    """The tape interpreter's symbol for compute dtype ``dtype``."""
    return symbol_for(np.dtype(dtype).name, "vm")


@dataclass(frozen=True)
class KernelBody:
    """One kernel body: ``symbol`` names the machine code of ``text`` as a ``kind`` body.

    A body read from a kernel module is checked (:meth:`check`) where its
    machine code is compiled or loaded, not at every reading: the digest of a
    large program's text is worth computing once."""

    symbol: str
    kind: str
    text: str

    def check(self) -> None:
        """ValueError unless ``symbol`` is the digest of this text and kind."""
        if self.symbol != symbol_for(self.text, self.kind):
            raise ValueError(f"{self.symbol} does not name this program")

    @classmethod
    def of(cls, text: str, kind: str) -> KernelBody:
        return cls(symbol_for(text, kind), kind, text)

    def ir(self) -> str:
        """The body's IR, as the optimised code is compiled from.  (Not cached on
        the body: Python 3.11's ``cached_property`` takes one lock for every
        instance, and a compile thread holding it at a fork hung the child.)"""
        if self.kind == "vm":  # the tape interpreter for a compute dtype (text: "float64" or "float32")
            return vm_ir(self.symbol, "float" if self.text == "float32" else "double")
        program, arguments = from_text(self.text)
        if arguments.batched is not None and vectorize(program, arguments):
            return batch_body_ir(self.symbol, program, arguments)
        return body_ir(self.symbol, program, arguments)

    @property
    def may_be_quick(self) -> bool:
        """Whether a large body may serve first from quickly compiled code (the
        interpreter is compiled once per cache directory: always optimised)."""
        return self.kind != "vm"

    def quick_ir(self, full: str) -> str:
        """The IR the quick code is compiled from, given the body's :meth:`ir`
        ``full``: a vector batch body's sample loop (half the lines of the
        vector body, and the same bits but a NaN's sign), otherwise ``full``."""
        if self.kind == "batch":
            program, arguments = from_text(self.text)
            if vectorize(program, arguments):
                return body_ir(self.symbol, program, arguments)
        return full


def ir_text(program: Program, spec: KernelSpec, batched: Sequence[bool] | None = None) -> str:
    """The LLVM IR of a kernel's body, as emitted (before LLVM optimises it)."""
    return KernelBody.of(to_text(program, spec, batched), "kernel" if batched is None else "batch").ir()
