"""The ``symjac`` command line: ``symjac show``, ``symjac demo``, ``symjac cache info|clear``.

Built on :mod:`argparse` (no dependency beyond the standard library); each
subcommand's ``--help`` lists every option with an example.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import inspect
import shutil
import sys
from pathlib import Path

from symjac.ir.transforms import RECORDS
from symjac.ir.transforms import names as _names

#: ``--what``: each transform by its record's name there ("values" for jit)
WHAT = {k.what: k for k in RECORDS}

SHOW_EPILOG = """\
examples:
  symjac show examples/print_symbolic.py:layer --arg x=3 --arg w=3,2
  symjac show examples/print_symbolic.py:layer --arg x=3 --arg w=3,2 --wrt w --what vjp
  symjac show mymodule:energy --arg r=4,3 --what hessian --sparsity
  symjac show mymodule:rhs --arg t=scalar --arg y=3 --static k=0.04 --wrt y --latex

SHAPE is a comma-separated list of sizes: 3 is a vector of 3, 2,3 a 2x3 matrix,
'scalar' (or '()') a single number. Only shapes matter: the result is symbolic,
with symbols named after the parameters (x_0, w_1_0).
"""


def _load(target: str):
    """``module:function`` or ``path/to/file.py:function`` -> the function."""
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"symjac show: expected MODULE:FUNCTION (e.g. mymodule:f or path/to/file.py:f); "
                         f"got {target!r}.")
    if module_name.endswith(".py") or "/" in module_name:
        path = Path(module_name)
        if not path.is_file():
            raise SystemExit(f"symjac show: no file {module_name!r}; give a .py file that exists, or a module name.")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.resolve().parent))
        spec.loader.exec_module(module)
    else:
        sys.path.insert(0, ".")
        module = importlib.import_module(module_name)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise SystemExit(f"symjac show: {module_name} has no {attr!r}; its functions are: {', '.join(names)}.")
        obj = getattr(obj, part)
    if not callable(obj):
        raise SystemExit(f"symjac show: {target} is a {type(obj).__name__}, not a function.")
    return obj


def parse_shape(text: str) -> tuple[int, ...]:
    """``"3"`` -> ``(3,)``, ``"2,3"`` or ``"2x3"`` -> ``(2, 3)``, ``"scalar"`` or ``"()"`` -> ``()``.

    >>> parse_shape("2,3"), parse_shape("4"), parse_shape("scalar")
    ((2, 3), (4,), ())
    """
    text = text.strip().strip("()[]").replace("x", ",").replace(" ", "")
    if text in ("", "scalar"):
        return ()
    try:
        shape = tuple(int(n) for n in text.split(",") if n)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a shape is sizes separated by commas (3, or 2,3) or 'scalar'; got {text!r}.") from None
    if any(n < 0 for n in shape):
        raise argparse.ArgumentTypeError(f"sizes must not be negative; got {text!r}.")
    return shape


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"symjac show: {what} takes NAME=VALUE (e.g. {what} x=3); got {item!r}.")
        out[name.strip()] = value
    return out


def _arguments(fn, shapes: dict, statics: dict) -> tuple[list, list[str], tuple[int, ...]]:
    """The call's arguments (zeros of the given shapes), parameter names, and static positions."""
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in params]
    unknown = sorted(set(shapes) | set(statics) - set(names))
    unknown = [n for n in unknown if n not in names]
    if unknown:
        raise SystemExit(f"symjac show: {fn.__name__} has no parameter {unknown[0]!r}; it takes ({', '.join(names)}).")
    args, static = [], []
    for i, p in enumerate(params):
        if p.name in statics:
            try:
                args.append(ast.literal_eval(statics[p.name]))
            except (ValueError, SyntaxError):
                raise SystemExit(f"symjac show: --static {p.name}= needs a Python literal (5, 0.1, 'tanh'); "
                                 f"got {statics[p.name]!r}.") from None
            static.append(i)
        elif p.name in shapes:
            shape = shapes[p.name]
            args.append(0.0 if shape == () else __import__("numpy").zeros(shape))
        elif p.default is not p.empty:
            args.append(p.default)
            if not isinstance(p.default, (int, float)) or isinstance(p.default, bool):
                static.append(i)
        else:
            raise SystemExit(
                f"symjac show: {fn.__name__} takes ({', '.join(names)}); give {p.name}'s shape with "
                f"--arg {p.name}=SHAPE (e.g. --arg {p.name}=3, --arg {p.name}=2,3, or --arg {p.name}=scalar), "
                f"or its value with --static {p.name}=VALUE.")
    return args, names, tuple(static)


