"""``python -m symjac.backend.worker PATH NAME DTYPE IN_NDIMS OUT_NDIMS``:
compile one kernel file so that its machine code lands in Numba's disk cache.

Run by symjac in a child process for large kernels (see ``_compile``).
"""

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    path, name, dtype, in_nd, out_nd = argv
    from symjac.backend import compiler as _compile
    from symjac.backend import native

    def refuse():
        raise _compile.CompileError(f"{path} is missing or does not match its digest")

    native.QUICK_LINES = None  # this process only compiles: straight to the optimised code, for the disk cache
    dispatcher = _compile.load_function(Path(path), name, refuse)
    ndims = [[int(n) for n in s.split(",") if n] for s in (in_nd, out_nd)]
    seconds = native.compile_kernel(dispatcher, _compile.signature(*ndims, dtype))
    _compile.mark_compiled(Path(path), seconds)
    print(f"{seconds:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
