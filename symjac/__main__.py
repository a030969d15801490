"""The ``symjac`` command line: ``symjac demo``, ``symjac cache info|clear``."""

from __future__ import annotations

import argparse
import shutil
import sys


def _cache(args) -> int:
    from symjac import _compile

    path = _compile.cache_dir()
    files = list(path.glob("*.py"))
    if args.action == "info":
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        print(f"kernel cache: {path}\n  {len(files)} kernel files, {size / 1e6:.1f} MB on disk")
    else:
        shutil.rmtree(path, ignore_errors=True)
        print(f"removed {len(files)} kernel files from {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="symjac",
        description="Exact derivatives of NumPy functions: shown as SymPy, run as Numba kernels.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="tour symjac on the built-in examples",
                          description="Print a symbolic Jacobian and its kernel, then build, check "
                                      "against finite differences and time the built-in examples.")
    demo.set_defaults(run=lambda a: (__import__("symjac._demo", fromlist=["run"]).run(), 0)[1])
    cache = sub.add_parser("cache", help="show or empty the kernel cache on disk",
                           description="The kernel cache lives in $SYMJAC_CACHE_DIR or the user cache directory.")
    cache.add_argument("action", choices=["info", "clear"], help="info: location and size; clear: delete it")
    cache.set_defaults(run=_cache)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
