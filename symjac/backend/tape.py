"""Encoding an SSA program as arrays for the tape interpreter (``_tape_vm``)."""

from __future__ import annotations

import atexit
import os
import pickle
import threading
from dataclasses import dataclass

import numpy as np

from ..ir import ops as _ops
from . import codegen as _codegen
from . import compiler as _compile
from . import tape_vm as _tape_vm
from .codegen import Program

assert _codegen.OPCODES == _tape_vm.NAMES, "opcode tables out of sync"
_OP = {name: i for i, name in enumerate(_codegen.OPCODES)}


@dataclass
class Tape:
    """A program as arrays: ``code[k] = (opcode, a, b, c)`` over value slots."""

    code: np.ndarray
    consts: np.ndarray
    store_idx: np.ndarray
    store_val: np.ndarray
    const_idx: np.ndarray
    const_val: np.ndarray

    @property
    def n_ops(self) -> int:
        return self.code.shape[0]

    def run(self, inputs: np.ndarray, out: np.ndarray) -> None:
        """Evaluate on the flat input buffer into the flat, zeroed output buffer."""
        work = np.empty(max(self.n_ops, 1), dtype=self.consts.dtype)
        _tape_vm.run(self.code, self.consts, inputs, self.store_idx, self.store_val,
                     self.const_idx, self.const_val, work, out)

    def to_program(self, in_sizes: list[int], out_sizes: list[int]) -> _codegen.Program:
        """The SSA program this tape encodes (the inverse of ``encode``)."""
        in_off = np.concatenate([[0], np.cumsum(in_sizes)]).astype(np.int64)
        out_off = np.concatenate([[0], np.cumsum(out_sizes)]).astype(np.int64)

        def split(offsets, flat):
            where = int(np.searchsorted(offsets, flat, side="right") - 1)
            return where, int(flat - offsets[where])

        ops = []
        for op, a, b, c in self.code.tolist():
            name = _codegen.OPCODES[op]
            if name == "load":
                ops.append((name, (), split(in_off, a)))
            elif name == "const":
                ops.append((name, (), float(self.consts[a])))
            else:
                arity = _ops.BY_NAME[name].arity
                ops.append((name, (a, b, c)[:arity], None))
        stores = [(*split(out_off, i), int(v)) for i, v in zip(self.store_idx.tolist(), self.store_val.tolist())]
        consts = [(*split(out_off, i), float(v)) for i, v in zip(self.const_idx.tolist(), self.const_val.tolist())]
        return _codegen.Program(ops, stores, consts)

    def for_batch(self, in_sizes: list[int], batched: list[bool]) -> "Tape":
        """This tape with loads re-pointed for a batch: batched inputs are read
        from the row (in order), the others from the shared buffer."""
        offsets = np.concatenate([[0], np.cumsum(in_sizes)]).astype(np.int64)
        new_off, counts = [], [0, 0]
        for size, is_batched in zip(in_sizes, batched):
            new_off.append((is_batched, counts[0] if is_batched else counts[1]))
            counts[0 if is_batched else 1] += size
        code = self.code.copy()
        for k in np.nonzero(code[:, 0] == _OP["load"])[0]:
            leaf = int(np.searchsorted(offsets, code[k, 1], side="right") - 1)
            is_batched, start = new_off[leaf]
            code[k, 1] = start + code[k, 1] - offsets[leaf]
            if not is_batched:
                code[k, 0] = _OP["load_shared"]
        return Tape(code, self.consts, self.store_idx, self.store_val, self.const_idx, self.const_val)

    def run_batch(self, batched: np.ndarray, shared: np.ndarray, out: np.ndarray, parallel: bool) -> None:
        """Evaluate every row of ``batched`` (B, n_b) into ``out`` (B, n_out)."""
        run = _tape_vm.run_batch if parallel else _tape_vm.run_batch_serial
        run(self.code, self.consts, batched, shared, self.store_idx, self.store_val,
            self.const_idx, self.const_val, out)


_ready: set = set()
_ready_lock = threading.Lock()
_preload: threading.Thread | None = None


def ensure_ready(dtype) -> None:
    """Load the interpreter's machine code for ``dtype`` now.

    Loading needs Numba's compiler lock, which a background kernel compile
    holds for seconds; doing it first keeps the first call from waiting.
    """
    dtype = np.dtype(dtype)
    if dtype in _ready:
        return
    with _ready_lock:
        if dtype in _ready:
            return
        empty = np.zeros(0, dtype=np.int64)
        args = (np.zeros((0, 4), dtype=np.int64), np.zeros(1, dtype=dtype), np.zeros(1, dtype=dtype),
                empty, empty, empty, np.zeros(0, dtype=dtype), np.zeros(1, dtype=dtype), np.zeros(1, dtype=dtype))
        try:
            _tape_vm.run(*args)
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, OSError):
            # a corrupted or foreign Numba cache of the interpreter: forget it, compile again
            for fn in (_tape_vm._step, _tape_vm._store, _tape_vm.run, _tape_vm.run_batch, _tape_vm.run_batch_serial):
                _compile.recover(fn)
            _tape_vm.run(*args)
        _ready.add(dtype)


def start_preload() -> None:
    """Warm Numba up in a background thread (``import symjac`` calls this).

    The first Numba function a process loads costs ~0.3 s, almost all of it
    Numba importing SciPy's BLAS bindings while it initialises; overlapping
    that with the user's own start-up makes the first derivative arrive
    sooner.  ``SYMJAC_NO_PRELOAD=1`` turns it off.
    """
    global _preload
    if _preload is not None or os.environ.get("SYMJAC_NO_PRELOAD"):
        return

    def work():
        try:
            ensure_ready(np.float64)
        except Exception:  # the first real call will report any problem
            pass

    _preload = threading.Thread(target=work, name="symjac-preload", daemon=True)
    _preload.start()
    atexit.register(_preload.join, 5.0)  # never tear the interpreter down mid-import


def encode(program: Program, in_sizes: list[int], out_sizes: list[int], dtype) -> Tape:
    in_off = np.concatenate([[0], np.cumsum(in_sizes)]).astype(np.int64)
    out_off = np.concatenate([[0], np.cumsum(out_sizes)]).astype(np.int64)
    code = np.zeros((len(program.ops), 4), dtype=np.int64)
    consts: list[float] = []
    for k, (op, args, payload) in enumerate(program.ops):
        code[k, 0] = _OP[op]
        if op == "load":
            code[k, 1] = in_off[payload[0]] + payload[1]
        elif op == "const":
            code[k, 1] = len(consts)
            consts.append(payload)
        else:
            code[k, 1 : 1 + len(args)] = args
    dtype = np.dtype(dtype)
    stores = program.stores
    return Tape(
        code=code,
        consts=np.array(consts or [0.0], dtype=dtype),
        store_idx=np.array([out_off[o] + f for o, f, _ in stores], dtype=np.int64),
        store_val=np.array([v for _, _, v in stores], dtype=np.int64),
        const_idx=np.array([out_off[o] + f for o, f, _ in program.const_stores], dtype=np.int64),
        const_val=np.array([v for _, _, v in program.const_stores], dtype=dtype),
    )
