"""Finite-difference checks of derivatives, for symjac's tests and yours.

``check_grads(f, args)`` checks symjac's forward (``jvp``) and reverse
(``vjp``) derivatives of ``f`` at ``args`` against central finite differences
of ``f`` itself, along random directions:

* forward:  ``jvp(f)(x, v) ≈ (f(x + h v) - f(x - h v)) / 2h``;
* reverse:  ``⟨u, J v⟩ = ⟨uᵀJ, v⟩`` (the VJP against the checked JVP);
* ``order=2`` checks second derivatives against mixed finite differences of
  ``f`` itself, and repeats both checks on the derivative functions
  (``x -> jvp(f)(x, v)`` and ``x -> vjp(f)(x, u)``), so forward-over-forward
  and reverse-over-forward agree too.

The lower-level :func:`check_jvp` and :func:`check_vjp` take the derivative
functions as arguments, so they can check any implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["check_grads", "check_jvp", "check_vjp", "numerical_jvp", "numerical_second"]


def _flat(value) -> np.ndarray:
    if isinstance(value, tuple):
        return np.concatenate([_flat(v) for v in value]) if value else np.zeros(0)
    return np.asarray(value, dtype=np.float64).reshape(-1)


def _with(args: Sequence, argnum: int, value) -> list:
    out = list(args)
    out[argnum] = value
    return out


def numerical_jvp(f: Callable, args: Sequence, argnum: int, v: np.ndarray, h: float | None = None) -> np.ndarray:
    """Central-difference directional derivative of ``f`` along ``v`` (flattened output).

    Uses a fourth-order stencil (error O(h⁴)) with ``h`` scaled to the argument.
    """
    x = np.asarray(args[argnum], dtype=np.float64)
    if h is None:
        h = 1e-3 * max(1.0, float(np.max(np.abs(x), initial=0.0)))

    def at(t):
        return _flat(f(*_with(args, argnum, x + t * v)))

    return (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h)


def numerical_second(f: Callable, args: Sequence, argnum: int, v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Second directional derivative ``d²f[v, w]`` straight from values of ``f``
    (mixed central differences, Richardson-extrapolated to error O(h⁴))."""
    x = np.asarray(args[argnum], dtype=np.float64)
    base = 2e-3 * max(1.0, float(np.max(np.abs(x), initial=0.0)))

    def at(a, b):
        return _flat(f(*_with(args, argnum, x + a * v + b * w)))

    def mixed(h):
        return (at(h, h) - at(h, -h) - at(-h, h) + at(-h, -h)) / (4 * h * h)

    return (4 * mixed(base / 2) - mixed(base)) / 3


def _compare(kind: str, got, want, rtol: float, atol: float, detail: str) -> None:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    err = float(np.max(np.abs(got - want), initial=0.0))
    if not np.all(np.isfinite(got) == np.isfinite(want)) or err > atol + rtol * scale:
        raise AssertionError(
            f"{kind} check failed{detail}: max |error| = {err:.3g} (allowed {atol + rtol * scale:.3g})\n"
            f"  derivative:         {np.array2string(got.reshape(-1)[:8], precision=6)}\n"
            f"  finite differences: {np.array2string(want.reshape(-1)[:8], precision=6)}"
        )


def check_jvp(
    f: Callable, jvp_fn: Callable, args: Sequence, argnum: int = 0, *, rng=None, rtol=1e-5, atol=1e-6
) -> None:
    """Check ``jvp_fn(*args, v)`` against finite differences of ``f`` for a random ``v``."""
    rng = np.random.default_rng(0) if rng is None else rng
    x = np.asarray(args[argnum], dtype=np.float64)
    v = rng.standard_normal(x.shape)
    want = numerical_jvp(f, args, argnum, v)
    got = _flat(jvp_fn(*args, v))
    _compare("jvp", got, want, rtol, atol, f" (argument {argnum})")


def check_vjp(
    f: Callable,
    jvp_fn: Callable,
    vjp_fn: Callable,
    args: Sequence,
    argnum: int = 0,
    *,
    rng=None,
    rtol=1e-5,
    atol=1e-6,
) -> None:
    """Check ``vjp_fn(*args, u)`` by the identity ⟨u, J v⟩ = ⟨uᵀJ, v⟩, with J·v from
    finite differences (so a wrong JVP cannot vouch for a wrong VJP)."""
    rng = np.random.default_rng(1) if rng is None else rng
    x = np.asarray(args[argnum], dtype=np.float64)
    y = f(*args)
    u = tuple(rng.standard_normal(np.shape(o)) for o in y) if isinstance(y, tuple) else rng.standard_normal(np.shape(y))
    v = rng.standard_normal(x.shape)
    jv = numerical_jvp(f, args, argnum, v)
    ujv = float(np.dot(_flat(u), jv))
    g = _flat(vjp_fn(*args, u))
    _compare("vjp", np.dot(g, v.reshape(-1)), ujv, rtol, atol, f" (argument {argnum}, ⟨u, Jv⟩ = ⟨uᵀJ, v⟩)")


def check_grads(
    f: Callable,
    args: Sequence,
    argnums: int | Sequence[int] = 0,
    *,
    order: int = 2,
    modes: Sequence[str] = ("fwd", "rev"),
    rtol: float = 1e-5,
    atol: float = 1e-6,
    seed: int = 0,
) -> None:
    """Check symjac's derivatives of ``f`` at ``args`` against finite differences.

    Raises ``AssertionError`` describing the first mismatch.  ``order=2`` also
    checks the derivatives of the JVP and VJP functions (second derivatives).

    >>> import numpy as np
    >>> from symjac.testing import check_grads
    >>> check_grads(lambda x: np.sin(x) * x, [np.array([0.3, 1.2])], order=1)
    """
    import symjac as sj

    args = [np.asarray(a, dtype=np.float64) if isinstance(a, (float, int)) else a for a in args]
    rng = np.random.default_rng(seed)
    for argnum in (argnums,) if isinstance(argnums, int) else tuple(argnums):
        jvp_fn = sj.jvp(f, argnum)
        if "fwd" in modes:
            check_jvp(f, jvp_fn, args, argnum, rng=rng, rtol=rtol, atol=atol)
        if "rev" in modes:
            check_vjp(f, jvp_fn, sj.vjp(f, argnum), args, argnum, rng=rng, rtol=rtol, atol=atol)
        if order > 1:
            x = np.asarray(args[argnum], dtype=np.float64)
            v = rng.standard_normal(x.shape)
            w = rng.standard_normal(x.shape)
            y = f(*args)
            # second derivatives against f itself, not against symjac's first derivative
            d2 = sj.jvp(lambda *a, _v=v, _f=jvp_fn: _f(*a, _v), argnum)(*args, w)
            _compare("second-derivative", _flat(d2), numerical_second(f, args, argnum, v, w),
                     100 * rtol, 100 * atol, f" (argument {argnum}, d²f[v, w])")
            if "fwd" in modes:
                check_grads(lambda *a, _v=v, _f=jvp_fn: _f(*a, _v), args, argnum, order=order - 1,
                            modes=modes, rtol=rtol, atol=atol, seed=seed + 1)
            if "rev" in modes and not isinstance(y, tuple):
                u = rng.standard_normal(np.shape(y))
                vjp_fn = sj.vjp(f, argnum)
                check_grads(lambda *a, _u=u, _f=vjp_fn: _f(*a, _u), args, argnum, order=order - 1,
                            modes=modes, rtol=rtol, atol=atol, seed=seed + 2)
