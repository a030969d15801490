"""The warm-start cache: a later process skips differentiation and codegen.

After tracing (which is needed to know what the function computes) the
traced graph is hashed structurally; if an earlier process built a program
for the same graph, transform, argument specs and symjac/Numba/NumPy
versions, its tape and output layout are read back from disk and the kernel
file it points to is loaded.  Entries are plain data (JSON metadata plus a
NumPy ``.npz`` read without pickle), so reading one never executes anything.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from ..backend import codegen as _codegen
from ..backend import compiler as _compile
from ..backend.tape import Tape
from ..diff.products import SparseLayout
from ..ir import graph as g

FORMAT = 1


class Hit(Exception):
    """Raised from the checkpoint to hand a cached program to the dispatcher."""

    def __init__(self, compiled):
        super().__init__("warm start")
        self.compiled = compiled


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """A digest of symjac's own source and the versions it depends on: any
    change to how programs are built invalidates old entries."""
    import numba

    h = hashlib.blake2b(digest_size=16)
    h.update(f"{FORMAT} {np.__version__} {numba.__version__}".encode())
    here = Path(__file__).parent.parent  # the whole symjac package, subpackages included
    for path in sorted(here.rglob("*.py")):
        h.update(path.relative_to(here).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _directory() -> Path:
    path = _compile.cache_dir().parent / "programs"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def checkpoint(transform, found: list):
    """A hook for the top-level trace: computes the key (appended to ``found``
    for saving later) and raises Hit if the program is on disk."""

    def hook(traced, partial) -> None:
        if os.environ.get("SYMJAC_NO_WARM_CACHE"):
            return
        ids = {sym: f"{leaf}.{flat}" for sym, (leaf, flat) in partial.symbols.items()}
        roots = [e for a in traced.arrays for e in a.elems.reshape(-1)]
        try:
            graph = g.structural_hash(roots, ids)
        except (KeyError, AssertionError):  # a symbol that is not an input: do not cache
            return
        material = json.dumps([
            fingerprint(), repr(transform.chain), transform.root_name, graph,
            [[list(s.shape), s.dtype.str] for s in partial.leaf_specs], partial.leaf_names,
            [[list(a.shape), a.dtype.str] for a in traced.arrays], traced.single, partial.dtype.str,
        ])
        key = hashlib.blake2b(material.encode(), digest_size=16).hexdigest()
        found.append(key)
        compiled = load(key)
        if compiled is not None:
            raise Hit(compiled)

    return hook


# ----- writing and reading entries ------------------------------------------------------


def _template_to_json(template, arrays: dict):
    if template is None:
        return None
    if isinstance(template, SparseLayout):
        n = len([k for k in arrays if k.startswith("indices")])
        arrays[f"indices{n}"] = template.indices
        arrays[f"indptr{n}"] = template.indptr
        return {"sparse": n, "format": template.format, "shape": list(template.shape)}
    return [_template_to_json(t, arrays) for t in template]


def _template_from_json(obj, arrays):
    if obj is None:
        return None
    if isinstance(obj, dict):
        n = obj["sparse"]
        return SparseLayout(obj["format"], tuple(obj["shape"]), arrays[f"indices{n}"], arrays[f"indptr{n}"])
    return tuple(_template_from_json(t, arrays) for t in obj)


def payload(compiled) -> tuple[dict, dict]:
    """``compiled``'s program as plain data: JSON-able metadata and NumPy
    arrays (what the disk cache stores, and what ships a program to Dask
    workers)."""
    tape = compiled.tape
    arrays = {name: getattr(tape, name) for name in ("code", "consts", "store_idx", "store_val", "const_idx", "const_val")}
    spec = compiled.spec
    meta = {
        "format": FORMAT,
        "kernel": compiled.path.name if compiled.path is not None else None,
        "spec": {"name": spec.name, "inputs": [[n, list(s)] for n, s in spec.inputs],
                 "outputs": [list(s) for s in spec.outputs], "dtype": np.dtype(spec.dtype).str, "title": spec.title},
        "leaves": [list(leaf) for leaf in compiled.leaves],
        "leaf_shapes": [list(s) for s in compiled.spec_shapes],
        "out_shapes": [list(s) for s in compiled.out_shapes],
        "out_dtypes": [d.str for d in compiled.out_dtypes],
        "dtype": compiled.dtype.str,
        "int_limit": compiled.int_limit,
        "int_args": list(compiled._int_args),
        "template": _template_to_json(compiled.template, arrays),
    }
    return meta, arrays


def save(key: str, compiled) -> None:
    """Store ``compiled``'s program under ``key`` (atomically; failures are ignored:
    the cache is an optimisation)."""
    if compiled.path is None:
        return
    meta, arrays = payload(compiled)
    try:
        directory = _directory()
        for suffix, write in ((".npz", lambda f: np.savez(f, **arrays)), (".json", lambda f: f.write(json.dumps(meta).encode()))):
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{key}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                write(f)
            os.replace(tmp, directory / f"{key}{suffix}")
    except OSError:
        pass


def from_payload(meta: dict, arrays: dict, path: Path):
    """The Compiled that ``payload`` described, with its kernel source at ``path``."""
    from .dispatch import Compiled

    s = meta["spec"]
    spec = _codegen.KernelSpec(
        s["name"], [(n, tuple(shape)) for n, shape in s["inputs"]], [tuple(o) for o in s["outputs"]],
        np.dtype(s["dtype"]), s["title"],
    )
    tape = Tape(*(arrays[name] for name in ("code", "consts", "store_idx", "store_val", "const_idx", "const_val")))
    return Compiled(
        spec, path, meta["leaves"], meta["leaf_shapes"], meta["out_shapes"], meta["out_dtypes"],
        _template_from_json(meta["template"], arrays), tape, meta["dtype"],
        int_limit=meta["int_limit"],
        leaf_dtypes=["i8" if n in meta["int_args"] else "f8" for n in range(len(meta["leaves"]))],
    )


def load(key: str):
    """The Compiled stored under ``key``, or None (missing, unreadable, or its
    kernel file is gone)."""
    directory = _compile.cache_dir().parent / "programs"
    try:
        meta = json.loads((directory / f"{key}.json").read_text())
        if meta.get("format") != FORMAT:
            return None
        with np.load(directory / f"{key}.npz", allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        path = _compile.cache_dir() / meta["kernel"]  # checked against its digest before use
        return from_payload(meta, arrays, path)
    except (OSError, ValueError, KeyError, TypeError):
        return None
