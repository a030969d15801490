"""Warm-start program entries on disk: kept inside the private cache, trusted
only when they are the user's own, bound to their key and kernel, never a
source of code, and rebuilt (with a warning) when damaged."""

import io
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import symjac as sj
from symjac.runtime import warm as _warm
from symjac.runtime.jit import cache as _cache

X = np.array([1.0, 2.0, 3.0])


def square_sum(x):
    return np.sum(x ** 2)


def cube_sum(x):
    return np.sum(x ** 3)


WANT = 2 * X


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SYMJAC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_cache, "_fallback_root", None, raising=False)
    monkeypatch.setattr(_cache, "_warned", set())
    sj.clear_caches()
    with sj.compiling("sync"):
        yield tmp_path / "cache"
    sj.clear_caches()


def grad_again(fn=square_sum):
    """A fresh process's view: nothing in memory, everything on disk."""
    sj.clear_caches()
    return sj.grad(fn)(X)


def entry(cache_root, fn=square_sum):
    """The .json and .npz of ``fn``'s grad entry (built if needed)."""
    before = set((cache_root / "programs").glob("*.json")) if (cache_root / "programs").exists() else set()
    grad_again(fn)
    (meta,) = set((cache_root / "programs").glob("*.json")) - before
    return meta, meta.with_suffix(".npz")


def warm_starts() -> int:
    return sj.cache_info().warm_starts


def test_an_intact_entry_is_used(cache):
    entry(cache)
    np.testing.assert_array_equal(grad_again(), WANT)
    assert warm_starts() == 1


def test_a_scaled_constant_in_the_arrays_is_refused(cache):
    meta, arrays = entry(cache)
    with np.load(arrays) as data:
        parts = {k: data[k] for k in data.files}
    parts["consts"] = parts["consts"] * 1.5
    with open(arrays, "wb") as f:
        np.savez(f, **parts)
    with pytest.warns(RuntimeWarning, match="checksum"):
        np.testing.assert_array_equal(grad_again(), WANT)
    assert warm_starts() == 0
    np.testing.assert_array_equal(grad_again(), WANT)  # rebuilt: the entry is good again
    assert warm_starts() == 1


def test_an_entry_pointed_at_another_functions_kernel_is_refused(cache):
    meta, _ = entry(cache)
    other, _ = entry(cache, cube_sum)
    data = json.loads(meta.read_text())
    data["kernel"] = json.loads(other.read_text())["kernel"]
    meta.write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning, match="checksum"):
        np.testing.assert_array_equal(grad_again(), WANT)


def test_an_entry_copied_to_another_key_is_refused(cache):
    meta, arrays = entry(cache)
    other, other_arrays = entry(cache, cube_sum)
    other.write_bytes(meta.read_bytes())
    other_arrays.write_bytes(arrays.read_bytes())
    with pytest.warns(RuntimeWarning, match="checksum"):
        np.testing.assert_array_equal(grad_again(cube_sum), 3 * X ** 2)


def test_no_stored_string_reaches_generated_source(cache, tmp_path):
    """Even an entry whose checksum was recomputed by someone with write
    access gets names and titles from the running program, never from disk."""
    meta, arrays = entry(cache)
    marker = tmp_path / "injected-code-ran"
    data = json.loads(meta.read_text())
    data["spec"] = {"name": "x", "title": f'"""\nopen({str(marker)!r}, "w").close()\n"""'}
    data["kernel"] = "0123456789abcdef"  # a kernel file that is not there: it would be regenerated
    with np.load(arrays) as npz:
        parts = {k: npz[k] for k in npz.files}
    data["check"] = _warm._checksum(meta.stem, data, parts)
    meta.write_text(json.dumps(data))
    np.testing.assert_array_equal(grad_again(), WANT)
    assert not marker.exists()


