"""Exact derivatives for SciPy's solvers: ``solve_ivp``, ``minimize``, ``root``
and ``least_squares``.

Each adapter wraps one plain NumPy function and hands SciPy the callables it
asks for, with SciPy's own signatures: the ODE right-hand side's ``fun`` and
``jac``; an objective's ``jac`` (the gradient), ``hess`` and ``hessp``; a
residual's ``jac``.  ``options(method)`` gives exactly the keywords that
method uses (SciPy warns about the others), so a call reads::

    sol = scipy.integrate.solve_ivp(t_span=(0, 10), y0=y0, **rhs.options("BDF", y0, args))

Jacobians come from a sparse program whose pattern is fixed per argument
shapes, so only the structural nonzeros are computed; a dense result, where
the method needs one or the pattern is dense, is that matrix expanded.  This
module is imported on demand (``import symjac.scipy`` or ``sj.scipy``) and
needs SciPy.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.integrate
import scipy.optimize
import scipy.sparse as sps

from ._api import (
    grad,
    hessian,
    hvp,
    jacobian,
    jit,
)
from ._errors import ArgumentError, ShapeError

__all__ = ["ODE", "Objective", "Residual", "ode", "objective", "residual",
           "nonlinear_constraint", "slsqp_constraint", "solve_ivp"]

#: Sparse results are used where at most this fraction of entries is nonzero.
SPARSE_DENSITY = 0.1


def _method_error(kind: str, method: str, known: Collection[str]) -> ArgumentError:
    return ArgumentError(
        f"{kind}: unknown method {method!r}; expected one of {', '.join(sorted(known))}. "
        "Pass the callables yourself (fun, jac, ...) for methods not listed."
    )


def _is_sparse_enough(matrix: sps.spmatrix, choice: bool | None) -> bool:
    if choice is not None:
        return choice
    rows, cols = matrix.shape
    return matrix.nnz <= SPARSE_DENSITY * rows * cols


def _pattern(matrix: sps.spmatrix) -> sps.spmatrix:
    """The boolean pattern of a symjac sparse result (its structural nonzeros)."""
    cls = sps.csr_matrix if matrix.format == "csr" else sps.csc_matrix
    return cls((np.ones(matrix.nnz, dtype=bool), matrix.indices, matrix.indptr), shape=matrix.shape)


def _shape_key(args: Sequence[Any]) -> tuple[tuple[int, ...], ...]:
    return tuple(np.shape(a) for a in args)


# ----- ODEs ------------------------------------------------------------------------------------

_IVP_IMPLICIT = {"BDF", "Radau"}
_IVP_EXPLICIT = {"RK23", "RK45", "DOP853"}


class ODE:
    """``fun``, ``jac`` and ``jac_sparsity`` of a right-hand side ``f(t, y, *params)``
    for ``scipy.integrate.solve_ivp`` (see :func:`ode`)."""

    def __init__(self, f: Callable[..., Any], sparse: bool | None = None, compile_fun: bool = False) -> None:
        self.f = f
        self.sparse = sparse
        #: ``fun(t, y, *params)``: ``f`` itself, or compiled with
        #: ``compile_fun=True``; shape ``(n,)``.
        self.fun: Callable[..., Any] = jit(f) if compile_fun else f
        self._jacobian = jacobian(f, argnums=1, sparse=True, format="csc")
        self._dense: dict[tuple[tuple[int, ...], ...], bool] = {}  # argument shapes -> the Jacobian dense

    def jac(self, t: float, y: npt.ArrayLike, *params: Any) -> np.ndarray | sps.csc_matrix:
        """``∂f/∂y`` at ``(t, y)``: a ``scipy.sparse.csc_matrix`` of shape ``(n, n)``
        when the pattern is sparse (or ``sparse=True``), else an ndarray."""
        J = self._jacobian(t, y, *params)
        key = _shape_key((y, *params))
        dense = self._dense.get(key)
        if dense is None:
            dense = self._dense[key] = not _is_sparse_enough(J, self.sparse)
        return J.toarray() if dense else J

    def jac_sparsity(self, t: float, y: npt.ArrayLike, *params: Any) -> sps.csc_matrix:
        """The structural pattern of ``∂f/∂y``: a boolean ``csc_matrix`` of shape
        ``(n, n)``, what ``solve_ivp(..., jac_sparsity=...)`` takes for finite
        differences."""
        return _pattern(self._jacobian(t, y, *params))

    def bands(self, t: float, y: npt.ArrayLike, *params: Any) -> tuple[int, int]:
        """``(lband, uband)``: ``J[i, j]`` is structurally zero unless ``i - lband <= j <= i + uband``."""
        J = self._jacobian(t, y, *params)
        cols = np.repeat(np.arange(J.shape[1]), np.diff(J.indptr))
        offset = cols - J.indices
        return (int(max(0, -offset.min(initial=0))), int(max(0, offset.max(initial=0))))

    def banded_jac(self, t: float, y: npt.ArrayLike, *params: Any, lband: int, uband: int) -> np.ndarray:
        """``∂f/∂y`` packed as LSODA and ``scipy.linalg.solve_banded`` want it:
        shape ``(lband + uband + 1, n)`` with ``packed[uband + i - j, j] = J[i, j]``."""
        J = self._jacobian(t, y, *params)
        n = J.shape[1]
        cols = np.repeat(np.arange(n), np.diff(J.indptr))
        rows = uband + J.indices - cols
        if rows.size and (rows.min() < 0 or rows.max() > lband + uband):
            raise ShapeError(
                f"banded_jac: the Jacobian has entries outside the band lband={lband}, "
                f"uband={uband}; its bands are {self.bands(t, y, *params)}. Use ode.bands()."
            )
        packed = np.zeros((lband + uband + 1, n), dtype=J.dtype)
        packed[rows, cols] = J.data
        return packed

    def options(self, method: str, y0: npt.ArrayLike, args: Sequence[Any] = (),
                t0: float = 0.0) -> dict[str, Any]:
        """The keywords for ``solve_ivp(t_span=..., y0=y0, **options)``: ``fun``,
        ``method``, ``args``, and what the method uses of ``jac`` (BDF, Radau:
        sparse or dense; LSODA: dense, or packed banded with ``lband``/``uband``
        when the band is narrow).  Explicit methods get no Jacobian.

        ``y0`` (shape ``(n,)``) and ``args`` fix the shapes the Jacobian's
        pattern is worked out for.
        """
        if method not in _IVP_IMPLICIT | _IVP_EXPLICIT | {"LSODA"}:
            raise _method_error("solve_ivp", method, _IVP_IMPLICIT | _IVP_EXPLICIT | {"LSODA"})
        y0 = np.asarray(y0, dtype=float)
        args = tuple(args)
        out = np.asarray(self.fun(t0, y0, *args))
        if out.shape != y0.shape:
            raise ShapeError(
                f"ode: f(t, y, *params) must return an array shaped like y {y0.shape}; "
                f"got shape {out.shape}. Return a flat vector (np.stack(...) or a list of entries)."
            )
        opts = {"fun": self.fun, "method": method, "args": args}
        if method in _IVP_EXPLICIT:
            return opts
        if method in _IVP_IMPLICIT:
            return {**opts, "jac": self.jac}
        # LSODA takes a dense Jacobian, or a packed band when the band is narrow
        lband, uband = self.bands(t0, y0, *args)
        if self.sparse is not False and (lband + uband + 1) * 2 <= y0.size:

            def jac(t: float, y: npt.ArrayLike, *params: Any) -> np.ndarray:
                return self.banded_jac(t, y, *params, lband=lband, uband=uband)

            return {**opts, "jac": jac, "lband": lband, "uband": uband}
        return {**opts, "jac": lambda t, y, *params: self._jacobian(t, y, *params).toarray()}


def ode(f: Callable[..., Any], *, sparse: bool | None = None, compile_fun: bool = False) -> ODE:
    """Adapt a right-hand side ``f(t, y, *params)`` to ``scipy.integrate.solve_ivp``.

    ``f`` is plain NumPy code returning ``dy/dt`` with ``y``'s shape ``(n,)``.
    The result's ``fun(t, y, *params)`` is ``f`` itself (``compile_fun=True``
    compiles it: worth it for right-hand sides with slow Python loops; for
    vectorised NumPy code it only adds a build, and the solver's own
    per-step overhead dwarfs what it saves per call), ``jac(t, y, *params)``
    its exact Jacobian ``∂f/∂y`` (``(n, n)``; a ``csc_matrix`` when at most
    10 % of it is structurally nonzero, else an ndarray; ``sparse=True`` /
    ``False`` forces one), and ``jac_sparsity(t, y, *params)`` its pattern.
    ``options(method, y0, args)`` gives the keywords for ``solve_ivp``.

    >>> import numpy as np, symjac as sj
    >>> from scipy.integrate import solve_ivp
    >>> def decay(t, y, k):
    ...     return [-k * y[0], k * y[0] - 2 * k * y[1]]
    >>> rhs = sj.scipy.ode(decay)
    >>> rhs.jac(0.0, np.array([1.0, 0.0]), 0.5)
    array([[-0.5,  0. ],
           [ 0.5, -1. ]])
    >>> sol = solve_ivp(t_span=(0, 1), y0=[1.0, 0.0], **rhs.options("BDF", [1.0, 0.0], (0.5,)))
    >>> round(float(sol.y[0, -1]), 3)  # exp(-0.5)
    0.607
    """
    return ODE(f, sparse, compile_fun)


def solve_ivp(f: Callable[..., Any], t_span: tuple[float, float], y0: npt.ArrayLike, method: str = "BDF",
              args: Sequence[Any] = (), sparse: bool | None = None, compile_fun: bool = False,
              **options: Any) -> scipy.optimize.OptimizeResult:
    """``scipy.integrate.solve_ivp`` with symjac's compiled ``fun`` and exact ``jac``.

    Takes ``f(t, y, *args)`` and SciPy's arguments (``method`` defaults to
    BDF, since a Jacobian is what stiff solvers need; ``sparse`` and
    ``compile_fun`` as for :func:`ode`); returns SciPy's result.

    >>> import numpy as np, symjac as sj
    >>> sol = sj.scipy.solve_ivp(lambda t, y: -50 * (y - np.cos(t)), (0, 1), [0.0], rtol=1e-8)
    >>> sol.success, round(float(sol.y[0, -1]), 5)  # 50 (50 cos 1 + sin 1) / 2501
    (True, 0.55691)
    """
    y0 = np.asarray(y0, dtype=float)
    opts = ode(f, sparse=sparse, compile_fun=compile_fun).options(method, y0, args, t0=float(t_span[0]))
    return scipy.integrate.solve_ivp(t_span=t_span, y0=y0, **opts, **options)


# ----- optimisation ----------------------------------------------------------------------------

#: What each scipy.optimize.minimize method uses besides fun.
_MINIMIZE_USES = {
    "Nelder-Mead": (), "Powell": (), "COBYLA": (), "COBYQA": (),
    "CG": ("jac",), "BFGS": ("jac",), "L-BFGS-B": ("jac",), "TNC": ("jac",), "SLSQP": ("jac",),
    "Newton-CG": ("jac", "hessp"), "trust-ncg": ("jac", "hessp"), "trust-krylov": ("jac", "hessp"),
    "dogleg": ("jac", "hess"), "trust-exact": ("jac", "hess"), "trust-constr": ("jac", "hess"),
}
_DENSE_HESS = {"dogleg", "trust-exact"}


class Objective:
    """``fun``, ``jac``, ``hess`` and ``hessp`` of a scalar ``f(x, *args)`` for
    ``scipy.optimize.minimize`` (see :func:`objective`)."""

    def __init__(self, f: Callable[..., Any], sparse: bool = False) -> None:
        self.f = f
        self.sparse = sparse
        #: ``fun(x, *args)``: the objective, compiled; a float.
        self.fun = jit(f)
        #: ``jac(x, *args)``: the gradient, shape ``(n,)`` (SciPy calls it jac).
        self.jac = grad(f)
        self._hessian = hessian(f, sparse=True, format="csr")
        self._hvp = hvp(f)
        gradient = self.jac

        def value_and_grad(x: npt.ArrayLike, *args: Any) -> tuple[Any, Any]:
            return f(x, *args), gradient(x, *args)

        value_and_grad.__name__ = f"value_and_grad_{getattr(f, '__name__', 'f')}"
        self._value_and_grad = jit(value_and_grad)

    def hess(self, x: npt.ArrayLike, *args: Any) -> np.ndarray | sps.csr_matrix:
        """The Hessian ``(n, n)``: an ndarray, or a ``csr_matrix`` with ``sparse=True``."""
        H = self._hessian(x, *args)
        return H if self.sparse else H.toarray()

    def hessp(self, x: npt.ArrayLike, p: npt.ArrayLike, *args: Any) -> np.ndarray:
        """``H(x) · p`` (shape ``(n,)``) without forming ``H``; SciPy's argument order."""
        return self._hvp(x, *args, p)

    def value_and_grad(self, x: npt.ArrayLike, *args: Any) -> tuple[float, np.ndarray]:
        """``(f(x), ∇f(x))`` from one kernel, for ``minimize(..., jac=True)``."""
        value, gradient = self._value_and_grad(x, *args)
        return float(value), gradient

    def options(self, method: str) -> dict[str, Any]:
        """The keywords for ``minimize(x0=..., args=..., **options)``: ``fun``,
        ``method`` and what the method uses of ``jac``, ``hess``, ``hessp``
        (Newton-CG and the Krylov trust regions get ``hessp``, so no Hessian is
        formed; dogleg and trust-exact a dense ``hess``)."""
        uses = _MINIMIZE_USES.get(method)
        if uses is None:
            raise _method_error("minimize", method, _MINIMIZE_USES)
        opts = {"fun": self.fun, "method": method}
        if "jac" in uses:
            opts["jac"] = self.jac
        if "hessp" in uses:
            opts["hessp"] = self.hessp
        if "hess" in uses:
            opts["hess"] = (lambda x, *a: self._hessian(x, *a).toarray()) if method in _DENSE_HESS else self.hess
        return opts


