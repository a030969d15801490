"""The tape: an SSA program encoded as arrays, for the interpreter loop
(``emit.vm_ir``) to run.  Encoding only; ``runtime/tape.py`` runs it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..ir import ops as _ops
from .ssa import Operation, Program

_OP = _ops.OPCODE


@dataclass
class TapeCode:
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

    def to_program(self, in_sizes: list[int], out_sizes: list[int]) -> Program:
        """The SSA program this tape encodes (the inverse of ``encode``)."""
        in_off = np.concatenate([[0], np.cumsum(in_sizes)]).astype(np.int64)
        out_off = np.concatenate([[0], np.cumsum(out_sizes)]).astype(np.int64)

        def split(offsets: np.ndarray, flat: int) -> tuple[int, int]:
            where = int(np.searchsorted(offsets, flat, side="right") - 1)
            return where, int(flat - offsets[where])

        ops: list[Operation] = []
        for op, a, b, c in self.code.tolist():
            name = _ops.RECORDS[op].name
            if name == "load":
                ops.append((name, (), split(in_off, a)))
            elif name == "const":
                ops.append((name, (), float(self.consts[a])))
            else:
                arity = _ops.BY_NAME[name].arity
                ops.append((name, (a, b, c)[:arity], None))
        stores = [(*split(out_off, i), int(v)) for i, v in zip(self.store_idx.tolist(), self.store_val.tolist(), strict=True)]
        consts = [(*split(out_off, i), float(v)) for i, v in zip(self.const_idx.tolist(), self.const_val.tolist(), strict=True)]
        return Program(ops, stores, consts)

    def for_batch(self, in_sizes: list[int], batched: list[bool]) -> TapeCode:
        """This tape with loads re-pointed for a batch: batched inputs are read
        from the row (in order), the others from the shared buffer."""
        offsets = np.concatenate([[0], np.cumsum(in_sizes)]).astype(np.int64)
        new_off, counts = [], [0, 0]
        for size, is_batched in zip(in_sizes, batched, strict=True):
            new_off.append((is_batched, counts[0] if is_batched else counts[1]))
            counts[0 if is_batched else 1] += size
        code = self.code.copy()
        for k in np.nonzero(code[:, 0] == _OP["load"])[0]:
            leaf = int(np.searchsorted(offsets, code[k, 1], side="right") - 1)
            is_batched, start = new_off[leaf]
            code[k, 1] = start + code[k, 1] - offsets[leaf]
            if not is_batched:
                code[k, 0] = _OP["load_shared"]
        return dataclasses.replace(self, code=code)


def encode(program: Program, in_sizes: list[int], out_sizes: list[int], dtype: npt.DTypeLike) -> TapeCode:
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
    return TapeCode(
        code=code,
        consts=np.array(consts or [0.0], dtype=dtype),
        store_idx=np.array([out_off[o] + f for o, f, _ in stores], dtype=np.int64),
        store_val=np.array([v for _, _, v in stores], dtype=np.int64),
        const_idx=np.array([out_off[o] + f for o, f, _ in program.const_stores], dtype=np.int64),
        const_val=np.array([v for _, _, v in program.const_stores], dtype=dtype),
    )