@pytest.mark.skipif(os.getuid() != 0, reason="changing a file's owner needs root")
def test_an_entry_owned_by_someone_else_is_not_read(cache):
    meta, _ = entry(cache)
    os.chown(meta, 12345, 12345)
    with pytest.warns(RuntimeWarning, match="not yours"):
        np.testing.assert_array_equal(grad_again(), WANT)
    assert warm_starts() == 0


def test_an_entry_others_can_write_or_a_link_is_not_read(cache, tmp_path):
    meta, arrays = entry(cache)
    os.chmod(meta, 0o666)
    with pytest.warns(RuntimeWarning, match="writable by others"):
        grad_again()
    assert warm_starts() == 0
    grad_again()  # rewritten privately
    elsewhere = tmp_path / "elsewhere.npz"
    elsewhere.write_bytes(arrays.read_bytes())
    arrays.unlink()
    arrays.symlink_to(elsewhere)
    with pytest.warns(RuntimeWarning, match="a link"):
        np.testing.assert_array_equal(grad_again(), WANT)


def test_a_damaged_entry_is_rebuilt_with_a_warning_not_a_crash(cache):
    meta, arrays = entry(cache)
    arrays.write_bytes(b"PK\x03\x04 not a zip file")
    with pytest.warns(RuntimeWarning, match="cannot be used"):
        np.testing.assert_array_equal(grad_again(), WANT)
    np.testing.assert_array_equal(grad_again(), WANT)
    assert warm_starts() == 1, "the damaged entry was replaced by a good one"


def test_programs_of_a_refused_cache_stay_in_the_private_fallback(cache, tmp_path, monkeypatch):
    """A refused cache directory must not send programs to a shared place
    such as $TMPDIR/programs, which another user could have prepared."""
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    (shared_tmp / "programs").mkdir(mode=0o777)
    os.chmod(shared_tmp / "programs", 0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    cache.mkdir(parents=True)
    os.chmod(cache, 0o777)  # refused: others can write it
    with pytest.warns(RuntimeWarning, match="not usable"):
        np.testing.assert_array_equal(grad_again(), WANT)
    assert not list((shared_tmp / "programs").iterdir())
    fallback = _cache.cache_root()
    assert fallback.parent == shared_tmp and (fallback.stat().st_mode & 0o777) == 0o700
    assert list((fallback / "programs").glob("*.json"))


_REFUSED = """
import numpy as np, symjac as sj
sj.set_compile_mode("never")
print(sj.grad(lambda x: np.sum(x ** 2))(np.ones(3)))
"""


def test_a_refused_cache_leaves_no_temporary_directory_behind(tmp_path):
    shared = tmp_path / "tmp"
    shared.mkdir()
    refused = tmp_path / "cache"
    refused.mkdir()
    os.chmod(refused, 0o777)
    env = dict(os.environ, TMPDIR=str(shared), SYMJAC_CACHE_DIR=str(refused))
    run = subprocess.run([sys.executable, "-c", _REFUSED], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "not usable" in run.stderr
    assert not [p.name for p in shared.iterdir() if p.name.startswith("symjac")]


def test_a_full_disk_leaves_no_temporary_files(cache, monkeypatch):
    real_fdopen = os.fdopen

    class Full(io.FileIO):
        """A file whose writes fail as on a full disk."""

        def write(self, data):
            raise OSError(28, "No space left on device")

    full = ["/programs/"]  # the disk fills up after the kernel file is written

    def fdopen(fd, *args, **kwargs):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(".tmp") and any(part in path for part in full):
            raw = Full(fd, "w")
            return raw if "b" in (args[0] if args else kwargs.get("mode", "r")) else io.TextIOWrapper(raw)
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    np.testing.assert_array_equal(grad_again(), WANT)  # the program entry cannot be written: no matter
    full.append("/kernels/")  # now nothing can be written
    with pytest.warns(RuntimeWarning, match="cannot write"):
        np.testing.assert_array_equal(sj.jacobian(square_sum)(X.reshape(1, 3)).reshape(3), WANT)
    leftovers = [p for root in (cache, _cache.cache_dir().parent) for p in root.rglob("*.tmp")]
    assert not leftovers, leftovers