def objective(f: Callable[..., Any], *, sparse: bool = False) -> Objective:
    """Adapt a scalar objective ``f(x, *args)`` (``x`` of shape ``(n,)``) to
    ``scipy.optimize.minimize``.

    The result has ``fun``, ``jac`` (the exact gradient, ``(n,)``), ``hess``
    (``(n, n)``, a ``csr_matrix`` with ``sparse=True``, as trust-constr
    accepts), ``hessp(x, p, *args)`` (``H·p`` without forming ``H``),
    ``value_and_grad`` (for ``jac=True``) and ``options(method)``.

    >>> import numpy as np, symjac as sj
    >>> from scipy.optimize import minimize
    >>> rosen = lambda x: np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
    >>> obj = sj.scipy.objective(rosen)
    >>> obj.hessp(np.zeros(3), np.ones(3))
    array([  2., 202., 200.])
    >>> res = minimize(x0=np.zeros(3), **obj.options("Newton-CG"))
    >>> np.round(res.x, 4)
    array([1., 1., 1.])
    """
    return Objective(f, sparse)


def _vector_jacobian(c: Callable[..., Any], sparse: bool) -> Callable[..., Any]:
    J = jacobian(c, sparse=True, format="csr")
    if sparse:
        return J
    return lambda x, *args: J(x, *args).toarray()


