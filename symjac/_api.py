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
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

import numpy as np

from ._errors import ArgumentError, ArityError
from ._signature import DEFAULT, Signature, argnames, normalize_argnums
from ._signature import runtime_value as _runtime_value
from .diff import products
from .diff import tensor as tensor_products
from .ir.transforms import INPUT, KINDS, OUTPUT, Spec
from .ir.transforms import names as _names
from .runtime import dispatch, kernel, keys, store, templates
from .runtime.request import Request
from .show import display
from .trace import from_sympy as _from_sympy
from .trace import products as trace_products
from .trace import pytree
from .trace.symarray import is_traced
from .trace.tensor import TArray

if TYPE_CHECKING:
    from .runtime.kernel import KernelInfo
    from .runtime.program import Compiled
    from .runtime.store import KernelTable
    from .runtime.tensor import TensorProgram

#: what ``argnums`` and ``static_argnums`` take: a position, or a tuple (list) of positions
Argnums = int | Sequence[int]
#: what ``static_argnames`` takes: a parameter's name, or a tuple (list) of names
Argnames = str | Iterable[str]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _traced(value: object) -> bool:
    """A traced value of either tier."""
    return isinstance(value, TArray) or is_traced(value)


_PLAIN = {np.ndarray, float, int, np.float64, np.float32}
_ndarray = np.ndarray  # (one global lookup on the hot path)
_ANY_NUMBER = 2**30  # the arity bound of a function taking *args


def _remade(cls: type[Transform], fn: Callable[..., Any], kind: str, options: dict[str, Any]) -> Transform:
    return cls(fn, kind, **options)


def _check_static_keyword(fn_name: str, name: str, value: object) -> None:
    """A keyword option is part of the cache key, so it must have one (see ``runtime.keys``)."""
    try:
        keys.value_key(value)
    except keys.Unkeyable as exc:
        raise ArgumentError(
            f"{fn_name}'s keyword-only argument {name!r} is static (an option: part of the kernel cache "
            f"key), so it must be hashable or an array; got a {exc}. Pass a tuple instead of a list, a "
            "frozen dataclass or tuple of pairs instead of a dict, or arrays (runtime inputs)."
        ) from None


