"""``python -m symjac.runtime.jit.worker PATH NAME DTYPE IN_NDIMS OUT_NDIMS``:
compile one kernel file so that its machine code lands in Numba's disk cache.

Run by symjac in a child process for large kernels (``jobs.compile_in_subprocess``).
"""

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    path, name, dtype, in_nd, out_nd = argv
    from symjac._errors import CompileError
    from symjac.runtime.jit import cache, native, wrappers

    def refuse():
        raise CompileError(f"{path} is missing or does not match its digest")

    native.QUICK_LINES = None  # this process only compiles: straight to the optimised code, for the disk cache
    dispatcher = cache.load_function(Path(path), name, refuse)
    ndims = [[int(n) for n in s.split(",") if n] for s in (in_nd, out_nd)]
    seconds = wrappers.compile_kernel(dispatcher, wrappers.signature(*ndims, dtype))
    cache.mark_compiled(Path(path), seconds)
    print(f"{seconds:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