def nonlinear_constraint(c: Callable[..., Any], lb: npt.ArrayLike, ub: npt.ArrayLike, *,
                         args: Sequence[Any] = (), sparse: bool = False,
                         **kwargs: Any) -> scipy.optimize.NonlinearConstraint:
    """``scipy.optimize.NonlinearConstraint`` for ``lb <= c(x, *args) <= ub``
    with the exact ``jac`` (``(m, n)``, ``m`` the number of constraint values, 1
    for a scalar ``c``; ``csr_matrix`` with ``sparse=True``) and
    ``hess(x, v)``, the Hessian of ``v · c(x)`` (``(n, n)``) that trust-constr asks for.
    ``kwargs`` go to ``NonlinearConstraint`` (``keep_feasible``, ...).

    >>> import numpy as np, symjac as sj
    >>> from scipy.optimize import minimize
    >>> circle = sj.scipy.nonlinear_constraint(lambda x: np.stack([x[0] ** 2 + x[1] ** 2]), -np.inf, 1.0)
    >>> circle.hess(np.array([0.5, 0.5]), np.array([2.0]))
    array([[4., 0.],
           [0., 4.]])
    >>> linear = sj.scipy.objective(lambda x: -x[0] - x[1])
    >>> res = minimize(x0=[0.0, 0.0], constraints=[circle], **linear.options("trust-constr"))
    >>> np.round(res.x, 3)
    array([0.707, 0.707])
    """
    args = tuple(args)
    value = jit(c)
    J = _vector_jacobian(c, sparse)
    H = hessian(lambda x, v, *a: np.sum(v * c(x, *a)), sparse=True, format="csr")

    def hess(x: npt.ArrayLike, v: npt.ArrayLike) -> np.ndarray | sps.csr_matrix:
        result = H(x, np.asarray(v, dtype=float), *args)
        return result if sparse else result.toarray()

    return scipy.optimize.NonlinearConstraint(
        lambda x: value(x, *args), lb, ub, jac=lambda x: J(x, *args), hess=hess, **kwargs
    )