def sparsity_picture(matrix, width: int = 64) -> str:
    """An ASCII picture of a sparse pattern: ``#`` where a block has a nonzero, ``.`` elsewhere.

    >>> import scipy.sparse as sps
    >>> print(sparsity_picture(sps.eye(3, format="csr")))
    #..
    .#.
    ..#
    """
    rows, cols = matrix.shape
    step = max(1, -(-max(rows, cols) // width))
    grid = [["."] * (-(-cols // step)) for _ in range(-(-rows // step))]
    coo = matrix.tocoo()
    for r, c in zip(coo.row, coo.col, strict=True):
        grid[r // step][c // step] = "#"
    lines = ["".join(row) for row in grid]
    if step > 1:
        lines.append(f"(each character is a {step}x{step} block)")
    return "\n".join(lines)


def _show(args) -> int:
    import numpy as np

    import symjac as sj

    fn = _load(args.target)
    shapes = {name: parse_shape(value) for name, value in _pairs(args.arg, "--arg").items()}
    call_args, names, static = _arguments(fn, shapes, _pairs(args.static, "--static"))
    wrt = args.wrt.split(",") if args.wrt else [next(n for i, n in enumerate(names) if i not in static)]
    for w in wrt:
        if w not in names:
            raise SystemExit(f"symjac show: --wrt {w}: {fn.__name__} has no parameter {w!r}; it takes ({', '.join(names)}).")
    argnums = tuple(names.index(w) for w in wrt)
    argnums = argnums if len(argnums) > 1 else argnums[0]
    with sj.compiling("never"):  # show only generates code; nothing needs compiling
        try:
            record = WHAT[args.what]
            if not record.differentiates:
                transform = sj.jit(fn, static_argnums=static)
            else:
                transform = getattr(sj, record.name)(fn, argnums, static_argnums=static)
            if record.vector == "v":  # a tangent shaped like the differentiated argument
                x = call_args[argnums] if isinstance(argnums, int) else None
                call_args.append(np.zeros(np.shape(x)) if x is not None else tuple(np.zeros(np.shape(call_args[a])) for a in argnums))
            elif record.vector == "u":  # a cotangent shaped like the output
                out = sj.jit(fn, static_argnums=static).symbolic(*call_args)
                shape_of = lambda o: np.shape(np.array(o.tolist(), dtype=object)) if hasattr(o, "tolist") else ()  # noqa: E731
                call_args.append(tuple(np.zeros(shape_of(o)) for o in out) if isinstance(out, tuple) else np.zeros(shape_of(out)))
            if args.explain:
                sj.explain(transform, *call_args)
                print()
            shown = transform.show(*call_args, limit=args.limit or None)
            if args.latex:
                print(shown.latex(args.limit or None))
            elif args.pretty:
                print(shown.pretty(args.limit or None))
            else:
                print(shown)
            if args.sparsity:
                if not record.sparse:
                    raise SystemExit(f"symjac show: --sparsity applies to --what {_names(lambda k: k.sparse, 'or')}.")
                patterns = transform.sparsity(*call_args)
                for pattern in patterns if isinstance(patterns, tuple) else (patterns,):
                    print(f"\nsparsity pattern, {pattern.shape[0]}x{pattern.shape[1]}, {pattern.nnz} nonzeros:")
                    print(sparsity_picture(pattern))
            if args.source:
                print("\n" + transform.source(*call_args))
        except sj.SymjacError as exc:
            print(f"symjac show: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    return 0


def _cache(args) -> int:
    from symjac.runtime import kernel

    root = kernel.cache_root()
    files = list((root / "kernels").glob("*.py"))
    programs = list((root / "programs").glob("*.json"))
    if args.action == "info":
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        print(f"symjac cache: {root}\n  {len(files)} kernel files, {len(programs)} programs, "
              f"{size / 1e6:.1f} MB on disk")
    else:
        for sub in ("kernels", "programs"):
            shutil.rmtree(root / sub, ignore_errors=True)
        print(f"removed {len(files)} kernel files and {len(programs)} programs from {root}")
    return 0


def _demo(args) -> int:
    from symjac import _demo

    _demo.run()
    return 0


def parser() -> argparse.ArgumentParser:
    """The ``symjac`` argument parser (``symjac --help``)."""
    top = argparse.ArgumentParser(
        prog="symjac",
        description="Exact derivatives of NumPy functions: shown as SymPy, run as Numba kernels.",
        epilog="Run 'symjac COMMAND --help' for each command's options.",
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = sub.add_parser(
        "show", help="print the symbolic derivative of a function in a module or file",
        description="Trace FUNCTION for arguments of the given shapes and print its derivative "
                    "symbolically, with shared subexpressions named once (τ₁ = …).",
        epilog=SHOW_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("target", metavar="MODULE:FUNCTION",
                      help="the function: a module name (mypkg.model:loss) or a .py file (path/to/f.py:loss)")
    show.add_argument("--arg", action="append", metavar="NAME=SHAPE",
                      help="the shape of parameter NAME (repeat for each parameter): x=3, w=2,3, t=scalar")
    show.add_argument("--static", action="append", metavar="NAME=VALUE",
                      help="a parameter's fixed value, a Python literal the trace depends on: n=5, mode='tanh'")
    show.add_argument("--what", choices=tuple(WHAT), default="jacobian",
                      help="what to show (default: jacobian); jvp/hvp add a tangent v shaped like the "
                           "differentiated argument, vjp a cotangent u shaped like the output")
    show.add_argument("--wrt", metavar="NAME[,NAME]",
                      help="differentiate with respect to these parameters (default: the first)")
    form = show.add_mutually_exclusive_group()
    form.add_argument("--latex", action="store_true", help="print LaTeX (an aligned block) instead of text")
    form.add_argument("--pretty", action="store_true", help="print with SymPy's unicode pretty printer")
    show.add_argument("--limit", type=int, default=40, metavar="N",
                      help="print at most N lines of the result (default 40; 0 for no limit)")
    show.add_argument("--source", action="store_true", help="also print the generated Numba kernel and its file")
    show.add_argument("--sparsity", action="store_true",
                      help="also print the nonzero pattern as an ASCII picture (jacobian and hessian)")
    show.add_argument("--explain", action="store_true",
                      help="first explain what is computed: shapes, index formula, the PyTorch/JAX equivalent")
    show.set_defaults(run=_show)
    demo = sub.add_parser("demo", help="tour symjac on the built-in examples",
                          description="Print a symbolic Jacobian and its kernel, then build, check "
                                      "against finite differences and time the built-in examples.")
    demo.set_defaults(run=_demo)
    cache = sub.add_parser("cache", help="show or empty the kernel cache on disk",
                           description="The kernel cache lives in $SYMJAC_CACHE_DIR or the user cache directory.")
    cache.add_argument("action", choices=["info", "clear"], help="info: location and size; clear: delete it")
    cache.set_defaults(run=_cache)
    return top


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
