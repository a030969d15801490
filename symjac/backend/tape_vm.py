"""The tape interpreter: one Numba loop that runs any SSA program.

Compiled once per installation (``cache=True``; this is a real file) and then
loaded in milliseconds, it evaluates a new function's derivatives the moment
they are built, while the specialised kernel compiles in the background.

Each opcode computes exactly what the generated kernel line computes (the
same NumPy scalar functions, the same operand order), so the interpreter and
the kernel agree to the last bit; ``tests/test_tiers.py`` checks it.  Boolean
values are stored as 1.0 / 0.0 and tested with ``!= 0`` (NaN counts as true,
as Python's truthiness does in the kernels).

The opcode numbers are positions of the records in ``ir/ops.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..ir.ops import OPCODE

# opcode numbers: positions of the records in ir/ops.py
LOAD = OPCODE['load']
CONST = OPCODE['const']
ADD = OPCODE['add']
SUB = OPCODE['sub']
MUL = OPCODE['mul']
DIV = OPCODE['div']
NEG = OPCODE['neg']
POW = OPCODE['pow']
SQRT = OPCODE['sqrt']
ABS = OPCODE['abs']
ARCCOS = OPCODE['arccos']
ARCCOSH = OPCODE['arccosh']
ARCSIN = OPCODE['arcsin']
ARCSINH = OPCODE['arcsinh']
ARCTAN = OPCODE['arctan']
ARCTAN2 = OPCODE['arctan2']
ARCTANH = OPCODE['arctanh']
CEIL = OPCODE['ceil']
COS = OPCODE['cos']
COSH = OPCODE['cosh']
EXP = OPCODE['exp']
EXPM1 = OPCODE['expm1']
FLOOR = OPCODE['floor']
LOG = OPCODE['log']
LOG1P = OPCODE['log1p']
MAXIMUM = OPCODE['maximum']
MINIMUM = OPCODE['minimum']
SIGN = OPCODE['sign']
SIN = OPCODE['sin']
SINH = OPCODE['sinh']
TAN = OPCODE['tan']
TANH = OPCODE['tanh']
LT = OPCODE['lt']
LE = OPCODE['le']
GT = OPCODE['gt']
GE = OPCODE['ge']
EQ = OPCODE['eq']
NE = OPCODE['ne']
AND = OPCODE['and']
OR = OPCODE['or']
XOR = OPCODE['xor']
NOT = OPCODE['not']
SELECT = OPCODE['select']
LOAD_SHARED = OPCODE['load_shared']
SAFEMUL = OPCODE['safemul']
LOGADDEXP = OPCODE['logaddexp']
LOGADDEXP2 = OPCODE['logaddexp2']
NAMES = tuple(OPCODE)


@njit(cache=True, nogil=True, error_model="numpy")
def _step(code, consts, inputs, shared, work):
    one = consts.dtype.type(1.0)
    zero = consts.dtype.type(0.0)
    for k in range(code.shape[0]):
        op = code[k, 0]
        a = code[k, 1]
        b = code[k, 2]
        if op == MUL:
            work[k] = work[a] * work[b]
        elif op == ADD:
            work[k] = work[a] + work[b]
        elif op == SUB:
            work[k] = work[a] - work[b]
        elif op == LOAD:
            work[k] = inputs[a]
        elif op == CONST:
            work[k] = consts[a]
        elif op == DIV:
            work[k] = work[a] / work[b]
        elif op == NEG:
            work[k] = -work[a]
        elif op == SELECT:
            work[k] = work[b] if work[a] != 0 else work[code[k, 3]]
        elif op == POW:
            work[k] = work[a] ** work[b]
        elif op == SQRT:
            work[k] = np.sqrt(work[a])
        elif op == SIN:
            work[k] = np.sin(work[a])
        elif op == COS:
            work[k] = np.cos(work[a])
        elif op == EXP:
            work[k] = np.exp(work[a])
        elif op == LOG:
            work[k] = np.log(work[a])
        elif op == TANH:
            work[k] = np.tanh(work[a])
        elif op == LT:
            work[k] = one if work[a] < work[b] else zero
        elif op == LE:
            work[k] = one if work[a] <= work[b] else zero
        elif op == GT:
            work[k] = one if work[a] > work[b] else zero
        elif op == GE:
            work[k] = one if work[a] >= work[b] else zero
        elif op == EQ:
            work[k] = one if work[a] == work[b] else zero
        elif op == NE:
            work[k] = one if work[a] != work[b] else zero
        elif op == AND:
            work[k] = one if (work[a] != 0 and work[b] != 0) else zero
        elif op == OR:
            work[k] = one if (work[a] != 0 or work[b] != 0) else zero
        elif op == XOR:
            work[k] = one if ((work[a] != 0) != (work[b] != 0)) else zero
        elif op == NOT:
            work[k] = zero if work[a] != 0 else one
        elif op == ABS:
            work[k] = np.abs(work[a])
        elif op == MAXIMUM:
            work[k] = np.maximum(work[a], work[b])
        elif op == MINIMUM:
            work[k] = np.minimum(work[a], work[b])
        elif op == TAN:
            work[k] = np.tan(work[a])
        elif op == SINH:
            work[k] = np.sinh(work[a])
        elif op == COSH:
            work[k] = np.cosh(work[a])
        elif op == ARCSIN:
            work[k] = np.arcsin(work[a])
        elif op == ARCCOS:
            work[k] = np.arccos(work[a])
        elif op == ARCTAN:
            work[k] = np.arctan(work[a])
        elif op == ARCTAN2:
            work[k] = np.arctan2(work[a], work[b])
        elif op == ARCSINH:
            work[k] = np.arcsinh(work[a])
        elif op == ARCCOSH:
            work[k] = np.arccosh(work[a])
        elif op == ARCTANH:
            work[k] = np.arctanh(work[a])
        elif op == EXPM1:
            work[k] = np.expm1(work[a])
        elif op == LOG1P:
            work[k] = np.log1p(work[a])
        elif op == SIGN:
            work[k] = np.sign(work[a])
        elif op == FLOOR:
            work[k] = np.floor(work[a])
        elif op == CEIL:
            work[k] = np.ceil(work[a])
        elif op == LOAD_SHARED:
            work[k] = shared[a]
        elif op == SAFEMUL:
            work[k] = work[a] - work[a] if work[a] == 0 else work[a] * work[b]
        elif op == LOGADDEXP:
            work[k] = np.logaddexp(work[a], work[b])
        elif op == LOGADDEXP2:
            work[k] = np.logaddexp2(work[a], work[b])


@njit(cache=True, nogil=True)
def _store(work, store_idx, store_val, const_idx, const_val, out):
    for s in range(store_idx.shape[0]):
        out[store_idx[s]] = work[store_val[s]]
    for s in range(const_idx.shape[0]):
        out[const_idx[s]] = const_val[s]


@njit(cache=True, nogil=True)
def run(code, consts, inputs, store_idx, store_val, const_idx, const_val, work, out):
    """Evaluate the program on flat ``inputs`` into the flat, zeroed ``out``."""
    _step(code, consts, inputs, inputs, work)
    _store(work, store_idx, store_val, const_idx, const_val, out)


@njit(cache=True, nogil=True, parallel=True)
def run_batch(code, consts, batched, shared, store_idx, store_val, const_idx, const_val, out):
    """``run`` for every row of ``batched`` (B, n_b) into ``out`` (B, n_out), rows
    in parallel; ``load_shared`` operations read the unbatched inputs ``shared``."""
    n = code.shape[0]
    for i in prange(batched.shape[0]):
        work = np.empty(n, dtype=consts.dtype)
        _step(code, consts, batched[i], shared, work)
        _store(work, store_idx, store_val, const_idx, const_val, out[i])


@njit(cache=True, nogil=True)
def run_batch_serial(code, consts, batched, shared, store_idx, store_val, const_idx, const_val, out):
    """``run_batch`` on one thread (a parallel region costs more than small batches take)."""
    work = np.empty(code.shape[0], dtype=consts.dtype)
    for i in range(batched.shape[0]):
        _step(code, consts, batched[i], shared, work)
        _store(work, store_idx, store_val, const_idx, const_val, out[i])