def slsqp_constraint(c: Callable[..., Any], type: str = "eq", *, args: Sequence[Any] = ()) -> dict[str, Any]:
    """A constraint dict for ``minimize(..., method="SLSQP", constraints=[...])``:
    ``c(x, *args) == 0`` (``type="eq"``) or ``>= 0`` (``"ineq"``), with the exact
    dense Jacobian (``(m, n)``, ``m = 1`` for a scalar ``c``).

    >>> import numpy as np, symjac as sj
    >>> from scipy.optimize import minimize
    >>> line = sj.scipy.slsqp_constraint(lambda x: x[0] + x[1] - 1.0)
    >>> res = minimize(lambda x: x @ x, [3.0, 0.0], method="SLSQP", constraints=[line])
    >>> np.round(res.x, 6)
    array([0.5, 0.5])
    """
    if type not in ("eq", "ineq"):
        raise ArgumentError(f"slsqp_constraint: type must be 'eq' or 'ineq'; got {type!r}.")
    return {"type": type, "fun": jit(c), "jac": _vector_jacobian(c, sparse=False), "args": tuple(args)}


# ----- root finding and least squares ------------------------------------------------------------

#: Methods of scipy.optimize.root and least_squares that take a Jacobian, and
#: whether they accept a sparse one.
_RESIDUAL_JAC = {"hybr": False, "lm": False, "trf": True, "dogbox": True}
_RESIDUAL_NO_JAC = {"broyden1", "broyden2", "anderson", "linearmixing", "diagbroyden",
                    "excitingmixing", "krylov", "df-sane"}


