"""The errors symjac raises.

Every error derives from :class:`SymjacError` *and* from the builtin a Python
user would naturally catch (``ValueError``, ``TypeError``,
``NotImplementedError``).  Messages follow one pattern: what was expected, what
was seen, and how to fix it.
"""

from __future__ import annotations

import warnings


class SymjacError(Exception):
    """Base class of every error raised by symjac."""


class ShapeError(SymjacError, ValueError):
    """An array has the wrong shape for the product asked for.

    Example: ``vjp`` given a vector shaped like the *input*; the message names
    both shapes and points at ``jvp``, which takes input-shaped vectors.
    """


class ArgumentError(SymjacError, ValueError):
    """Arguments do not fit the transform: ``argnums`` out of range, a wrong
    number of vectors, a static argument that cannot be hashed, ..."""


class ArityError(SymjacError, TypeError):
    """The function was called with the wrong number of arguments."""


class InputTypeError(SymjacError, TypeError):
    """An argument is not a real number or array of real numbers (a string, a
    complex array, an object array, ...)."""


class UnsupportedOperationError(SymjacError, NotImplementedError):
    """The traced function used a NumPy operation symjac cannot trace."""


class TracerControlFlowError(SymjacError, TypeError):
    """Python control flow (``if``, ``while``, ``and``/``or``, ``bool()``) was
    applied to a traced value, whose truth is not known while tracing."""


class TracerConversionError(SymjacError, TypeError):
    """A traced value was converted to a concrete Python or NumPy number
    (``float(x)``, ``int(x)``, storing into a preallocated NumPy array)."""


class NonScalarOutputError(SymjacError, ValueError):
    """``grad``, ``hvp`` or ``laplacian`` was applied to a function whose
    output is not a scalar."""


class ResourceLimitError(SymjacError, MemoryError):
    """A trace, a derivative or a batch would exceed a resource limit
    (see ``sj.set_limits``); raised before the work, not after minutes of it."""


class CompileError(SymjacError, RuntimeError):
    """Numba failed to compile a generated kernel (a bug in symjac: please
    report it with the kernel source from ``.source()``)."""


class SymjacWarning(Warning):
    """Base class of the warnings symjac gives."""


class RandomDrawWarning(SymjacWarning, RuntimeWarning):
    """The traced function drew random numbers while it was traced: the draws
    became constants of the compiled kernel, so every call returns the same
    "random" values (NumPy would draw new ones)."""


# ----- warnings ------------------------------------------------------------------------------


def warn(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """Warn, attributing the warning to the user's line that led here (the
    innermost frame outside symjac, NumPy and SymPy), not to symjac's files."""
    from ._location import user_stacklevel  # (imports NumPy and SymPy: only when warning)

    warnings.warn(message, category, stacklevel=user_stacklevel())
