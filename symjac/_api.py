"""The public transforms: ``jit``, ``jacobian``, ``jvp``, ``vjp``, ``grad``,
``hessian``, ``hvp``, ``divergence`` and ``laplacian``.

Each returns a :class:`Transform`: a callable that takes the function's
arguments (plus ``v`` or ``u`` for the vector products) and returns NumPy
arrays, computed by a compiled kernel that is specialised on the shapes and
dtypes of the arguments.  Transforms compose (``jacobian(grad(f))`` is the
Hessian) and accept plain, undecorated functions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from ._errors import ArgumentError, ArityError
from .diff import products as _transforms
from .runtime import dispatch as _dispatch
from .show import display as _display
from .trace.symarray import is_traced

_EXTRA_NAME = {"jvp": "v", "vjp": "u", "hvp": "v"}
_PLAIN = {np.ndarray, float, int, np.float64, np.float32}


def _normalize_argnums(argnums, n_params: int | None, label: str) -> tuple[tuple[int, ...], bool]:
    is_tuple = isinstance(argnums, (tuple, list))
    items = tuple(argnums) if is_tuple else (argnums,)
    out = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise ArgumentError(f"{label} must be an int or a tuple of ints; got {argnums!r}.")
        a = int(a)
        if n_params is not None:
            if not -n_params <= a < n_params:
                raise ArgumentError(
                    f"{label}={argnums!r} is out of range: the function takes {n_params} "
                    f"argument{'s' if n_params != 1 else ''} (positions 0..{n_params - 1})."
                )
            a %= n_params
        out.append(a)
    if len(set(out)) != len(out):
        raise ArgumentError(f"{label}={argnums!r} repeats an argument.")
    return tuple(out), is_tuple


class _Signature:
    """Parameter names and binding rules of a plain function."""

    def __init__(self, fn: Callable):
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        self.params: list[inspect.Parameter] = []
        self.varargs = sig is None
        if sig is not None:
            for p in sig.parameters.values():
                if p.kind is p.VAR_POSITIONAL:
                    self.varargs = True
                elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    self.params.append(p)
        self.name = getattr(fn, "__name__", type(fn).__name__)

    @property
    def n_params(self) -> int | None:
        return None if self.varargs else len(self.params)

    @property
    def n_required(self) -> int:
        return sum(p.default is p.empty for p in self.params)

    def names(self, n: int) -> list[str]:
        names = [p.name for p in self.params[:n]]
        return names + [f"arg{i}" for i in range(len(names), n)]

    def bind(self, args: tuple, kwargs: dict) -> tuple:
        if self.varargs and not kwargs:
            return args
        n = len(self.params)
        if len(args) > n and not self.varargs:
            raise ArityError(
                f"{self.name} takes {n} positional argument{'s' if n != 1 else ''} "
                f"({', '.join(p.name for p in self.params)}) but got {len(args)}."
            )
        bound = list(args)
        # Parameters left to their defaults stay defaults (constants of the
        # trace, e.g. a ufunc's out=None); only values the caller passes are
        # runtime inputs.  Keyword arguments are placed by position, with the
        # defaults before them filled in.
        last = max((i for i, p in enumerate(self.params) if p.name in kwargs), default=len(args) - 1)
        for i, p in enumerate(self.params[len(args) :], start=len(args)):
            if p.name in kwargs:
                bound.append(kwargs.pop(p.name))
            elif p.default is not p.empty:
                if i > last:
                    continue
                bound.append(p.default)
            else:
                raise ArityError(
                    f"{self.name} is missing argument {p.name!r}: it takes "
                    f"({', '.join(q.name for q in self.params)}) and got {len(args)} "
                    "positional argument(s)."
                )
        if kwargs:
            raise ArityError(f"{self.name} got unexpected keyword argument(s) {sorted(kwargs)}.")
        return tuple(bound)


class Transform:
    """A function transformed by symjac, callable with NumPy arrays.

    Call it like the original function (``jvp``/``hvp`` take a trailing ``v``
    shaped like the input, ``vjp`` a trailing ``u`` shaped like the output).
    ``.symbolic(*args)`` returns the result as SymPy expressions and
    ``.source(*args)`` the generated kernel.
    """

    def __init__(self, fn: Callable, kind: str, argnums=0, static_argnums=(), sparse: bool = False,
                 format: str = "csr"):
        if not callable(fn):
            raise ArgumentError(f"sj.{kind} needs a callable; got {type(fn).__name__}.")
        if isinstance(fn, Transform) and fn.kind == "jit":
            # jit only compiles; a transform of it is the transform of its function
            static_argnums = tuple(fn.static_argnums) + (
                tuple(static_argnums) if isinstance(static_argnums, (tuple, list)) else (static_argnums,)
            )
            static_argnums = tuple(sorted(set(static_argnums)))
            fn = fn.fn
        self.fn = fn
        self.kind = kind
        inner = fn if isinstance(fn, Transform) else None
        self._signature = None if inner else _Signature(fn)
        self.n_extra = _transforms.EXTRA.get(kind, 0)
        n_primal = inner.n_params if inner else self._signature.n_params
        static = _normalize_argnums(static_argnums, n_primal, "static_argnums")[0] if static_argnums != () else ()
        self.static_argnums = frozenset(static) | (inner.static_argnums if inner else frozenset())
        if kind == "jit":
            self.argnums, self.tuple_argnums = (), False
        else:
            self.argnums, self.tuple_argnums = _normalize_argnums(argnums, n_primal, "argnums")
            clash = self.static_argnums.intersection(self.argnums)
            if clash:
                raise ArgumentError(
                    f"argument {min(clash)} is both differentiated (argnums) and static "
                    "(static_argnums); a static argument is a constant and has no derivative."
                )
        if format not in ("csr", "csc"):
            raise ArgumentError(f"format must be 'csr' or 'csc'; got {format!r}.")
        if sparse and kind not in ("jacobian", "hessian"):
            raise ArgumentError(f"sparse=True applies to jacobian and hessian, not {kind}.")
        self.spec = _transforms.Spec(kind, self.argnums, self.tuple_argnums, self.n_extra,
                                     format if sparse else None)
        self.root = inner.root if inner else fn
        chain_kind = f"{kind}_{format}" if sparse else kind
        self.chain = (chain_kind, self.argnums, self.tuple_argnums, tuple(sorted(self.static_argnums))) + (
            inner.chain if inner else ()
        )
        self.store = _dispatch.store_for(self.root, self.chain)
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                setattr(self, attr, getattr(fn, attr))
            except AttributeError:
                pass
        self.__wrapped__ = fn
        # calls with a number of positional arguments in this range need no
        # binding (defaults left out stay defaults)
        n = self.n_params
        self._arity = range(self.n_required, (n if n is not None else 1 << 30) + 1)

    # ----- signature ---------------------------------------------------------------

    @property
    def n_params(self) -> int | None:
        n = self.fn.n_params if isinstance(self.fn, Transform) else self._signature.n_params
        return None if n is None else n + self.n_extra

    @property
    def n_required(self) -> int:
        inner = self.fn.n_required if isinstance(self.fn, Transform) else self._signature.n_required
        return inner + self.n_extra

    def bind(self, args: tuple, kwargs: dict) -> tuple:
        n = len(args) - self.n_extra
        if n < 0:
            raise ArityError(
                f"{self.kind} of {self.fn_name} takes the function's arguments followed by "
                f"{_EXTRA_NAME[self.kind]}; got only {len(args)} argument(s)."
            )
        primal, extra = args[:n], args[n:]
        kwargs = dict(kwargs)
        if self.n_extra and _EXTRA_NAME[self.kind] in kwargs and not extra:
            extra = (kwargs.pop(_EXTRA_NAME[self.kind]),)
        inner = self.fn.bind(primal, kwargs) if isinstance(self.fn, Transform) else self._signature.bind(primal, kwargs)
        return inner + tuple(extra)

    def param_names(self, n: int) -> list[str]:
        n_primal = n - self.n_extra
        names = self.fn.param_names(n_primal) if isinstance(self.fn, Transform) else self._signature.names(n_primal)
        if self.n_extra:
            extra = _EXTRA_NAME[self.kind]
            while extra in names:
                extra += "_"
            names = names + [extra]
        return names

    @property
    def fn_name(self) -> str:
        if isinstance(self.fn, Transform):
            return f"{self.fn.kind} of {self.fn.fn_name}"
        return self._signature.name

    # ----- calling ------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        if kwargs or len(args) not in self._arity:
            args = self.bind(args, kwargs)
        for a in args:  # fast path: plain arrays and numbers are never traced
            if type(a) not in _PLAIN:
                if any(is_traced(a) or (isinstance(a, tuple) and any(map(is_traced, a))) for a in args):
                    return self.symbolic_apply(list(args), top=False)
                break
        return _dispatch.call(self, args)

    def symbolic_apply(self, args: list, top: bool):
        """Apply the transform to traced arguments (inside a trace)."""
        return _transforms.APPLY[self.kind](self.fn, args, self.spec, top)

    def symbolic(self, *args, **kwargs):
        """The result for arguments shaped like ``args``, as SymPy expressions.

        Symbols are named after the parameters (``x_0``, ``w_1_0``; a 0-d
        argument ``t`` is ``t``).  A 2-d result is a ``sympy.Matrix``, other
        shapes a ``sympy.Array``, a 0-d result a plain expression.
        :meth:`show` prints large results readably.

        >>> import numpy as np, symjac as sj
        >>> sj.jacobian(lambda x, w: np.sin(x) * w).symbolic(np.zeros(2), 3.0)
        Matrix([
        [w*cos(x_0),          0],
        [         0, w*cos(x_1)]])
        """
        args = self.bind(args, kwargs)
        built = _dispatch.build(self, args)
        return _display.to_sympy(built.result)

    def sparsity(self, *args, **kwargs):
        """The exact structural nonzero pattern of a Jacobian or Hessian for
        arguments shaped like ``args``, from the expression graph (nothing is
        evaluated): a boolean ``scipy.sparse`` matrix of the result flattened
        to 2-d, ``(prod(out_shape), prod(in_shape))`` (Hessians:
        ``(prod(out_shape) * prod(in_shape), prod(in_shape))``); tuples as the
        transform returns them.

        >>> import numpy as np, symjac as sj
        >>> sj.jacobian(lambda x: x[1:] - x[:-1]).sparsity(np.zeros(3)).toarray()
        array([[ True,  True, False],
               [False,  True,  True]])
        """
        if self.kind not in ("jacobian", "hessian"):
            raise ArgumentError(f"sparsity() applies to jacobian and hessian, not {self.kind}.")
        sparse = self if self.spec.sparse else Transform(
            self.fn, self.kind, self.argnums if self.tuple_argnums else self.argnums[0],
            tuple(self.static_argnums), sparse=True)
        built = _dispatch.build(sparse, sparse.bind(args, kwargs))

        def pattern(result):
            if isinstance(result, _transforms.SymSparse):
                return result.layout().pattern()
            return tuple(pattern(r) for r in result)

        return pattern(built.result)

    def info(self, *args, **kwargs):
        """How calls with arguments shaped like ``args`` are served: a
        :class:`KernelInfo` with the tier (``"kernel"`` or ``"tape"``), the
        compile state and seconds, and the kernel's file.

        >>> import numpy as np, symjac as sj
        >>> sj.grad(lambda x: np.sum(x ** 2)).info(np.zeros(3)).tier in ("kernel", "tape")
        True
        """
        return _dispatch.compiled_for(self, self.bind(args, kwargs)).info()

    def compile(self, *args, **kwargs):
        """Compile (or load from disk) the specialised kernel for these shapes
        now, waiting for it; returns its :class:`KernelInfo`.

        >>> import numpy as np, symjac as sj
        >>> sj.grad(lambda x: np.sum(x ** 2)).compile(np.zeros(3)).tier
        'kernel'
        """
        compiled = _dispatch.compiled_for(self, self.bind(args, kwargs))
        compiled.load_kernel()
        return compiled.info()

    def source(self, *args, llvm: bool = False, **kwargs) -> str:
        """The kernel generated for arguments shaped like ``args``, with its file path.

        The kernel is LLVM IR compiled by Numba; this shows the program it
        runs rendered as readable Python (runnable on NumPy arrays), or with
        ``llvm=True`` the LLVM IR the kernel's body is emitted as.  A ``str``
        that a REPL shows as text.

        >>> import numpy as np, symjac as sj
        >>> print(sj.grad(lambda x: np.sum(x ** 2)).source(np.zeros(2)))  # doctest: +ELLIPSIS
        # .../grad_of_lambda_f64_....py
        ...
        def grad_of_lambda_f64(x, out0):
            out0[0] = 2.0 * x[0]
            out0[1] = 2.0 * x[1]
        <BLANKLINE>
        >>> "fmul double" in sj.grad(lambda x: np.sum(x ** 2)).source(np.zeros(2), llvm=True)
        True
        """
        args = self.bind(args, kwargs)
        compiled = _dispatch.compiled_for(self, args)
        text = compiled.llvm_ir() if llvm else compiled.source
        return _display.Source(f"# {compiled.path}\n{text}")

    def show(self, *args, limit: int | None = _display.DEFAULT_LIMIT, **kwargs) -> _display.Shown:
        """The result for arguments shaped like ``args`` with shared subexpressions
        named (``τ₁ = …``), readable at any size: ``sj.show(self, *args)``.

        >>> import numpy as np, symjac as sj
        >>> print(sj.hessian(lambda x: np.sum(x ** 3)).show(np.zeros(2)))
        hessian of lambda with respect to x, for x (2,)
          H 2×2: 2 nonzero entries (the other 2 are 0); 2 operations
          H[0, 0] = 6*x_0
          H[1, 1] = 6*x_1
        """
        return _display.show(self, *args, limit=limit, **kwargs)

    # ----- naming -------------------------------------------------------------------

    def kernel_name(self, dtype) -> str:
        chain = "_of_".join(k for k in self.chain[0::4])
        base = "".join(c if c.isalnum() else "_" for c in self.root_name) or "fn"
        return f"{chain}_of_{base.strip('_') or 'fn'}_{np.dtype(dtype).kind}{np.dtype(dtype).itemsize * 8}"

    @property
    def root_name(self) -> str:
        return getattr(self.root, "__name__", type(self.root).__name__).replace("<lambda>", "lambda")

    def describe(self) -> str:
        """``"jacobian (argnums=0) of grad of rosen"``."""
        what = self.kind
        if self.kind != "jit":
            what += f" (argnums={self.argnums if self.tuple_argnums else self.argnums[0]})"
        inner = self.fn.describe() if isinstance(self.fn, Transform) else self.root_name
        return f"{what} of {inner}"

    def __repr__(self) -> str:
        return f"<symjac {self.kind} of {self.fn_name}>"


# ----- factories --------------------------------------------------------------------------


def jit(fn: Callable | None = None, *, static_argnums=()) -> Transform:
    """Compile ``fn`` for fast repeated evaluation (values only, no derivative).

    Usable as ``@sj.jit``, ``@sj.jit(static_argnums=1)`` or ``sj.jit(f)``.
    The result takes and returns NumPy arrays; a kernel is compiled per input
    shapes and dtypes, and reused for new values of the same shapes.

    >>> import numpy as np, symjac as sj
    >>> @sj.jit
    ... def f(x):
    ...     return np.sin(x) * x
    >>> f(np.array([0.0, 1.0]))
    array([0.        , 0.84147098])
    """
    if fn is None:
        return lambda f: Transform(f, "jit", static_argnums=static_argnums)
    return Transform(fn, "jit", static_argnums=static_argnums)


def jacobian(fn: Callable, argnums=0, *, static_argnums=(), sparse: bool = False, format: str = "csr") -> Transform:
    """The Jacobian of ``fn`` with respect to argument(s) ``argnums``.

    For ``f: in_shape -> out_shape`` the result has shape
    ``out_shape + in_shape``: ``J[i..., j...] = ∂f[i...] / ∂x[j...]``.
    With ``argnums`` a tuple, a tuple with one Jacobian per argument; with a
    tuple-valued ``fn``, a tuple with one entry per output.

    With ``sparse=True`` the result is a ``scipy.sparse`` matrix (``format``
    ``"csr"`` or ``"csc"``) of the Jacobian flattened to 2-d,
    ``(prod(out_shape), prod(in_shape))``, whose pattern is fixed per input
    shapes (solvers can reuse their symbolic factorisation); only the
    nonzeros are built and computed, and no dense array is ever allocated.
    ``.sparsity(*args)`` gives the pattern alone.

    >>> import numpy as np, symjac as sj
    >>> sj.jacobian(lambda x: x ** 2)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    >>> sj.jacobian(lambda x: x ** 2, sparse=True)(np.array([1.0, 2.0])).nnz
    2
    """
    return Transform(fn, "jacobian", argnums, static_argnums, sparse, format)


def jvp(fn: Callable, argnums=0, *, static_argnums=()) -> Transform:
    """The Jacobian-vector product ``J · v``: call as ``jvp(f)(*args, v)``.

    ``v`` has the shape of the differentiated argument (``in_shape``) and the
    result the shape of ``f``'s output: ``r[i] = Σ_j ∂f[i]/∂x[j] · v[j]``.
    It costs about one evaluation of ``f``; no Jacobian is formed.

    >>> import numpy as np, symjac as sj
    >>> sj.jvp(lambda x: x ** 2)(np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    array([2., 4.])
    """
    return Transform(fn, "jvp", argnums, static_argnums)


def vjp(fn: Callable, argnums=0, *, static_argnums=()) -> Transform:
    """The vector-Jacobian product ``uᵀ · J``: call as ``vjp(f)(*args, u)``.

    ``u`` has the shape of ``f``'s output and the result the shape of the
    differentiated argument: ``g[j] = Σ_i u[i] · ∂f[i]/∂x[j]``.  This is what
    PyTorch's ``torch.autograd.grad(y, x, grad_outputs=u)`` computes.

    >>> import numpy as np, symjac as sj
    >>> x = np.array([1.0, 2.0, 3.0, 4.0])
    >>> sj.vjp(lambda x: np.outer(x, x))(x, np.ones((4, 4)))
    array([20., 20., 20., 20.])
    """
    return Transform(fn, "vjp", argnums, static_argnums)


def grad(fn: Callable, argnums=0, *, static_argnums=()) -> Transform:
    """The gradient of a scalar-valued ``fn``; the result is shaped like the argument.

    >>> import numpy as np, symjac as sj
    >>> sj.grad(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    array([ 3., 12.])
    """
    return Transform(fn, "grad", argnums, static_argnums)


def hessian(fn: Callable, argnums=0, *, static_argnums=(), sparse: bool = False, format: str = "csr") -> Transform:
    """Second derivatives, shape ``out_shape + in_shape + in_shape``.

    With ``sparse=True``, a ``scipy.sparse`` matrix of shape
    ``(prod(out_shape) * prod(in_shape), prod(in_shape))``; for a scalar
    function only the upper triangle is computed and mirrored.

    >>> import numpy as np, symjac as sj
    >>> sj.hessian(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 2.0]))
    array([[4., 2.],
           [2., 0.]])
    """
    return Transform(fn, "hessian", argnums, static_argnums, sparse, format)


def hvp(fn: Callable, argnums=0, *, static_argnums=()) -> Transform:
    """The Hessian-vector product ``H · v`` of a scalar ``fn``: call as ``hvp(f)(*args, v)``.

    ``v`` and the result are shaped like the argument.  No Hessian is formed.

    >>> import numpy as np, symjac as sj
    >>> sj.hvp(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([4., 2.])
    """
    return Transform(fn, "hvp", argnums, static_argnums)


def divergence(fn: Callable, argnums=0, *, static_argnums=()) -> Transform:
    """``Σ_i ∂f[i]/∂x[i]`` of a field whose output has its input's shape (a scalar).

    >>> import numpy as np, symjac as sj
    >>> float(sj.divergence(lambda x: x * x[0])(np.array([1.0, 2.0, 3.0])))  # 2x0 + x0 + x0
    4.0
    """
    return Transform(fn, "divergence", argnums, static_argnums)


def laplacian(fn: Callable, argnums=0, *, static_argnums=()) -> Transform:
    """``Σ_i ∂²f/∂x[i]²`` of a scalar ``fn`` (the trace of its Hessian).

    >>> import numpy as np, symjac as sj
    >>> float(sj.laplacian(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0])))
    18.0
    """
    return Transform(fn, "laplacian", argnums, static_argnums)
