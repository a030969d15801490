"""Background work: the compile queue and thread, the threads and queues that
write to the cache, the garbage collector's pauses, and compile children.

Everything here is reset in a forked child, and drained (briefly) at exit
before a temporary cache is removed (:func:`shutdown`).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import queue
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import numpy as np

from ..._errors import CompileError
from . import machine_code

#: Programs with at most this many operations compile before the first call
#: returns (in "auto" mode): ~0.1 s, less than starting the tape would save.
SYNC_OPS = 500
#: Programs with more operations than this compile in a separate process.  The
#: compile holds the GIL only to write the body's IR text (~2 µs an operation)
#: and to compile the one-line wrapper; LLVM runs without it, so in-process
#: compiles leave the caller's calls (tape) within ~1.3x of their own speed,
#: and a child process would cost a second of start-up.
SUBPROCESS_OPS = 100_000
#: seconds a compile child may take before it is killed
CHILD_TIMEOUT = 3600
CHILD_EXIT_WAIT = 5  # seconds a terminated compile child gets to exit before it is killed
_STDERR_TAIL = 2000  # characters of a failed child's error output quoted in the CompileError

_EXIT_POLL = 0.01  # seconds between checks for the compile queue to drain at exit

_jobs: queue.Queue = queue.Queue()
_worker: threading.Thread | None = None
_worker_lock = threading.Lock()
_threads: weakref.WeakSet = weakref.WeakSet()  # other background threads writing to the cache
_queues: list[queue.Queue] = []  # other work queues writing to the cache (native's optimiser)
_exiting = False  # set by the exit handler: background work is dropped


def shutdown() -> None:
    """At exit: drop queued work, stop the compile children, and let the
    background threads and queues (compile queue, tape preload, native's
    optimiser) finish what they are writing, for at most ``CHILD_EXIT_WAIT``
    seconds in all."""
    global _exiting
    _exiting = True  # queued work is dropped, not started
    _stop_children()
    deadline = time.monotonic() + CHILD_EXIT_WAIT
    for thread in list(_threads):
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    while any(q.unfinished_tasks for q in (_jobs, *_queues)) and time.monotonic() < deadline:
        time.sleep(_EXIT_POLL)


def exiting() -> bool:
    """True once the process is exiting: background work should stop."""
    return _exiting


def drained_at_exit(work: queue.Queue) -> queue.Queue:
    """Register a queue of background work that writes to the cache: the exit
    handler waits (briefly) for its tasks before removing a temporary cache."""
    _queues.append(work)
    return work


def background(target, *args, name: str) -> threading.Thread:
    """Start ``target(*args)`` on a daemon thread that writes to the cache (the
    tape interpreter's loads); the exit handler waits for it."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    _threads.add(thread)
    thread.start()
    return thread


def submit(job) -> None:
    """Run ``job()`` on the background compile thread (one at a time, in order)."""
    global _worker
    with _worker_lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="symjac-compile", daemon=True)
            _worker.start()
    _jobs.put(job)


def _work() -> None:
    while True:
        job = _jobs.get()
        try:
            if not _exiting:
                with collector_paused():
                    job()
        finally:
            _jobs.task_done()


_pause_lock = threading.Lock()
_pauses = 0  # threads inside collector_paused
_resume = False  # the collector was on when the first of them came in


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off during a background compile (and
    a program's build, ``runtime.build``).  A compile allocates many
    short-lived containers, which set off full collections over the traced
    graph (~0.1 s each, holding the GIL while the caller's tape calls wait);
    measured on a 1,913-operation Jacobian, the longest tape call during the
    compile fell from 100-200 ms to 17-30 ms.  Garbage made meanwhile is
    collected once it is back on (not at once: when the next collection
    comes).

    The pause is the process's, counted over threads: the collector comes
    back on when the last thread inside leaves (and only if it was on when
    the first came in).  Each thread switching it for itself let a build that
    ended re-enable it under a compile that had found it off: the compile then
    paid for a full collection of the build's graph (the `tanh(A @ x)`
    Jacobian's IR written in 0.3-1.0 s of CPU instead of 7 ms, in one fresh
    process of three)."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            if _resume:
                gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


def _forget_after_fork() -> None:
    """In a forked child: the background thread and the compile children are
    the parent's, and a lock may have been held by a thread that does not
    exist here (the child hung in ``wait_for_kernels()`` on a count of jobs
    nobody would finish, or on a lock nobody would release)."""
    global _jobs, _worker, _worker_lock, _pause_lock, _pauses, _resume, _children, _threads
    _worker_lock, _pause_lock = threading.Lock(), threading.Lock()
    _jobs, _worker = queue.Queue(), None
    _threads, _children = weakref.WeakSet(), set()
    if _pauses and _resume:
        gc.enable()  # paused by a compile that does not go on here
    _pauses, _resume = 0, False
    _queues.clear()  # their owners register new ones (native's optimiser)


os.register_at_fork(after_in_child=_forget_after_fork)


def busy() -> bool:
    """True while a background compile is queued or running."""
    return _jobs.unfinished_tasks > 0


def wait_all() -> None:
    """Block until every submitted background compile has finished."""
    _jobs.join()


_children: set = set()


def _die_with_parent() -> None:
    """In the child (Linux): receive SIGTERM when the parent process dies, so a
    compile never outlives the program that asked for it."""
    machine_code.die_with_parent()


def _stop_children() -> None:
    for child in list(_children):
        child.terminate()
    for child in list(_children):
        try:
            child.wait(timeout=CHILD_EXIT_WAIT)
        except subprocess.TimeoutExpired:
            child.kill()
            try:
                child.wait(timeout=CHILD_EXIT_WAIT)  # dead, not just signalled, before its directory goes
            except subprocess.TimeoutExpired:
                pass


atexit.register(_stop_children)


#: The compile child's first lines: it imports symjac from where this process
#: did, with Python's isolated mode (-I: no current directory, PYTHON*
#: variables or user site on sys.path), so nothing planted in the working
#: directory can run in it.
_CHILD_BOOT = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); del sys.argv[1]; "
    "from symjac.runtime.jit.worker import main; raise SystemExit(main(sys.argv[1:]))"
)


