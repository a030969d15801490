"""``sj.show`` and ``sj.explain``: looking at what a transform computes.

Both accept a transform or a plain function (shown as its values); the
rendering lives in :mod:`symjac.show`, which works on the runtime's plain
request and never on the transform objects of this layer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from ._api import Transform, jit
from ._signature import DEFAULT
from ._vmap import Batched
from .runtime.request import Request
from .show import display
from .show import explain as _explain


def _as_transform(fn: Callable[..., Any]) -> Transform:
    return fn if isinstance(fn, Transform) else jit(fn)


def show(transform: Callable[..., Any], *args: Any, limit: int | None = display.DEFAULT_LIMIT,
         **kwargs: Any) -> display.Shown:
    """A transform's result for arguments shaped like ``args``, readable at any size.

    Shared subexpressions are named once (``τ₁ = …``) and the nonzero entries
    written in terms of them, so a result that would print as pages of
    repeated terms prints in a few lines; zeros are left out.  ``str()`` is
    plain text, ``.pretty()`` unicode, ``.latex()`` LaTeX (Jupyter renders it);
    past ``limit`` lines (``None``: no limit) printing stops with a note of how
    much is left.  A plain function (not a transform) shows its values.
    ``transform.show(*args)`` is the same.

    Args:
        transform: a symjac transform such as ``sj.jacobian(f)``, or a plain function.
        *args: arguments like the transform's, only their shapes and dtypes
            (and static arguments' values) matter.
        limit: lines printed by ``str()`` before the size guard stops.
        captured: ``"symbols"`` (default) shows arrays the function reads from its
            objects, globals and closures (``self.W``) as symbols (``W_0_1``);
            ``"values"`` shows their current values.

    Returns:
        A :class:`Shown`; its ``.expr`` is the plain SymPy result.

    >>> import numpy as np, symjac as sj
    >>> def f(x, w):
    ...     return np.tanh(x @ w) ** 2
    >>> print(sj.show(sj.jacobian(f), np.zeros(2), np.zeros((2, 2))))
    jacobian of f with respect to x, for x (2,), w (2, 2)
      J 2×2: 4 nonzero entries; 18 operations as a shared graph, 48 written out in full
      τ₁ = tanh(w_0_0*x_0 + w_1_0*x_1)
      τ₂ = 1 - τ₁**2
      J[0, 0] = 2*w_0_0*τ₁*τ₂
      J[0, 1] = 2*w_1_0*τ₁*τ₂
      τ₃ = tanh(w_0_1*x_0 + w_1_1*x_1)
      τ₄ = 1 - τ₃**2
      J[1, 0] = 2*w_0_1*τ₃*τ₄
      J[1, 1] = 2*w_1_1*τ₃*τ₄
    """
    return _as_transform(transform).show(*args, limit=limit, **kwargs)


def _split_vector(t: Transform, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
                  ) -> tuple[Request, tuple[Any, ...], Any]:
    """``(request, primal, vector)``: the function's own arguments (bound, keyword
    arguments among them), the request that serves a call with them (keyword-only
    options and defaults left out are static there, as in a call), and the
    trailing vector if given (by position, or by its name: ``v=``, ``u=``)."""
    kwargs = dict(kwargs or {})
    n_primal = t.n_params - t.n_extra if t.n_params is not None else len(args) - t.n_extra
    name = t.spec.transform.vector
    sig = t.root_signature
    vector = None
    if t.n_extra and name in kwargs and name not in (*sig.names, *sig.kwonly_names):
        vector = kwargs.pop(name)
    elif t.n_extra and len(args) > n_primal:
        vector, args = args[n_primal], args[:n_primal]
    primal = t.bind_primal(args, kwargs)
    if not kwargs:
        return t.request, primal, vector
    # (the vector's place holds a stand-in: only the function's own arguments matter here)
    request, flat, _ = t._flattened(primal + (np.zeros(()),) * t.n_extra, keywords=True)
    return request, flat[: len(flat) - t.n_extra], vector


def _keywords(t: Transform, primal: tuple[Any, ...]) -> tuple[tuple[str, ...], frozenset[int]]:
    """The function's keyword-only parameter names, and the positions of ``primal``
    left to their defaults."""
    return tuple(t.root_signature.kwonly_names), frozenset(i for i, a in enumerate(primal) if a is DEFAULT)


def explanation(transform: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """The text :func:`explain` prints."""
    if isinstance(transform, Batched):
        t = transform.inner
        axes = list(transform.in_axes) if isinstance(transform.in_axes, (tuple, list)) else [transform.in_axes] * len(args)
        sizes = {np.shape(a)[ax] for a, ax in zip(args, axes, strict=False) if ax is not None and np.ndim(a) > ax}
        size = sizes.pop() if len(sizes) == 1 else "B"
        sample = tuple(np.take(np.asarray(a), 0, axis=ax) if ax is not None else a
                       for a, ax in zip(args, axes, strict=False))
        request, primal, vector = _split_vector(t, sample, kwargs)
        return _explain.batched_explanation(request, primal, vector, size, axes, transform.out_axes,
                                            *_keywords(t, primal))
    t = _as_transform(transform)
    request, primal, vector = _split_vector(t, args, kwargs)
    return _explain.explanation(request, primal, vector, *_keywords(t, primal))


def explain(transform: Callable[..., Any], *args: Any, file: TextIO | None = None, **kwargs: Any) -> None:
    """Print what ``transform`` computes for arguments shaped like ``args``.

    The explanation states the function's shapes, its Jacobian (or Hessian)
    in index notation, which shape each vector must have, the result as an
    index formula with the equivalent PyTorch and JAX calls, the product to
    use for the other question (``J·v`` or ``uᵀJ``), and the cost of each for
    these shapes.  The trailing ``v`` or ``u`` may be left out; a wrong-shaped
    one is explained rather than raised.  A plain function is explained as
    its values and the derivatives one can ask of it.

    Args:
        transform: a symjac transform (``sj.vjp(f)``, ``sj.jacobian(f, argnums=1)``, ...)
            or a plain function.
        *args: the arguments as the transform takes them; only shapes (and
            static arguments' values) matter.
        file: where to print (default ``sys.stdout``).
        **kwargs: keyword arguments as the transform takes them (``alpha=0.1``,
            or the vector by name: ``v=``, ``u=``).

    >>> import numpy as np, symjac as sj
    >>> def f(x):
    ...     return np.outer(x, x)
    >>> x = np.array([1.0, 2.0, 3.0, 4.0])
    >>> sj.explain(sj.vjp(f), x, np.ones((4, 4)))  # doctest: +ELLIPSIS
    vjp of f at x with cotangent u
      f: x (4,) -> y (4, 4)           Jacobian J[i, j, k] = ∂y[i, j] / ∂x[k], shape (4, 4, 4)
      u must have y's shape (4, 4); the result has x's shape (4,)
      result[k] = Σ_{i,j} u[i, j] · J[i, j, k]
        (PyTorch: torch.autograd.grad(y, x, grad_outputs=u); JAX: jax.vjp(f, x)[1](u)[0])
      for the other question, sj.jvp(f)(x, v) computes J·v, how y moves when x moves along v:
        v shaped like x (4,), the result shaped like y (4, 4)
      cost, for these shapes (x: N = 4 entries; y: M = 16; f itself: 16 operations):
    ...
    """
    print(explanation(transform, *args, **kwargs), file=file or sys.stdout)