class Residual:
    """``fun`` and ``jac`` of a vector function ``F(x, *args)`` for
    ``scipy.optimize.root`` and ``scipy.optimize.least_squares``
    (see :func:`residual`)."""

    def __init__(self, F: Callable[..., Any], sparse: bool | None = None) -> None:
        self.F = F
        self.sparse = sparse
        #: ``fun(x, *args)``: the residual, compiled; shape ``(m,)``.
        self.fun = jit(F)
        self._jacobian = jacobian(F, sparse=True, format="csr")
        self._dense: dict[tuple[tuple[int, ...], ...], bool] = {}

    def jac(self, x: npt.ArrayLike, *args: Any) -> np.ndarray | sps.csr_matrix:
        """``∂F/∂x`` (``(m, n)``): a ``csr_matrix`` when at most 10 % is
        structurally nonzero (or ``sparse=True``), else an ndarray."""
        J = self._jacobian(x, *args)
        key = _shape_key((x, *args))
        dense = self._dense.get(key)
        if dense is None:
            dense = self._dense[key] = not _is_sparse_enough(J, self.sparse)
        return J.toarray() if dense else J

    def dense_jac(self, x: npt.ArrayLike, *args: Any) -> np.ndarray:
        """``∂F/∂x`` as an ndarray ``(m, n)`` (for hybr and lm)."""
        return self._jacobian(x, *args).toarray()

    def jac_sparsity(self, x: npt.ArrayLike, *args: Any) -> sps.csr_matrix:
        """The boolean pattern of ``∂F/∂x`` (``csr_matrix``, ``(m, n)``)."""
        return _pattern(self._jacobian(x, *args))

    def options(self, method: str) -> dict[str, Any]:
        """The keywords for ``root(x0=..., args=..., **options)`` or
        ``least_squares(x0=..., args=..., **options)``: ``fun``, ``method`` and,
        for methods that use one, ``jac`` (dense for hybr and lm)."""
        opts = {"fun": self.fun, "method": method}
        if method in _RESIDUAL_NO_JAC:
            return opts
        if method not in _RESIDUAL_JAC:
            raise _method_error("root/least_squares", method, set(_RESIDUAL_JAC) | _RESIDUAL_NO_JAC)
        opts["jac"] = self.jac if _RESIDUAL_JAC[method] else self.dense_jac
        return opts


def residual(F: Callable[..., Any], *, sparse: bool | None = None) -> Residual:
    """Adapt a vector function ``F(x, *args)`` (``(n,) -> (m,)``) to
    ``scipy.optimize.root`` and ``scipy.optimize.least_squares``.

    ``jac(x, *args)`` is the exact ``(m, n)`` Jacobian (sparse when its
    pattern is; ``least_squares`` then solves with LSMR), ``jac_sparsity`` its
    pattern, and ``options(method)`` the keywords for either solver.

    >>> import numpy as np, symjac as sj
    >>> from scipy.optimize import root, least_squares
    >>> F = lambda x, a: np.stack([x[0] ** 2 + x[1] ** 2 - a, x[0] - x[1]])
    >>> eqs = sj.scipy.residual(F)
    >>> np.round(root(x0=[1.0, 0.5], args=(2.0,), **eqs.options("hybr")).x, 6)
    array([1., 1.])
    >>> float(np.round(least_squares(x0=[1.0, 0.5], args=(2.0,), **eqs.options("trf")).cost, 12))
    0.0
    """
    return Residual(F, sparse)