def _child_path() -> str:
    """sys.path for the compile child: symjac's own location first, then this
    process's absolute entries (relative ones, such as '' for the current
    directory, are dropped)."""
    here = str(Path(__file__).resolve().parents[3])
    return json.dumps([here] + [p for p in sys.path if p and os.path.isabs(p) and p != here])


def compile_in_subprocess(path: Path, name: str, in_ndims, out_ndims, dtype) -> None:
    """Compile in a child process; it leaves the machine code in Numba's disk cache.

    The child runs isolated (see ``_CHILD_BOOT``) in the cache directory, and
    ends with its parent (on exit, or killed), so it never keeps a core busy
    for a program that is gone.
    """
    cmd = [
        sys.executable, "-I", "-c", _CHILD_BOOT, _child_path(), str(path), name,
        np.dtype(dtype).name, ",".join(map(str, in_ndims)), ",".join(map(str, out_ndims)),
    ]
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    # the child uses this process's cache root, whatever SYMJAC_CACHE_DIR says relative to its own directory
    env = {**os.environ, "SYMJAC_CACHE_DIR": str(path.parent.parent)}
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec,
                             cwd=path.parent, env=env)
    _children.add(child)
    try:
        _, stderr = child.communicate(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        raise CompileError(f"background compile of {path.name} took over {CHILD_TIMEOUT} s") from None
    finally:
        _children.discard(child)
    if child.returncode != 0:
        raise CompileError(f"background compile of {path.name} failed:\n{stderr[-_STDERR_TAIL:]}")


#: The optimiser child's first lines: llvmlite from this process's sys.path, and symjac's
#: ``machine_code.py`` run alone (not the package: importing symjac costs 1-2 s of SymPy and
#: Numba, the child ~0.1 s), with Python's isolated mode as for the compile child.
_OPTIMISER_BOOT = (
    "import importlib.util, json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
    "spec = importlib.util.spec_from_file_location('symjac_machine_code', sys.argv[2]); "
    "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
    "raise SystemExit(module.main(sys.argv[3:]))"
)


def compile_ir_in_subprocess(source: str) -> bytes:
    """Fully optimised object code for the LLVM IR ``source``, compiled by
    ``machine_code.compile_ir`` in a child process: llvmlite's process-wide lock
    is the child's, and no compile or load in this process waits for it.

    The child is started without a ``preexec_fn`` (which would run the fork
    handlers: they wait for any LLVM call or Numba compile in progress) and
    arranges itself to end with this process.  Raises CompileError if it fails
    or its output is garbled, OSError if it cannot be started.
    """
    cmd = [sys.executable, "-I", "-c", _OPTIMISER_BOOT, _child_path(), machine_code.__file__, str(os.getpid())]
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _children.add(child)
    try:
        out, stderr = child.communicate(source.encode(), timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise CompileError(f"the background optimisation of a kernel body took over {CHILD_TIMEOUT} s") from None
    finally:
        _children.discard(child)
    digest, code = out[:machine_code.DIGEST], out[machine_code.DIGEST:]
    if child.returncode != 0 or not code or machine_code.seal(code) != digest:
        tail = stderr.decode(errors="replace")[-_STDERR_TAIL:]
        raise CompileError(f"the background optimisation of a kernel body failed (exit code {child.returncode}):\n{tail}")
    return code
