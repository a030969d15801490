"""Shared by the tests of compile children: which of them outlive the process that started them."""

import os
import time


def survivors(pids: list[int], marker: str, seconds: float = 10.0) -> list[int]:
    """The processes among ``pids`` still running after up to ``seconds`` whose
    command line contains ``marker`` (a pid reused by another program is not one)."""
    deadline = time.time() + seconds
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.1)
    alive = []
    for p in pids:
        try:
            with open(f"/proc/{p}/cmdline") as fh:
                if marker in fh.read():
                    alive.append(p)
        except OSError:  # (gone)
            pass
    return alive
