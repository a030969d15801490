"""The warm-start cache: a later process skips differentiation and codegen.

After tracing (which is needed to know what the function computes) the
traced graph is hashed structurally; if an earlier process built a program
for the same graph, products, argument specs and symjac/Numba/NumPy
versions, its tape and output layout are read back from disk and the kernel
file it names is loaded.

What an entry is trusted with, and why:

* Entries live in the private cache directory (``programs/``, mode 700,
  owned by the user); an entry file that is a link, not the user's, or
  writable by others is not read.
* An entry is plain data: JSON numbers and a NumPy ``.npz`` read without
  pickle.  Every string in generated source (kernel and parameter names)
  comes from the current request, never from the entry; the kernel file is
  named by the digest the entry records, and is checked against that digest
  before it runs.
* A checksum over the key, the metadata, the arrays and the kernel digest
  binds the entry to its key and its kernel: a damaged entry, one copied to
  another key, or one pointed at another kernel is refused (with a warning)
  and rebuilt.  The checksum has no secret: it detects damage, not someone
  with write access to your cache directory -- who could as well edit
  symjac's own files.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from pathlib import Path

import numpy as np

from .. import _fingerprint
from .._errors import warn
from ..backend import ssa as _program
from ..ir import graph as g
from . import templates
from .jit import cache as _cache
from .program import Compiled
from .tape import Tape

FORMAT = 2
_DIGEST_BYTES = 16  # of entry keys, checksums and the source fingerprint
_TAPE_ARRAYS = ("code", "consts", "store_idx", "store_val", "const_idx", "const_val")
_DIGEST = re.compile(r"[0-9a-f]{16}")
_FLOAT_DTYPES = ("<f4", "<f8")


def entry_stamp() -> str:
    """A digest of symjac's own source and the versions it depends on (see
    :mod:`symjac._fingerprint`) and of this cache's format: any change to how
    programs are built invalidates old entries."""
    return f"{FORMAT}-{_fingerprint.fingerprint()}"


def key(request, parts, traced) -> str | None:
    """The entry key of a traced top-level product, or None if it cannot be
    cached (the cache is switched off, or the graph has a free symbol).

    ``parts``: the build's leaves (their specs and kernel parameter names).
    """
    if os.environ.get("SYMJAC_NO_WARM_CACHE"):
        return None
    ids = {sym: f"{leaf}.{flat}" for sym, (leaf, flat) in parts.symbols.items()}
    roots = [e for a in traced.arrays for e in a.nodes()]
    try:
        graph = g.structural_hash(roots, ids)
    except (KeyError, AssertionError):  # a symbol that is not an input: do not cache
        return None
    material = json.dumps([
        entry_stamp(), repr(request.products), sorted(request.static_argnums), request.kernel_base, graph,
        [[list(s.shape), s.dtype.str] for s in parts.specs], parts.parameters,
        [[list(a.shape), a.dtype.str] for a in traced.arrays], traced.single, parts.dtype.str,
    ])
    return hashlib.blake2b(material.encode(), digest_size=_DIGEST_BYTES).hexdigest()


# ----- the payload: a program as plain data ------------------------------------------------


def _template_to_json(template, arrays: dict):
    if template is None:
        return None
    if isinstance(template, templates.SparseLayout):
        n = sum(1 for k in arrays if k.startswith("indices"))
        arrays[f"indices{n}"] = template.indices
        arrays[f"indptr{n}"] = template.indptr
        return {"sparse": n, "format": template.format, "shape": list(template.shape)}
    return [_template_to_json(t, arrays) for t in template]


def _template_from_json(obj, arrays):
    if obj is None:
        return None
    if isinstance(obj, dict):
        n, fmt, shape = int(obj["sparse"]), obj["format"], tuple(int(s) for s in obj["shape"])
        if fmt not in ("csr", "csc") or len(shape) != 2:
            raise ValueError("bad sparse layout")
        return templates.SparseLayout(fmt, shape, arrays[f"indices{n}"], arrays[f"indptr{n}"])
    return tuple(_template_from_json(t, arrays) for t in obj)


def payload(compiled: Compiled) -> tuple[dict, dict]:
    """``compiled``'s program as plain data: JSON-able metadata (numbers and
    dtype codes only) and NumPy arrays (what the disk cache stores, and what
    ships a program to Dask workers)."""
    tape = compiled.tape
    arrays = {name: getattr(tape, name) for name in _TAPE_ARRAYS}
    meta = {
        "format": FORMAT,
        "leaves": [[i, k] for i, k in compiled.leaves],
        "leaf_shapes": [list(s) for s in compiled.spec_shapes],
        "out_shapes": [list(s) for s in compiled.out_shapes],
        "out_dtypes": [d.str for d in compiled.out_dtypes],
        "dtype": compiled.dtype.str,
        "template": _template_to_json(compiled.template, arrays),
        "int_limit": compiled.int_limit,
        "int_args": list(compiled._int_args),
    }
    return meta, arrays


def _dtype(code: str, kinds: str) -> np.dtype:
    dtype = np.dtype(str(code))
    if dtype.kind not in kinds or dtype.hasobject:
        raise ValueError(f"unexpected dtype {code!r}")
    return dtype


def from_payload(meta: dict, arrays: dict, spec: _program.KernelSpec, path: Path | None) -> Compiled:
    """The Compiled that ``payload`` described; ``spec`` (names, title) comes
    from the caller, never from the payload."""
    leaves = [(int(i), None if k is None else int(k)) for i, k in meta["leaves"]]
    tape = Tape(*(arrays[name] for name in _TAPE_ARRAYS))
    compiled = Compiled(
        spec, path, leaves, [tuple(int(n) for n in s) for s in meta["leaf_shapes"]],
        [tuple(int(n) for n in s) for s in meta["out_shapes"]], [_dtype(d, "biuf") for d in meta["out_dtypes"]],
        _template_from_json(meta["template"], arrays), tape,
    )
    limit = meta.get("int_limit")
    compiled.limit_integers(None if limit is None else int(limit), [int(n) for n in meta.get("int_args", [])])
    return compiled


def payload_dtype(meta: dict) -> np.dtype:
    """The compute dtype a payload's program runs in (float32 or float64)."""
    if meta.get("dtype") not in _FLOAT_DTYPES:
        raise ValueError(f"unexpected compute dtype {meta.get('dtype')!r}")
    return np.dtype(meta["dtype"])


