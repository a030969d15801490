"""Files only the user can have written: what symjac's caches read and write.

The caches execute what they read (kernel modules, object code) or let it
decide what runs (program entries), so they use only regular files and
directories the user owns and nobody else can write, never through a link,
checked on the open file so it cannot be swapped in between.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def trusted_stat(st: os.stat_result, directory: bool) -> bool:
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    return kind_ok and st.st_uid == os.getuid() and not st.st_mode & 0o022


def trusted(path: Path, directory: bool) -> bool:
    """The cache only uses files and directories the user owns and nobody
    else can write (and never a symbolic link): kernel files are executed,
    program entries decide what runs."""
    try:
        return trusted_stat(path.lstat(), directory)
    except OSError:
        return False


def private_dir(path: Path) -> bool:
    """Create ``path`` private to the user if missing; True if it is usable."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return False
    return trusted(path, directory=True) and os.access(path, os.W_OK | os.X_OK)


def read_private(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (not a link) that the
    user owns and nobody else can write, checked on the open file itself (so
    it cannot be swapped in between); None if it is missing or untrusted."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not trusted_stat(os.fstat(fd), directory=False):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def write_private(directory: Path, name: str, data: bytes) -> Path:
    """Write ``data`` to ``directory/name`` atomically (a private temporary
    file renamed into place).  A failed write (a full disk) leaves nothing
    behind, not even the temporary file; the OSError propagates."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, directory / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return directory / name