class Transform:
    """A function transformed by symjac, callable with NumPy arrays.

    Call it like the original function (``jvp``/``hvp`` take a trailing ``v``
    shaped like the input, ``vjp`` a trailing ``u`` shaped like the output).
    ``.symbolic(*args)`` returns the result as SymPy expressions and
    ``.source(*args)`` the generated kernel.

    Arguments: arrays and numbers (positional, or positional parameters given
    by keyword) are runtime inputs; containers of them (a dict of weights, a
    list of layers) come back differentiated in their own structure; values
    named by ``static_argnums`` / ``static_argnames`` are static (part of the
    cache key: a new value builds a new program).  Keyword-only parameters
    (after ``*``) are options: a number, string, tuple or None passed there is
    static, an array (or a container of arrays) is a runtime input that is not
    differentiated.  Parameters a call leaves out stay defaults.

    Results: the function may return an array, a number, or a container of
    them (a tuple, a dict, a named tuple, a list of arrays of different shapes,
    with ``None`` entries); every transform returns the same structure, one
    entry per output (a list of numbers or of same-shape arrays is one array,
    as NumPy reads it).
    """

    fn: Callable[..., Any]  #: what is transformed: a plain function, or the transform this one applies to
    kind: str  #: "jacobian", "grad", ... (``ir.transforms.KINDS``)
    root: Callable[..., Any]  #: the user's function, under every transform
    root_signature: Signature  #: its parameters
    n_extra: int  #: trailing vectors a call takes (``v`` of jvp, ``u`` of vjp)
    argnums: tuple[int, ...]  #: the differentiated positions (() for jit)
    tuple_argnums: bool  #: argnums given as a tuple: results are tuples, one per position
    static_argnums: frozenset[int]  #: static positions, from static_argnums and static_argnames
    static_kwnames: frozenset[str]  #: keyword-only parameters named in static_argnames
    spec: Spec
    request: Request
    __wrapped__: Callable[..., Any]
    _made_with: tuple[Callable[..., Any], str, dict[str, Any]]
    _table: KernelTable
    _structured: dict[tuple[frozenset[int], tuple], Request]
    _with_aux: bool
    _arity: range
    _n_positional: int
    _max_positional: int

    def __init__(self, fn: Callable[..., Any], kind: str, argnums: Argnums = 0, static_argnums: Argnums = (),
                 sparse: bool = False, format: str = "csr", has_aux: bool = False, with_value: bool = False,
                 static_argnames: Argnames = ()) -> None:
        # what pickling and copying keep (see __reduce__)
        self._made_with = (fn, kind, {"argnums": argnums, "static_argnums": static_argnums, "sparse": sparse,
                                      "format": format, "has_aux": has_aux, "with_value": with_value,
                                      "static_argnames": static_argnames})
        if not callable(fn):
            raise ArgumentError(f"sj.{kind} needs a callable; got {type(fn).__name__}.")
        if kind not in KINDS:
            raise ArgumentError(f"no transform {kind!r}; the transforms are {_names(lambda k: True)}.")
        record = KINDS[kind]
        static_argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        if isinstance(fn, Transform) and not fn.spec.transform.differentiates:
            # jit only compiles; a transform of it is the transform of its function
            given: tuple[Any, ...] = (
                tuple(static_argnums) if isinstance(static_argnums, (tuple, list)) else (static_argnums,)
            )
            static_argnums = tuple(sorted(set(tuple(fn.static_argnums) + given)))
            static_argnames += tuple(fn.static_kwnames)
            fn = fn.fn
        self.fn = fn
        self.kind = kind
        inner = fn if isinstance(fn, Transform) else None
        # (a plain function's own signature; a transform of a transform asks the inner one)
        self.root_signature = inner.root_signature if inner else Signature(fn)
        self.n_extra = record.n_extra
        n_primal = inner.n_params if inner else self.root_signature.n_params
        static = normalize_argnums(static_argnums, n_primal, "static_argnums")[0] if static_argnums != () else ()
        positions, self.static_kwnames = argnames(self.root_signature, static_argnames)
        self.static_kwnames |= inner.static_kwnames if inner else frozenset()
        self.static_argnums = frozenset(static) | positions | (inner.static_argnums if inner else frozenset())
        if not record.differentiates:
            self.argnums, self.tuple_argnums = (), False
        else:
            self.argnums, self.tuple_argnums = normalize_argnums(argnums, n_primal, "argnums")
            clash = self.static_argnums.intersection(self.argnums)
            if clash:
                names = self.root_signature.names
                which = f" ({names[min(clash)]})" if min(clash) < len(names) else ""
                raise ArgumentError(
                    f"argument {min(clash)}{which} is both differentiated (argnums) and static "
                    "(static_argnums or static_argnames); a static argument is a constant and has no derivative."
                )
        if format not in ("csr", "csc"):
            raise ArgumentError(f"format must be 'csr' or 'csc'; got {format!r}.")
        if sparse and not record.sparse:
            raise ArgumentError(f"sparse=True applies to {_names(lambda k: k.sparse)}, not {kind}.")
        if has_aux and not record.has_aux:
            raise ArgumentError(
                f"has_aux=True applies to grad, value_and_grad, jacobian, hessian, jvp and vjp, not {kind}.")
        self.spec = Spec(kind, self.argnums, self.tuple_argnums, self.n_extra, format if sparse else None,
                         bool(has_aux), bool(with_value))
        self.root = inner.root if inner else fn
        sig = self.root_signature
        self.request = Request(
            self.root,
            (self.spec,) + (inner.request.products if inner else ()),
            self.static_argnums,
            inner.request.params if inner else sig.names + sig.kwonly_names,
            getattr(self.root, "__name__", type(self.root).__name__).replace("<lambda>", "lambda"),
            call=inner.request.call if inner else (sig.call if sig.known and not sig.varargs else None),
        )
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                setattr(self, attr, getattr(fn, attr))
            except AttributeError:
                pass
        self.__wrapped__ = fn
        self._table = self.request.table  # (the hot path reads it first)
        self._structured = {}  # containers' structures -> the request taking their leaves
        self._with_aux = has_aux or with_value  # results to rebuild (an auxiliary output, the value)
        # calls with a number of positional arguments in this range need no
        # binding (defaults left out stay defaults)
        n = self.n_params
        self._arity = range(self.n_required, (n if n is not None else _ANY_NUMBER) + 1)
        if self.root_signature.needs_binding:  # a keyword-only parameter without a default: always bind
            self._arity = range(0)
        n = self.root_signature.n_params
        self._n_positional = n if n is not None else _ANY_NUMBER  # past it, keyword-only arguments
        self._max_positional = self._n_positional + self.n_extra

    def __reduce__(self) -> tuple[Callable[..., Transform], tuple[Any, ...]]:
        """Pickled and copied as what it was made from (the function and the
        transform's options): programs, kernels and tables are the process's
        own and are found again, or built, on the first call after loading.
        So transforms pass through multiprocessing, Dask and ``copy.deepcopy``
        (the function itself must pickle: a module-level function does)."""
        fn, kind, options = self._made_with
        return (_remade, (type(self), fn, kind, options))

    # ----- signature ---------------------------------------------------------------

    @property
    def n_params(self) -> int | None:
        n = self.fn.n_params if isinstance(self.fn, Transform) else self.root_signature.n_params
        return None if n is None else n + self.n_extra

    @property
    def n_required(self) -> int:
        inner = self.fn.n_required if isinstance(self.fn, Transform) else self.root_signature.n_required
        return inner + self.n_extra

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The arguments as the function's positional parameters, then its
        keyword-only ones (``Signature.bind``: defaults left out stay
        defaults), followed by the vector of a vector product."""
        kwargs = dict(kwargs)
        name = self.spec.transform.vector
        if self.n_extra and name in kwargs and name not in (*self.root_signature.names, *self.root_signature.kwonly_names):
            primal, extra = args, (kwargs.pop(name),)  # jvp(f)(x, v=t): the vector by its name
        else:
            n = len(args) - self.n_extra
            if n < 0:
                raise ArityError(
                    f"{self.kind} of {self.fn_name} takes the function's arguments followed by "
                    f"{name}; got only {len(args)} argument(s)."
                )
            primal, extra = args[:n], args[n:]
        if isinstance(self.fn, Transform):
            inner = self.fn.bind(primal, kwargs)
        else:
            inner = self.root_signature.bind(primal, kwargs)
        return inner + tuple(extra)

    def bind_primal(self, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> tuple[Any, ...]:
        """``args`` and ``kwargs`` (the function's own arguments, without a vector) bound."""
        kwargs = kwargs or {}
        if isinstance(self.fn, Transform):
            return self.fn.bind(args, kwargs)
        return self.root_signature.bind(args, kwargs)

    @property
    def fn_name(self) -> str:
        if isinstance(self.fn, Transform):
            return f"{self.fn.kind} of {self.fn.fn_name}"
        return self.root_signature.name

    # ----- calling ------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # the shortcut: one array (two arrays) with the shape and dtype of the
        # table's last such call is that call's key, so its program serves it
        # without the key and the lookup (after the guard check: a rebound
        # global drops it)
        table = self._table
        if table.guards is not None:
            store.check(table)
        # (a call with keyword-only arguments leaves its bound arguments there too: never
        # serve a positional call with more arguments than the function takes from them)
        if not kwargs and len(args) <= self._max_positional:
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
                break
        else:  # (plain values hold no default left out: only keyword-only ones can be static)
            if not kwargs or len(args) - self.n_extra <= self._n_positional:
                result = dispatch.call(self.request, args)
                if self._with_aux or (type(result) is tuple and self.request.container_outputs):
                    return self._rebuilt(result, (), dispatch.compiled_for(self.request, args))
                return result
        # containers of arrays, keyword-only arguments, defaults left out: a request of their own
        request, flat, structure = self._flattened(args, bool(kwargs))
        result = dispatch.call(request, flat)
        if structure or self._with_aux or (type(result) is tuple and request.container_outputs):
            return self._rebuilt(result, structure, dispatch.compiled_for(request, flat))
        return result

    # ----- containers of arrays (pytrees) ---------------------------------------------

    def _flattened(self, args: tuple[Any, ...], keywords: bool = True
                   ) -> tuple[Request, tuple[Any, ...], tuple]:
        """``(request, args, structure)``: container arguments (a dict of weights, a
        list of them, a named tuple) as tuples of their leaves, and the request that
        rebuilds them around its placeholders and treats this call's keyword options
        and defaults left out as static; ``self.request`` and ``args`` as they are
        when there is nothing of the kind.  ``keywords``: the call passed keywords
        (without them, ``args`` hold neither keyword options nor defaults left out)."""
        statics = self._call_statics(args) if keywords else frozenset()
        static = self.static_argnums | statics
        structure = tuple(pytree.flatten(a)[1] if k not in static and pytree.needs_structure(a) else None
                          for k, a in enumerate(args))
        if not any(s is not None for s in structure):
            structure = ()
            if not statics:
                return self.request, args, ()
        flat = tuple(tuple(pytree.flatten(a)[0]) if s is not None else a
                     for a, s in zip(args, structure, strict=True)) if structure else args
        key = (statics, structure)
        request = self._structured.get(key)
        if request is None:
            r = self.request
            request = self._structured[key] = Request(r.root, r.products, static, r.params, r.root_name,
                                                      structure, r.call)
        return request, flat, structure

    def _call_statics(self, args: tuple[Any, ...]) -> frozenset[int]:
        """This call's static positions besides ``static_argnums``: defaults it leaves
        out on its way to a later argument, and keyword-only arguments other than
        arrays (and containers of them) or named in ``static_argnames``."""
        sig, end = self.root_signature, len(args) - self.n_extra
        statics = {i for i in range(end) if args[i] is DEFAULT}
        n = sig.n_params
        if n is not None and end > n:
            for i, name in zip(range(n, end), sig.kwonly_names, strict=False):
                value = args[i]
                if value is DEFAULT or name in self.static_kwnames or not _runtime_value(value):
                    statics.add(i)
                    _check_static_keyword(self.fn_name, name, value)
        for spec in self.request.products:  # a differentiated argument the call leaves out
            for a in spec.argnums:
                if a >= end or args[a] is DEFAULT:
                    names = self.request.params
                    name = names[a] if a < len(names) else f"argument {a}"
                    raise ArgumentError(
                        f"argnums={spec.argnums if spec.tuple_argnums else spec.argnums[0]} differentiates "
                        f"{name!r}, which this call leaves to its default (a constant, with no derivative). "
                        f"Pass {name} to differentiate it."
                    )
        return frozenset(statics) - self.static_argnums

    def _rebuilt(self, result: Any, structure: tuple, compiled: Compiled | TensorProgram) -> Any:
        """``result`` with each differentiated container argument's per-leaf results
        put back into its container (``structure``: the outermost product's argument
        structure), the per-output results into the function's output container
        (``compiled.out_structure``), and an auxiliary output (``has_aux``) rebuilt
        from its leaves."""
        spec = self.spec
        if spec.has_aux or spec.with_value:
            if spec.with_value:
                head, main = result
            else:
                main, head = result
            if spec.has_aux:
                value, leaves = head if spec.with_value else (None, head)
                assert compiled.aux_structure is not None  # (a has_aux program records aux's structure)
                aux = pytree.unflatten(compiled.aux_structure, list(leaves))
                head = (value, aux) if spec.with_value else aux
            main = self._rebuilt_main(main, structure, compiled)
            return (head, main) if spec.with_value else (main, head)
        return self._rebuilt_main(result, structure, compiled)

    def _rebuilt_main(self, result: Any, structure: tuple, compiled: Compiled | TensorProgram) -> Any:
        spec, tree = self.spec, compiled.out_structure
        nesting = spec.transform.result  # (OUTPUT, INPUT, ...): how the result nests, outermost first
        if not nesting or (not structure and tree is None):
            return result
        if nesting == (OUTPUT,):
            return pytree.unflatten(tree, list(result)) if tree is not None else result
        shapes = [structure[a] if a < len(structure) else None for a in spec.argnums]

        def per_argnum(value: Any, levels: int) -> Any:
            """``levels`` input levels, outermost first: per argnum (a tuple with tuple argnums),
            a container argument's entries (one per leaf) rebuilt into its container."""
            if not levels:
                return value
            parts = list(value) if spec.tuple_argnums else [value]
            parts = [per_argnum(p, levels - 1) if s is None else
                     pytree.unflatten(s, [per_argnum(leaf, levels - 1) for leaf in p])
                     for p, s in zip(parts, shapes, strict=True)]
            return tuple(parts) if spec.tuple_argnums else parts[0]

        if nesting[0] == INPUT:
            return per_argnum(result, len(nesting))
        single = compiled.single_output
        outs = [per_argnum(o, len(nesting) - 1) for o in ([result] if single else list(result))]
        if tree is not None:  # outputs outer, arguments inner, as JAX's jacrev
            return pytree.unflatten(tree, outs)
        return outs[0] if single else tuple(outs)

    def _apply_traced(self, args: list[Any]) -> Any:
        """Inside another trace: the result as part of the caller's graph."""
        call = self.request.call
        if any(isinstance(a, TArray) or (isinstance(a, tuple) and any(isinstance(p, TArray) for p in a))
               for a in args):
            return trace_products.wrap(trace_products.apply_arrays(self.request.products, self.root, args,
                                                                   tensor_products.finish, call=call))
        return trace_products.apply(self.request.products, self.root, args, products.finish, call=call)

    def symbolic(self, *args: Any, captured: str = "symbols", **kwargs: Any) -> Any:
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
        request, flat, structure = self._flattened(self.bind(args, kwargs))
        return display.symbolic(request, flat, captured, self._rebuild_shown(structure))

    def sparsity(self, *args: Any, **kwargs: Any) -> Any:
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
        if not self.spec.transform.sparse:
            raise ArgumentError(f"sparsity() applies to {_names(lambda k: k.sparse)}, not {self.kind}.")
        sparse = self if self.spec.sparse else Transform(
            self.fn, self.kind, self.argnums if self.tuple_argnums else self.argnums[0],
            tuple(self.static_argnums), sparse=True, static_argnames=tuple(self.static_kwnames))
        # the sparse program for these shapes, from memory or built now (its kernel not started:
        # it compiles on its first call), so a second sparsity() or a call reuses it
        compiled = dispatch.compiled_for(*sparse._flattened(sparse.bind(args, kwargs))[:2], start=False)
        return templates.patterns(compiled.template)

    def info(self, *args: Any, **kwargs: Any) -> KernelInfo:
        """How calls with arguments shaped like ``args`` are served: a
        :class:`KernelInfo` with the tier (``"kernel"`` or ``"tape"``), the
        compile state and seconds, and the kernel's file.

        >>> import numpy as np, symjac as sj
        >>> sj.grad(lambda x: np.sum(x ** 2)).info(np.zeros(3)).tier in ("kernel", "tape")
        True
        """
        return dispatch.compiled_for(*self._flattened(self.bind(args, kwargs))[:2]).info()

    def compile(self, *args: Any, **kwargs: Any) -> KernelInfo:
        """Compile (or load from disk) the specialised kernel for these shapes
        now, waiting for it; returns its :class:`KernelInfo`.

        >>> import numpy as np, symjac as sj
        >>> sj.grad(lambda x: np.sum(x ** 2)).compile(np.zeros(3)).tier
        'kernel'
        """
        compiled = dispatch.compiled_for(*self._flattened(self.bind(args, kwargs))[:2])
        compiled.load_kernel()
        kernel.settle()  # a large kernel serves its quick code first: wait for the optimised code too
        return compiled.info()

    def source(self, *args: Any, llvm: bool = False, **kwargs: Any) -> str:
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

    def show(self, *args: Any, limit: int | None = display.DEFAULT_LIMIT, captured: str = "symbols",
             **kwargs: Any) -> display.Shown:
        """The result for arguments shaped like ``args`` with shared subexpressions
        named (``τ₁ = …``), readable at any size: ``sj.show(self, *args)``.

        >>> import numpy as np, symjac as sj
        >>> print(sj.hessian(lambda x: np.sum(x ** 3)).show(np.zeros(2)))
        hessian of lambda with respect to x, for x (2,)
          H 2×2: 2 nonzero entries (the other 2 are 0); 2 operations
          H[0, 0] = 6*x_0
          H[1, 1] = 6*x_1
        """
        request, flat, structure = self._flattened(self.bind(args, kwargs))
        return display.shown(request, flat, limit, captured, self._rebuild_shown(structure))

    def _rebuild_shown(self, structure: tuple) -> display.Rebuild:
        """How ``.show()`` and ``.symbolic()`` put a result into the containers of the
        function's arguments and output, as a call returns it (``display.Rebuild``)."""
        spec = self.spec

        def rebuild(result: Any, built: Any) -> Any:
            if not structure and built.out_structure is None and not (spec.has_aux or spec.with_value):
                return None
            return self._rebuilt(result, structure, built)
        return rebuild

    def __repr__(self) -> str:
        return f"<symjac {self.kind} of {self.fn_name}>"


def _options_checked(factory: Callable[_P, _R]) -> Callable[_P, _R]:
    """Refuse keyword options ``factory`` does not take with an ArgumentError
    that says which transform takes them (``sj.vjp(f, sparse=True)``)."""
    known = set(inspect.signature(factory).parameters)

    @functools.wraps(factory)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
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


@overload
def jit(fn: Callable[..., Any], *, static_argnums: Argnums = (),
        static_argnames: Argnames = ()) -> Transform: ...
@overload
def jit(fn: None = None, *, static_argnums: Argnums = (),
        static_argnames: Argnames = ()) -> Callable[[Callable[..., Any]], Transform]: ...
@_options_checked
def jit(fn: Callable[..., Any] | None = None, *, static_argnums: Argnums = (),
        static_argnames: Argnames = ()) -> Transform | Callable[[Callable[..., Any]], Transform]:
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

    ``static_argnums`` and ``static_argnames`` (as in JAX) name the arguments
    the trace depends on (a loop count, a mode string); keyword-only options
    are static anyway.  A function returning a container returns it:

    >>> def step(x, n, *, mode="sum"):
    ...     for _ in range(n):
    ...         x = np.sin(x)
    ...     return {"y": x, "total": np.sum(x) if mode == "sum" else np.max(x)}
    >>> sj.jit(step, static_argnames="n")(np.array([0.0, 1.0]), n=1, mode="max")["total"]
    np.float64(0.8414709848078965)
    """
    if fn is None:
        return lambda f: Transform(f, "jit", static_argnums=static_argnums, static_argnames=static_argnames)
    return Transform(fn, "jit", static_argnums=static_argnums, static_argnames=static_argnames)


@_options_checked
def jacobian(fn: Callable[..., Any], argnums: Argnums = 0, *, static_argnums: Argnums = (),
             static_argnames: Argnames = (), sparse: bool = False,
             format: str = "csr", has_aux: bool = False) -> Transform:
    """The Jacobian of ``fn`` with respect to argument(s) ``argnums``.

    For ``f: in_shape -> out_shape`` the result has shape
    ``out_shape + in_shape``: ``J[i..., j...] = ∂f[i...] / ∂x[j...]``.
    With ``argnums`` a tuple, a tuple with one Jacobian per argument.  For a
    ``fn`` returning a container (a tuple, a dict, ...) the same container with
    each output's Jacobian, and for a container argument (a dict of weights)
    each of those is a container like the argument: outputs outer, arguments
    inner, as ``jax.jacrev``.

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

    A dict of outputs of a dict argument gives a dict (per output) of dicts
    (per leaf of the argument):

    >>> J = sj.jacobian(lambda p: {"z": p["w"] * 2.0, "s": np.sum(p["w"] ** 2)})({"w": np.array([1.0, 3.0])})
    >>> J["s"]["w"], J["z"]["w"].shape
    (array([2., 6.]), (2, 2))

    With ``has_aux=True``, ``fn`` returns ``(value, aux)``: the result is
    ``(jacobian of value, aux)``, as in JAX.
    """
    return Transform(fn, "jacobian", argnums, static_argnums, sparse, format, has_aux,
                     static_argnames=static_argnames)


@_options_checked
def jvp(fn: Callable[..., Any], argnums: Argnums = 0, *, static_argnums: Argnums = (),
        static_argnames: Argnames = (), has_aux: bool = False) -> Transform:
    """The Jacobian-vector product ``J · v``: call as ``jvp(f)(*args, v)``.

    ``v`` has the shape of the differentiated argument (``in_shape``) and the
    result the shape of ``f``'s output: ``r[i] = Σ_j ∂f[i]/∂x[j] · v[j]``.
    It costs about one evaluation of ``f``; no Jacobian is formed.  For a
    container argument ``v`` is a container like it; for a function returning
    a container the result is one like it.

    >>> import numpy as np, symjac as sj
    >>> sj.jvp(lambda x: x ** 2)(np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    array([2., 4.])
    """
    return Transform(fn, "jvp", argnums, static_argnums, has_aux=has_aux, static_argnames=static_argnames)


@_options_checked
def vjp(fn: Callable[..., Any], argnums: Argnums = 0, *, static_argnums: Argnums = (),
        static_argnames: Argnames = (), has_aux: bool = False) -> Transform:
    """The vector-Jacobian product ``uᵀ · J``: call as ``vjp(f)(*args, u)``.

    ``u`` has the shape of ``f``'s output and the result the shape of the
    differentiated argument: ``g[j] = Σ_i u[i] · ∂f[i]/∂x[j]``.  This is what
    PyTorch's ``torch.autograd.grad(y, x, grad_outputs=u)`` computes.  For a
    function returning a container (``{"loss": l, "logits": z}``), ``u`` is a
    container like it, one array shaped like each output (``None`` where the
    output has ``None``).

    >>> import numpy as np, symjac as sj
    >>> x = np.array([1.0, 2.0, 3.0, 4.0])
    >>> sj.vjp(lambda x: np.outer(x, x))(x, np.ones((4, 4)))
    array([20., 20., 20., 20.])
    """
    return Transform(fn, "vjp", argnums, static_argnums, has_aux=has_aux, static_argnames=static_argnames)


@_options_checked
def grad(fn: Callable[..., Any], argnums: Argnums = 0, *, static_argnums: Argnums = (),
         static_argnames: Argnames = (), has_aux: bool = False) -> Transform:
    """The gradient of a scalar-valued ``fn``; the result is shaped like the argument.

    ``fn`` must return one scalar: a dict or tuple of outputs is refused with
    a NonScalarOutputError naming each of them (return the scalar and pass the
    rest with ``has_aux``).

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
    return Transform(fn, "grad", argnums, static_argnums, has_aux=has_aux, static_argnames=static_argnames)


@_options_checked
def value_and_grad(fn: Callable[..., Any], argnums: Argnums = 0, *, static_argnums: Argnums = (),
                   static_argnames: Argnames = (), has_aux: bool = False) -> Transform:
    """The value of a scalar-valued ``fn`` and its gradient, from one program:
    ``(value, gradient)``, or with ``has_aux=True`` ``((value, aux), gradient)``, as in JAX.

    >>> import numpy as np, symjac as sj
    >>> sj.value_and_grad(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    (np.float64(9.0), array([ 3., 12.]))
    """
    return Transform(fn, "grad", argnums, static_argnums, has_aux=has_aux, with_value=True,
                     static_argnames=static_argnames)


@_options_checked
def hessian(fn: Callable[..., Any], argnums: Argnums = 0, *, static_argnums: Argnums = (),
            static_argnames: Argnames = (), sparse: bool = False,
            format: str = "csr", has_aux: bool = False) -> Transform:
    """Second derivatives, shape ``out_shape + in_shape + in_shape``.

    With ``sparse=True``, a ``scipy.sparse`` matrix of shape
    ``(prod(out_shape) * prod(in_shape), prod(in_shape))``; for a scalar
    function only the upper triangle is computed and mirrored.

    >>> import numpy as np, symjac as sj
    >>> sj.hessian(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 2.0]))
    array([[4., 2.],
           [2., 0.]])

    With ``has_aux=True``, ``fn`` returns ``(value, aux)`` and the result is
    ``(hessian of value, aux)``, as in JAX.
    """
    return Transform(fn, "hessian", argnums, static_argnums, sparse, format, has_aux,
                     static_argnames=static_argnames)


@_options_checked
def hvp(fn: Callable[..., Any], argnums: Argnums = 0, *, static_argnums: Argnums = (),
        static_argnames: Argnames = ()) -> Transform:
    """The Hessian-vector product ``H · v`` of a scalar ``fn``: call as ``hvp(f)(*args, v)``.

    ``v`` and the result are shaped like the argument.  No Hessian is formed.

    >>> import numpy as np, symjac as sj
    >>> sj.hvp(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([4., 2.])
    """
    return Transform(fn, "hvp", argnums, static_argnums, static_argnames=static_argnames)


@_options_checked
def divergence(fn: Callable[..., Any], argnums: Argnums = 0, *, static_argnums: Argnums = (),
               static_argnames: Argnames = ()) -> Transform:
    """``Σ_i ∂f[i]/∂x[i]`` of a field whose output has its input's shape (a scalar).

    >>> import numpy as np, symjac as sj
    >>> float(sj.divergence(lambda x: x * x[0])(np.array([1.0, 2.0, 3.0])))  # 2x0 + x0 + x0
    4.0
    """
    return Transform(fn, "divergence", argnums, static_argnums, static_argnames=static_argnames)


@_options_checked
def laplacian(fn: Callable[..., Any], argnums: Argnums = 0, *, static_argnums: Argnums = (),
              static_argnames: Argnames = ()) -> Transform:
    """``Σ_i ∂²f/∂x[i]²`` of a scalar ``fn`` (the trace of its Hessian).

    >>> import numpy as np, symjac as sj
    >>> float(sj.laplacian(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0])))
    18.0
    """
    return Transform(fn, "laplacian", argnums, static_argnums, static_argnames=static_argnames)


@_options_checked
def from_sympy(exprs: Any, inputs: Any, params: Sequence[Any] = (), *,
               name: str | None = None) -> _from_sympy.SympyFunction:
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