# ----- entries on disk --------------------------------------------------------------------


def _checksum(entry_key: str, meta: dict, arrays: dict) -> str:
    h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    h.update(entry_key.encode())
    h.update(json.dumps({k: v for k, v in meta.items() if k != "check"}, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name} {a.dtype.str} {a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save(entry_key: str, compiled: Compiled) -> None:
    """Store ``compiled``'s program under ``entry_key`` (atomically; failures
    are ignored: the cache is an optimisation)."""
    if compiled.path is None:
        return
    meta, arrays = payload(compiled)
    meta["kernel"] = compiled.path.stem.rsplit("_", 1)[-1]  # the kernel source's digest
    meta["check"] = _checksum(entry_key, meta, arrays)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    try:
        directory = _cache.programs_dir()
        _cache.write_private(directory, f"{entry_key}.npz", buffer.getvalue())
        _cache.write_private(directory, f"{entry_key}.json", json.dumps(meta).encode())  # last: the commit
    except OSError:
        pass


def load(entry_key: str, request, parameters: list[str], input_shapes: list[tuple]) -> Compiled | None:
    """The program stored under ``entry_key``, or None: missing, from another
    format, or refused with a warning (damaged, altered, not private)."""
    directory = _cache.programs_dir()
    meta_path = directory / f"{entry_key}.json"
    if not os.path.lexists(meta_path):
        return None
    try:
        raw_meta = _cache.read_private(meta_path)
        raw_arrays = _cache.read_private(directory / f"{entry_key}.npz")
        if raw_meta is None or raw_arrays is None:
            raise ValueError("an entry file is missing, a link, not yours, or writable by others")
        meta = json.loads(raw_meta)
        if meta.get("format") != FORMAT:
            return None  # written by another version of symjac
        with np.load(io.BytesIO(raw_arrays), allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        if meta.get("check") != _checksum(entry_key, meta, arrays):
            raise ValueError("its checksum does not match its key and content")
        digest = str(meta["kernel"])
        if not _DIGEST.fullmatch(digest):
            raise ValueError("it names no valid kernel digest")
        dtype = payload_dtype(meta)
        spec = _program.KernelSpec(request.kernel_name(dtype), list(zip(parameters, input_shapes, strict=True)),
                                   [tuple(int(n) for n in s) or (1,) for s in meta["out_shapes"]], dtype,
                                   request.title)
        return from_payload(meta, arrays, spec, _cache.cache_dir() / f"{spec.name}_{digest}.py")
    except Exception as exc:  # noqa: BLE001 -- any damage means: rebuild, never crash
        warn(f"symjac: the cached program {meta_path.name} cannot be used ({type(exc).__name__}: {exc}); "
             "building it again.", RuntimeWarning)
        return None
