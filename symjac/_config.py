"""Process-wide settings."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ._errors import ArgumentError

MODES = ("auto", "sync", "background", "never")


def _choice(name: str, default: str, choices: tuple) -> str:
    value = os.environ.get(name, default)
    if value not in choices:
        raise ArgumentError(
            f"the environment variable {name} must be one of {', '.join(choices)}; got {value!r}. "
            f"Set it to one of those, or unset it (default {default!r})."
        )
    return value


def _whole_number(name: str, default: int) -> int:
    """A positive whole number from the environment, written as people write them:
    1000000, 1_000_000, 1,000,000 or 1e6."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip().replace("_", "").replace(",", "")
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = float("nan")
        value = int(number) if number == number and number not in (float("inf"), float("-inf")) and \
            number == int(number) else None
    if value is None or value < 1:
        raise ArgumentError(
            f"the environment variable {name} must be a positive whole number, such as {default} or "
            f"{default:.0e}".replace("e+0", "e").replace("e+", "e") +
            f"; got {raw!r}. Set it to such a number, or unset it (default {default:,})."
        )
    return value


_mode = _choice("SYMJAC_COMPILE", "auto", MODES)


def compile_mode() -> str:
    """How specialised kernels are compiled (see :func:`set_compile_mode`).

    >>> import symjac as sj
    >>> sj.compile_mode() in ("auto", "sync", "background", "never")
    True
    """
    return _mode


def set_compile_mode(mode: str) -> None:
    """Choose when symjac compiles the specialised Numba kernel of a new function.

    * ``"auto"`` (default): load it at once if a previous run compiled it
      (disk cache), and compile small programs (a few hundred operations,
      ~0.1 s) at once; otherwise answer calls with the tape interpreter right
      away and compile the kernel in the background, switching to it when
      ready.  A kernel serves calls through its C entry point as soon as its
      machine code is there; its Numba wrapper (~1-2 µs faster a call; Numba's
      first compile in a process takes ~0.5 s) follows in the background.
    * ``"sync"``: compile before the first call returns (the Numba wrapper too).
    * ``"background"``: like auto, but always compile in the background.
    * ``"never"``: use the tape interpreter only.

    Both paths run the same program and return identical results.  The
    environment variable ``SYMJAC_COMPILE`` sets the initial mode.

    >>> import symjac as sj
    >>> before = sj.compile_mode()
    >>> sj.set_compile_mode("never")
    >>> sj.compile_mode()
    'never'
    >>> sj.set_compile_mode(before)
    """
    global _mode
    if mode not in MODES:
        raise ValueError(f"compile mode must be one of {MODES}; got {mode!r}")
    _mode = mode


@contextlib.contextmanager
def compiling(mode: str) -> Iterator[None]:
    """``with sj.compiling("sync"): ...`` sets the compile mode for a block.

    >>> import numpy as np, symjac as sj
    >>> with sj.compiling("never"):  # the tape interpreter only
    ...     sj.grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0]))
    array([2., 4.])
    """
    previous = _mode
    set_compile_mode(mode)
    try:
        yield
    finally:
        set_compile_mode(previous)


# ----- tiers ----------------------------------------------------------------------------

TIERS = ("auto", "scalar", "array")
#: "auto": a scalar trace that passes this many nodes stops, and the array tier builds the
#: function (its kernels run small programs in 1-2 µs a call, but build at ~30 µs a node,
#: derivatives included)
ARRAY_THRESHOLD = 20_000
#: "auto": so does a scalar trace whose contractions (dense layers) pass this many multiply-adds:
#: the array tier runs them as matrix products (an MLP 8-32-32-4 has 1,400 and stays scalar;
#: a tanh network of width 32 has 2,100, whose Laplacian the scalar tier builds in seconds)
ARRAY_PRODUCTS = 2_000

_tier = _choice("SYMJAC_TIER", "auto", TIERS)


def tier() -> str:
    """Which tier builds new programs (see :func:`symjac.set_tier`).

    >>> import symjac as sj
    >>> sj.tier() in ("auto", "scalar", "array")
    True
    """
    return _tier


def set_tier(choice: str) -> None:
    """Set the tier choice (``sj.set_tier``, which also drops the programs built so far)."""
    global _tier
    if choice not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}; got {choice!r}")
    _tier = choice


# ----- resource limits ------------------------------------------------------------------


#: Default node limits.  A node costs about 1 kB and 10-80 µs from tracing to
#: a runnable program (measured on 2026-11-23: 400,000 nodes, 31 s, 390 MB), so
#: the error comes after seconds, not minutes (the old 20 million took minutes
#: and about 8 GB); the warning after about a second or two.
MAX_NODES = 1_000_000
WARN_NODES = 200_000


class Limits:
    """Bounds that turn runaway work into a clear error (or a warning) instead
    of minutes of waiting or an out-of-memory kill.  See :func:`set_limits`."""

    def __init__(self):
        self.max_nodes = _whole_number("SYMJAC_MAX_NODES", MAX_NODES)
        self.warn_nodes = _whole_number("SYMJAC_WARN_NODES", WARN_NODES)
        self.max_dense_entries = _whole_number("SYMJAC_MAX_DENSE_ENTRIES", 50_000_000)
        self.max_kernels = _whole_number("SYMJAC_MAX_KERNELS", 1024)


LIMITS = Limits()


def set_limits(*, max_nodes: int | None = None, warn_nodes: int | None = None,
               max_dense_entries: int | None = None, max_kernels: int | None = None) -> None:
    """Change symjac's resource limits (each also has an environment variable).

    Args:
        max_nodes: expression-graph nodes one trace plus its derivatives may
            create, input symbols included, before symjac stops with
            ``ResourceLimitError`` (``SYMJAC_MAX_NODES``, default 1 million,
            roughly 1 GB and 10-60 s of work); an argument with more elements
            than this is refused before tracing starts.
        warn_nodes: nodes after which a ``ResourceWarning`` says the trace is
            getting large (``SYMJAC_WARN_NODES``, default 200,000).
        max_dense_entries: entries of a dense Jacobian or Hessian block beyond
            which symjac asks for ``sparse=True`` or a vector product instead
            (``SYMJAC_MAX_DENSE_ENTRIES``, default 50 million).
        max_kernels: compiled programs kept in memory; the least recently used
            are dropped beyond it (``SYMJAC_MAX_KERNELS``, default 1024).  A
            dropped program is rebuilt from the disk cache when needed again.

    >>> import numpy as np, symjac as sj
    >>> sj.set_limits(max_dense_entries=10)
    >>> sj.jacobian(lambda x: x ** 2)(np.ones(5))  # 25 entries
    Traceback (most recent call last):
    ...
    symjac._errors.ResourceLimitError: a dense Jacobian of shape (5, 5) has 25 entries, over the limit of 10 (sj.set_limits(max_dense_entries=...)). Use sparse=True (only the nonzeros are built), or sj.jvp / sj.vjp for products with vectors.
    >>> sj.set_limits(max_dense_entries=50_000_000)
    """
    for name, value in (("max_nodes", max_nodes), ("warn_nodes", warn_nodes),
                        ("max_dense_entries", max_dense_entries), ("max_kernels", max_kernels)):
        if value is not None:
            if value < 1:
                raise ValueError(f"{name} must be a positive int; got {value!r}")
            setattr(LIMITS, name, int(value))
