"""The toolchain: the one place that makes and keeps machine code.

It receives kernel bodies as IR (``backend/bodies.py``) and kernel modules as
text (``backend/kernels.py``) and owns everything stateful about them:
compiling IR to object code (``machine_code.py``, also run alone in a child
process), loading it and swapping quick code for optimised code, C entry
points and the Numba wrappers' intrinsics (``native.py``), the disk cache and
its trust checks (``cache.py``, ``private.py``, ``numba_cache.py``), and the
background threads, queues and child processes (``jobs.py``, ``worker.py``).

Nothing below the runtime imports it; it imports from the backend only the
body record, and never asks what kind of code generation made a body.
"""
