"""One digest of everything that decides the machine code and the programs
symjac builds: its own source (every module of the package: records,
emitters, numeric operations, module formats, the trace) and the versions of
the libraries it generates code with.

Every cache stamps its entries with it (kernel object files and symbols in
``backend/bodies.py``, module headers in ``backend/kernels.py``, warm entries
in ``runtime/warm.py``), so an upgrade that changes any of them (a new
emitter for one operation is enough) compiles again instead of loading old
code.  Hashing the whole package rather than a list of files is the point:
a hand-kept list missed ``ir/numeric_ops.py`` once.
"""

from __future__ import annotations

import functools
import hashlib
import platform
from importlib import metadata
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
#: the libraries whose versions change generated or loaded code
LIBRARIES = ("numpy", "numba", "llvmlite", "sympy")


def of_package(root: Path = PACKAGE, versions: str | None = None) -> str:
    """A hex digest (32 characters) of every ``*.py`` file under ``root``
    (names and contents, in a fixed order) and of ``versions`` (by default the
    installed versions of :data:`LIBRARIES` and the machine's architecture)."""
    if versions is None:
        versions = " ".join(f"{name}={_version(name)}" for name in LIBRARIES) + f" {platform.machine()}"
    h = hashlib.blake2b(digest_size=16)
    h.update(versions.encode())
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        data = path.read_bytes()
        h.update(f"\0{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def fingerprint() -> str:
    """:func:`of_package` of the installed symjac, computed once per process."""
    return of_package()
