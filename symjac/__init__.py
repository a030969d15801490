"""symjac: exact derivatives of NumPy functions, shown as SymPy and run as Numba kernels.

>>> import numpy as np, symjac as sj
>>> f = lambda x: np.sin(x[0]) * x[1]
>>> sj.jacobian(f).symbolic(np.zeros(2))
[x_1*cos(x_0), sin(x_0)]
"""

import os as _os

# Numba's OpenMP threads spin while waiting for work by default; on a busy
# machine that made two-thread batch kernels ~25x slower than one thread.
# Passive waiting costs little for symjac's one-region-per-batch kernels.
# Set before OpenMP starts (it reads this once); an explicit setting wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ._api import Transform as Transform  # noqa: E402
from ._api import divergence as divergence
from ._api import grad as grad
from ._api import hessian as hessian
from ._api import hvp as hvp
from ._api import jacobian as jacobian
from ._api import jit as jit
from ._api import jvp as jvp
from ._api import laplacian as laplacian
from ._api import vjp as vjp
from ._caches import cache_info as cache_info
from ._caches import clear_caches as clear_caches
from ._caches import wait_for_kernels as wait_for_kernels
from ._config import compile_mode as compile_mode
from ._config import compiling as compiling
from ._config import set_compile_mode as set_compile_mode
from ._config import set_limits as set_limits
from ._dispatch import CacheInfo as CacheInfo
from ._dispatch import KernelInfo as KernelInfo
from ._display import Shown as Shown
from ._display import show as show
from ._errors import (
    ArgumentError as ArgumentError,
    ArityError as ArityError,
    CompileError as CompileError,
    InputTypeError as InputTypeError,
    NonScalarOutputError as NonScalarOutputError,
    ResourceLimitError as ResourceLimitError,
    ShapeError as ShapeError,
    SymjacError as SymjacError,
    TracerControlFlowError as TracerControlFlowError,
    TracerConversionError as TracerConversionError,
    UnsupportedOperationError as UnsupportedOperationError,
)
from ._explain import explain as explain
from ._from_sympy import from_sympy as from_sympy
from ._primitives import supported_operations as supported_operations
from ._vmap import vmap as vmap

__version__ = "0.1.0"


def __getattr__(name: str):
    # symjac.scipy needs SciPy: import it only when it is asked for (sj.scipy.ode)
    if name == "scipy":
        import importlib

        return importlib.import_module(".scipy", __name__)
    raise AttributeError(f"module 'symjac' has no attribute {name!r}")


from ._tape import start_preload as _start_preload

_start_preload()
del _start_preload
