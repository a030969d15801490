"""How much memory this process may still allocate.

The smallest of: the system's available memory (``MemAvailable``), the
process's address-space and data-segment limits (``ulimit -v`` / ``-d``:
``RLIMIT_AS``, ``RLIMIT_DATA``) minus what it already uses, and its cgroup's
memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``; containers,
systemd units, batch schedulers) minus the cgroup's usage.  Any of them may
be unknown on a platform; what cannot be read is left out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: cgroup v1 reports "no limit" as a huge number (about 2**63, page-rounded)
_NO_LIMIT = 2**60


@dataclass(frozen=True)
class Available:
    bytes: int
    reason: str  # which limit it is, for messages


def _meminfo(proc: Path) -> int | None:
    try:
        with open(proc / "meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _status(proc: Path) -> dict[str, int]:
    """VmSize and VmData of this process, in bytes."""
    out = {}
    try:
        with open(proc / "self" / "status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmSize", "VmData"):
                    out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def _rlimits(proc: Path) -> list[Available]:
    try:
        import resource
    except ImportError:  # not on Windows
        return []
    used = _status(proc)
    out = []
    for name, field in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        soft, _ = resource.getrlimit(getattr(resource, name))
        if soft != resource.RLIM_INFINITY and soft > 0:
            out.append(Available(max(0, soft - used.get(field, 0)), f"the process limit {name} (ulimit)"))
    return out


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text in ("", "max") else int(text) if text.isdigit() else None


def _cgroup(proc: Path, cgroup_root: Path) -> Available | None:
    """The memory left under this process's cgroup limits (v2 or v1): the
    tightest over its cgroup and every ancestor (limits nest)."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    tightest = None
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":  # cgroup v2: one unified tree
            base, limit_file, usage_file = cgroup_root, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):  # cgroup v1: the memory controller's tree
            base, limit_file, usage_file = cgroup_root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        directory = base / path.strip().lstrip("/")
        while True:
            limit = _read_int(directory / limit_file)
            if limit is not None and limit < _NO_LIMIT:
                left = Available(max(0, limit - (_read_int(directory / usage_file) or 0)),
                                 f"the cgroup memory limit {directory / limit_file}")
                if tightest is None or left.bytes < tightest.bytes:
                    tightest = left
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent
    return tightest


def available(proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> Available | None:
    """The memory this process may still allocate, and which limit that is,
    or None if nothing could be read."""
    found = _rlimits(proc)
    system = _meminfo(proc)
    if system is not None:
        found.append(Available(system, "the system's available memory"))
    group = _cgroup(proc, cgroup_root)
    if group is not None:
        found.append(group)
    return min(found, key=lambda a: a.bytes) if found else None
