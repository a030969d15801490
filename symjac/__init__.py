"""symjac: exact derivatives of NumPy functions, shown as SymPy and run as Numba kernels.

>>> import numpy as np, symjac as sj
>>> f = lambda x: np.sin(x[0]) * x[1]
>>> sj.jacobian(f).symbolic(np.zeros(2))
[x_1*cos(x_0), sin(x_0)]
"""

import os as _os
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING as _TYPE_CHECKING

# Numba's OpenMP (libgomp) threads spin ~4 ms waiting for work after each
# parallel region.  On a busy 2-core machine that spinning took the core the
# other worker needed, and two-thread batch kernels ran ~25x slower than one
# thread.  Not spinning at all (OMP_WAIT_POLICY=PASSIVE) costs a futex wake-up
# per region: a 100,000-sample Lorenz batch then took 140-220 µs on two threads
# instead of 80 µs.  A short spin (10,000 iterations, ~0.1-0.3 ms measured)
# keeps back-to-back calls fast and bounds the damage.  Set before OpenMP
# starts (it reads these once); an explicit setting of either variable wins.
if "OMP_WAIT_POLICY" not in _os.environ:
    _os.environ.setdefault("GOMP_SPINCOUNT", "10000")

from ._api import Transform as Transform  # noqa: E402
from ._api import divergence as divergence
from ._api import from_sympy as from_sympy
from ._api import grad as grad
from ._api import hessian as hessian
from ._api import hvp as hvp
from ._api import jacobian as jacobian
from ._api import jit as jit
from ._api import jvp as jvp
from ._api import laplacian as laplacian
from ._api import value_and_grad as value_and_grad
from ._api import vjp as vjp
from ._caches import cache_info as cache_info
from ._caches import clear_caches as clear_caches
from ._caches import set_tier as set_tier
from ._caches import using_tier as using_tier
from ._caches import wait_for_kernels as wait_for_kernels
from ._config import compile_mode as compile_mode
from ._config import compiling as compiling
from ._config import set_compile_mode as set_compile_mode
from ._config import set_limits as set_limits
from ._config import tier as tier
from ._errors import (
    ArgumentError as ArgumentError,
)
from ._errors import (
    ArityError as ArityError,
)
from ._errors import (
    CompileError as CompileError,
)
from ._errors import (
    InputTypeError as InputTypeError,
)
from ._errors import (
    NonScalarOutputError as NonScalarOutputError,
)
from ._errors import (
    RandomDrawWarning as RandomDrawWarning,
)
from ._errors import (
    ResourceLimitError as ResourceLimitError,
)
from ._errors import (
    ShapeError as ShapeError,
)
from ._errors import (
    SymjacError as SymjacError,
)
from ._errors import (
    SymjacWarning as SymjacWarning,
)
from ._errors import (
    TracerControlFlowError as TracerControlFlowError,
)
from ._errors import (
    TracerConversionError as TracerConversionError,
)
from ._errors import (
    UnsupportedOperationError as UnsupportedOperationError,
)
from ._inspect import explain as explain
from ._inspect import show as show
from ._vmap import vmap as vmap
from .runtime.kernel import KernelInfo as KernelInfo
from .runtime.stats import CacheInfo as CacheInfo
from .show.display import Shown as Shown
from .trace.primitives import supported_operations as supported_operations

__version__ = "0.2.0"


if _TYPE_CHECKING:  # (for type checkers: at run time __getattr__ imports it when asked for)
    from . import scipy as scipy


def __getattr__(name: str) -> _ModuleType:
    # symjac.scipy needs SciPy: import it only when it is asked for (sj.scipy.ode)
    if name == "scipy":
        import importlib

        return importlib.import_module(".scipy", __name__)
    raise AttributeError(f"module 'symjac' has no attribute {name!r}")


# imported last on purpose: the preload starts once the package is set up
from .runtime.tape import start_preload as _start_preload  # noqa: E402

_start_preload()
del _start_preload
