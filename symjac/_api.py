"""The public transforms: ``jit``, ``jacobian``, ``jvp``, ``vjp``, ``grad``,
``hessian``, ``hvp``, ``divergence`` and ``laplacian``.

Each returns a :class:`Transform`: a callable that takes the function's
arguments (plus ``v`` or ``u`` for the vector products) and returns NumPy
arrays, computed by a compiled kernel that is specialised on the shapes and
dtypes of the arguments.  Transforms compose (``jacobian(grad(f))`` is the
Hessian) and accept plain, undecorated functions.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import numpy as np

from ._errors import ArgumentError, ArityError
from ._signature import Signature, normalize_argnums
from .backend import native
from .diff import products
from .diff import tensor as tensor_products
from .diff.products import EXTRA, VECTOR, Spec
from .runtime import dispatch, layout, store
from .runtime.request import Request
from .show import display
from .trace import from_sympy as _from_sympy
from .trace import pytree
from .trace.symarray import is_traced
from .trace.tensor import TArray


def _traced(value) -> bool:
    """A traced value of either tier."""
    return isinstance(value, TArray) or is_traced(value)


_PLAIN = {np.ndarray, float, int, np.float64, np.float32}
_ndarray = np.ndarray  # (one global lookup on the hot path)
_ANY_NUMBER = 2**30  # the arity bound of a function taking *args


class Transform:
    """A function transformed by symjac, callable with NumPy arrays.

    Call it like the original function (``jvp``/``hvp`` take a trailing ``v``
    shaped like the input, ``vjp`` a trailing ``u`` shaped like the output).
    ``.symbolic(*args)`` returns the result as SymPy expressions and
    ``.source(*args)`` the generated kernel.
    """

    def __init__(self, fn: Callable, kind: str, argnums=0, static_argnums=(), sparse: bool = False,
                 format: str = "csr", has_aux: bool = False, with_value: bool = False):
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
        self._signature = None if inner else Signature(fn)
        self.n_extra = EXTRA.get(kind, 0)
        n_primal = inner.n_params if inner else self._signature.n_params
        static = normalize_argnums(static_argnums, n_primal, "static_argnums")[0] if static_argnums != () else ()
        self.static_argnums = frozenset(static) | (inner.static_argnums if inner else frozenset())
        if kind == "jit":
            self.argnums, self.tuple_argnums = (), False
        else:
            self.argnums, self.tuple_argnums = normalize_argnums(argnums, n_primal, "argnums")
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
        if has_aux and kind not in ("grad", "jacobian", "jvp", "vjp"):
            raise ArgumentError(f"has_aux=True applies to grad, value_and_grad, jacobian, jvp and vjp, not {kind}.")
        self.spec = Spec(kind, self.argnums, self.tuple_argnums, self.n_extra, format if sparse else None,
                         bool(has_aux), bool(with_value))
        self.root = inner.root if inner else fn
        self.request = Request(
            self.root,
            (self.spec,) + (inner.request.products if inner else ()),
            self.static_argnums,
            inner.request.params if inner else self._signature.names,
            getattr(self.root, "__name__", type(self.root).__name__).replace("<lambda>", "lambda"),
        )
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                setattr(self, attr, getattr(fn, attr))
            except AttributeError:
                pass
        self.__wrapped__ = fn
        self._table = self.request.table  # (the hot path reads it first)
        self._structured: dict = {}  # containers' structures -> the request taking their leaves
        self._with_aux = has_aux or with_value  # results to rebuild (an auxiliary output, the value)
        # calls with a number of positional arguments in this range need no
        # binding (defaults left out stay defaults)
        n = self.n_params
        self._arity = range(self.n_required, (n if n is not None else _ANY_NUMBER) + 1)

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
        """The arguments as the function's positional parameters (defaults
        left out stay defaults), followed by the vector of a vector product."""
        n = len(args) - self.n_extra
        if n < 0:
            raise ArityError(
                f"{self.kind} of {self.fn_name} takes the function's arguments followed by "
                f"{VECTOR[self.kind]}; got only {len(args)} argument(s)."
            )
        primal, extra = args[:n], args[n:]
        kwargs = dict(kwargs)
        if self.n_extra and VECTOR[self.kind] in kwargs and not extra:
            extra = (kwargs.pop(VECTOR[self.kind]),)
        inner = self.fn.bind(primal, kwargs) if isinstance(self.fn, Transform) else self._signature.bind(primal, kwargs)
        return inner + tuple(extra)

    def bind_primal(self, args: tuple) -> tuple:
        """``args`` (the function's own arguments, without a vector) bound."""
        return self.fn.bind(args, {}) if isinstance(self.fn, Transform) else self._signature.bind(args, {})

    @property
    def fn_name(self) -> str:
        if isinstance(self.fn, Transform):
            return f"{self.fn.kind} of {self.fn.fn_name}"
        return self._signature.name

    # ----- calling ------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        # the shortcut: one array (two arrays) with the shape and dtype of the
        # table's last such call is that call's key, so its program serves it
        # without the key and the lookup (after the guard check: a rebound
        # global drops it)
        table = self._table
        if table.guards is not None:
            store.check(table)
        if not kwargs:
            if len(args) == 1:
                last = table.last
                if last is not None:
                    a = args[0]
                    if type(a) is _ndarray and a.shape == last[0] and a.dtype is last[1]:
                        out = last[2].run_one(a)
                        if out is not None:
                            return out
            elif len(args) == 2:  # the same for two arrays: a product and its vector
                last = table.last2
                if last is not None:
                    a, b = args
                    if (type(a) is _ndarray and type(b) is _ndarray and a.shape == last[0] and a.dtype is last[1]
                            and b.shape == last[2] and b.dtype is last[3]):
                        out = last[4].run_two(a, b)
                        if out is not None:
                            return out
        if kwargs or len(args) not in self._arity:
            args = self.bind(args, kwargs)
        for a in args:  # fast path: plain arrays and numbers are never traced
            if type(a) not in _PLAIN:
                if any(_traced(a) or (pytree.is_container(a) and any(map(_traced, pytree.flatten(a)[0])))
                       for a in args):
                    return self._apply_traced(list(args))
                request, flat, structure = self._flattened(args)
                if request is not self.request:
                    result = dispatch.call(request, flat)
                    return self._rebuilt(result, structure, dispatch.compiled_for(request, flat))
                break
        if self._with_aux:
            return self._rebuilt(dispatch.call(self.request, args), (), dispatch.compiled_for(self.request, args))
        return dispatch.call(self.request, args)

    # ----- containers of arrays (pytrees) ---------------------------------------------

    def _flattened(self, args: tuple) -> tuple[Request, tuple, tuple]:
        """``(request, args, structure)``: container arguments (a dict of weights, a
        list of them, a named tuple) as tuples of their leaves, and the request that
        rebuilds them around its placeholders; ``self.request`` and ``args`` as they
        are when no argument is a container."""
        structure = tuple(pytree.flatten(a)[1] if k not in self.static_argnums and pytree.needs_structure(a) else None
                          for k, a in enumerate(args))
        if not any(s is not None for s in structure):
            return self.request, args, ()
        flat = tuple(tuple(pytree.flatten(a)[0]) if s is not None else a for a, s in zip(args, structure, strict=True))
        request = self._structured.get(structure)
        if request is None:
            r = self.request
            request = self._structured[structure] = Request(r.root, r.products, r.static_argnums, r.params,
                                                            r.root_name, structure)
        return request, flat, structure

    def _rebuilt(self, result, structure: tuple, compiled):
        """``result`` with each differentiated container argument's per-leaf results
        put back into its container (the outermost product's argument structure),
        and an auxiliary output (``has_aux``) rebuilt from its leaves."""
        spec = self.spec
        if spec.has_aux or spec.with_value:
            if spec.with_value:
                head, main = result
            else:
                main, head = result
            if spec.has_aux:
                value, leaves = head if spec.with_value else (None, head)
                aux = pytree.unflatten(compiled.aux_structure, list(leaves))
                head = (value, aux) if spec.with_value else aux
            main = self._rebuilt_main(main, structure, compiled.single_output) if structure else main
            return (head, main) if spec.with_value else (main, head)
        return self._rebuilt_main(result, structure, compiled.single_output)

    def _rebuilt_main(self, result, structure: tuple, single_output: bool):
        spec = self.spec
        if spec.kind in ("jit", "jvp", "divergence", "laplacian"):
            return result
        shapes = [structure[a] if a < len(structure) else None for a in spec.argnums]

        def per_argnum(value):
            parts = list(value) if spec.tuple_argnums else [value]
            parts = [p if s is None else pytree.unflatten(s, p) for p, s in zip(parts, shapes, strict=True)]
            return tuple(parts) if spec.tuple_argnums else parts[0]

        if spec.kind in ("grad", "vjp", "hvp"):
            return per_argnum(result)
        single = single_output
        outs = [result] if single else list(result)
        if spec.kind == "jacobian":
            outs = [per_argnum(o) for o in outs]
        else:  # hessian: [argnum][argnum], each a container's per-leaf tuple where it is one
            def columns(row):  # one row: per second argnum
                return per_argnum(row)

            def hessian(o):
                rows = list(o) if spec.tuple_argnums else [o]
                fixed = [columns(r) if s is None else pytree.unflatten(s, [columns(x) for x in r])
                         for r, s in zip(rows, shapes, strict=True)]
                return tuple(fixed) if spec.tuple_argnums else fixed[0]
            outs = [hessian(o) for o in outs]
        return outs[0] if single else tuple(outs)

    def _apply_traced(self, args: list):
        """Inside another trace: the result as part of the caller's graph."""
        if any(isinstance(a, TArray) or (isinstance(a, tuple) and any(isinstance(p, TArray) for p in a))
               for a in args):
            return tensor_products.wrap(tensor_products.apply(self.request.products, self.root, args))
        return products.apply(self.request.products, self.root, args)

    def symbolic(self, *args, captured: str = "symbols", **kwargs):
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

        Arrays the function reads from its objects, globals and closures
        (``self.W``) are inputs of the program, shown as symbols named after
        them; ``captured="values"`` shows their current values instead:

        >>> W = np.array([[2.0, 0.0], [1.0, 3.0]])
        >>> sj.jacobian(lambda x: W @ x ** 2).symbolic(np.zeros(2))
        Matrix([
        [2*W_0_0*x_0, 2*W_0_1*x_1],
        [2*W_1_0*x_0, 2*W_1_1*x_1]])
        >>> sj.jacobian(lambda x: W @ x ** 2).symbolic(np.zeros(2), captured="values")
        Matrix([
        [4*x_0,       0],
        [2*x_0, 6*x_1]])
        """
        request, flat, _ = self._flattened(self.bind(args, kwargs))
        return display.symbolic(request, flat, captured)

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
        # the sparse program for these shapes, from memory or built now (its kernel not started:
        # it compiles on its first call), so a second sparsity() or a call reuses it
        compiled = dispatch.compiled_for(sparse.request, sparse.bind(args, kwargs), start=False)
        return layout.patterns(compiled.template)

    def info(self, *args, **kwargs):
        """How calls with arguments shaped like ``args`` are served: a
        :class:`KernelInfo` with the tier (``"kernel"`` or ``"tape"``), the
        compile state and seconds, and the kernel's file.

        >>> import numpy as np, symjac as sj
        >>> sj.grad(lambda x: np.sum(x ** 2)).info(np.zeros(3)).tier in ("kernel", "tape")
        True
        """
        return dispatch.compiled_for(*self._flattened(self.bind(args, kwargs))[:2]).info()

    def compile(self, *args, **kwargs):
        """Compile (or load from disk) the specialised kernel for these shapes
        now, waiting for it; returns its :class:`KernelInfo`.

        >>> import numpy as np, symjac as sj
        >>> sj.grad(lambda x: np.sum(x ** 2)).compile(np.zeros(3)).tier
        'kernel'
        """
        compiled = dispatch.compiled_for(*self._flattened(self.bind(args, kwargs))[:2])
        compiled.load_kernel()
        native.settle()  # a large kernel serves its quick code first: wait for the optimised code too
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
        compiled = dispatch.compiled_for(*self._flattened(self.bind(args, kwargs))[:2])
        text = compiled.llvm_ir() if llvm else compiled.source
        return display.Source(text if compiled.path is None else f"# {compiled.path}\n{text}")

    def show(self, *args, limit: int | None = display.DEFAULT_LIMIT, captured: str = "symbols",
             **kwargs) -> display.Shown:
        """The result for arguments shaped like ``args`` with shared subexpressions
        named (``τ₁ = …``), readable at any size: ``sj.show(self, *args)``.

        >>> import numpy as np, symjac as sj
        >>> print(sj.hessian(lambda x: np.sum(x ** 3)).show(np.zeros(2)))
        hessian of lambda with respect to x, for x (2,)
          H 2×2: 2 nonzero entries (the other 2 are 0); 2 operations
          H[0, 0] = 6*x_0
          H[1, 1] = 6*x_1
        """
        request, flat, _ = self._flattened(self.bind(args, kwargs))
        return display.shown(request, flat, limit, captured)

    def __repr__(self) -> str:
        return f"<symjac {self.kind} of {self.fn_name}>"


def _options_checked(factory: Callable) -> Callable:
    """Refuse keyword options ``factory`` does not take with an ArgumentError
    that says which transform takes them (``sj.vjp(f, sparse=True)``)."""
    known = set(inspect.signature(factory).parameters)

    @functools.wraps(factory)
    def checked(*args, **kwargs):
        unknown = sorted(set(kwargs) - known)
        if unknown:
            hint = (" sparse=True (and format) apply to sj.jacobian and sj.hessian, whose results are "
                    "matrices; the vector products already compute only what they return."
                    if set(unknown) & {"sparse", "format"} else "")
            raise ArgumentError(
                f"sj.{factory.__name__} takes no option {unknown[0]!r}; its options are "
                f"{', '.join(sorted(known - {'fn'}))}.{hint}"
            )
        return factory(*args, **kwargs)

    return checked


# ----- factories --------------------------------------------------------------------------


@_options_checked
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


@_options_checked
def jacobian(fn: Callable, argnums=0, *, static_argnums=(), sparse: bool = False, format: str = "csr",
             has_aux: bool = False) -> Transform:
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

    With ``has_aux=True``, ``fn`` returns ``(value, aux)``: the result is
    ``(jacobian of value, aux)``, as in JAX.
    """
    return Transform(fn, "jacobian", argnums, static_argnums, sparse, format, has_aux)


@_options_checked
def jvp(fn: Callable, argnums=0, *, static_argnums=(), has_aux: bool = False) -> Transform:
    """The Jacobian-vector product ``J · v``: call as ``jvp(f)(*args, v)``.

    ``v`` has the shape of the differentiated argument (``in_shape``) and the
    result the shape of ``f``'s output: ``r[i] = Σ_j ∂f[i]/∂x[j] · v[j]``.
    It costs about one evaluation of ``f``; no Jacobian is formed.

    >>> import numpy as np, symjac as sj
    >>> sj.jvp(lambda x: x ** 2)(np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    array([2., 4.])
    """
    return Transform(fn, "jvp", argnums, static_argnums, has_aux=has_aux)


@_options_checked
def vjp(fn: Callable, argnums=0, *, static_argnums=(), has_aux: bool = False) -> Transform:
    """The vector-Jacobian product ``uᵀ · J``: call as ``vjp(f)(*args, u)``.

    ``u`` has the shape of ``f``'s output and the result the shape of the
    differentiated argument: ``g[j] = Σ_i u[i] · ∂f[i]/∂x[j]``.  This is what
    PyTorch's ``torch.autograd.grad(y, x, grad_outputs=u)`` computes.

    >>> import numpy as np, symjac as sj
    >>> x = np.array([1.0, 2.0, 3.0, 4.0])
    >>> sj.vjp(lambda x: np.outer(x, x))(x, np.ones((4, 4)))
    array([20., 20., 20., 20.])
    """
    return Transform(fn, "vjp", argnums, static_argnums, has_aux=has_aux)


@_options_checked
def grad(fn: Callable, argnums=0, *, static_argnums=(), has_aux: bool = False) -> Transform:
    """The gradient of a scalar-valued ``fn``; the result is shaped like the argument.

    >>> import numpy as np, symjac as sj
    >>> sj.grad(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    array([ 3., 12.])

    With ``has_aux=True``, ``fn`` returns ``(value, aux)`` (aux: arrays, numbers,
    or containers of them) and the result is ``(gradient, aux)``, as in JAX:

    >>> g, aux = sj.grad(lambda x: (np.sum(x ** 2), {"norm": np.sqrt(np.sum(x ** 2))}),
    ...                  has_aux=True)(np.array([3.0, 4.0]))
    >>> g, aux["norm"]
    (array([6., 8.]), np.float64(5.0))
    """
    return Transform(fn, "grad", argnums, static_argnums, has_aux=has_aux)


@_options_checked
def value_and_grad(fn: Callable, argnums=0, *, static_argnums=(), has_aux: bool = False) -> Transform:
    """The value of a scalar-valued ``fn`` and its gradient, from one program:
    ``(value, gradient)``, or with ``has_aux=True`` ``((value, aux), gradient)``, as in JAX.

    >>> import numpy as np, symjac as sj
    >>> sj.value_and_grad(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    (np.float64(9.0), array([ 3., 12.]))
    """
    return Transform(fn, "grad", argnums, static_argnums, has_aux=has_aux, with_value=True)


@_options_checked
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


@_options_checked
def hvp(fn: Callable, argnums=0, *, static_argnums=()) -> Transform:
    """The Hessian-vector product ``H · v`` of a scalar ``fn``: call as ``hvp(f)(*args, v)``.

    ``v`` and the result are shaped like the argument.  No Hessian is formed.

    >>> import numpy as np, symjac as sj
    >>> sj.hvp(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([4., 2.])
    """
    return Transform(fn, "hvp", argnums, static_argnums)


@_options_checked
def divergence(fn: Callable, argnums=0, *, static_argnums=()) -> Transform:
    """``Σ_i ∂f[i]/∂x[i]`` of a field whose output has its input's shape (a scalar).

    >>> import numpy as np, symjac as sj
    >>> float(sj.divergence(lambda x: x * x[0])(np.array([1.0, 2.0, 3.0])))  # 2x0 + x0 + x0
    4.0
    """
    return Transform(fn, "divergence", argnums, static_argnums)


@_options_checked
def laplacian(fn: Callable, argnums=0, *, static_argnums=()) -> Transform:
    """``Σ_i ∂²f/∂x[i]²`` of a scalar ``fn`` (the trace of its Hessian).

    >>> import numpy as np, symjac as sj
    >>> float(sj.laplacian(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0])))
    18.0
    """
    return Transform(fn, "laplacian", argnums, static_argnums)


@_options_checked
def from_sympy(exprs, inputs, params=(), *, name: str | None = None) -> _from_sympy.SympyFunction:
    """A function ``f(x, *params)`` computing SymPy expressions, for every symjac transform.

    Args:
        exprs: the outputs: an expression (a 0-d result), a list or nested
            list, a ``Matrix`` (a column vector ``(n, 1)`` gives shape
            ``(n,)``) or ``Array``; a *tuple* of those gives several outputs,
            as a NumPy function returning a tuple does.
        inputs: the symbols of the first argument ``x``: a symbol (``x`` is a
            scalar) or a list / Matrix of them (``x`` has that shape).
            Functions of time (``q(t)``, ``q(t).diff(t)``) count as symbols.
        params: one entry per further argument, each a symbol (a scalar
            argument) or a list / Matrix of symbols (an array argument).
        name: the function's name in kernels and messages.

    Returns:
        A callable ``f(x, *params)`` returning arrays shaped like ``exprs``:
        compiled when called with numbers, part of the trace when called
        inside a traced function, and accepted by ``jacobian``, ``jvp``,
        ``vjp``, ``hessian``, ``vmap``, ... like any NumPy function.

    >>> import numpy as np, sympy as sp, symjac as sj
    >>> a, b, k = sp.symbols("a b k")
    >>> f = sj.from_sympy([k * sp.sin(a) * b, a ** 2], [a, b], params=[k])
    >>> f(np.array([0.0, 2.0]), 3.0)
    array([0., 0.])
    >>> sj.jacobian(f)(np.array([0.0, 2.0]), 3.0)
    array([[6., 0.],
           [0., 0.]])
    """
    return _from_sympy.SympyFunction(exprs, inputs, params, name, compile=jit)
