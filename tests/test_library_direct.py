"""Library functions passed to a transform directly, and library code that
cannot be traced: what users of scipy.special write (sj.grad(logsumexp)), and
what they are told when a library function does something without a traced
form (issue 26 §4)."""

import os
import sys
import textwrap

import numpy as np
import pytest
import scipy.special as ss

import symjac as sj
from symjac import _location

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")

X = np.array([0.1, -0.5, 2.0, 0.7])


def _softmax(x):
    e = anp.exp(x - anp.max(x))
    return e / anp.sum(e)


def test_scipy_special_functions_passed_directly():
    """They used to fail with a control-flow error pointing into SciPy's source."""
    np.testing.assert_allclose(sj.jacobian(ss.softmax)(X), autograd.jacobian(_softmax)(X), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(sj.grad(ss.logsumexp)(X), _softmax(X), rtol=1e-13)
    np.testing.assert_allclose(sj.jacobian(ss.log_softmax)(X),
                               autograd.jacobian(lambda x: anp.log(_softmax(x)))(X), rtol=1e-12, atol=1e-14)
    assert sj.jacobian(ss.softmax).info(X).tier in ("kernel", "tape")


@pytest.fixture()
def fake_library(tmp_path, monkeypatch):
    """A module installed where libraries live (as symjac sees it)."""
    root = tmp_path / "site"
    (root / "fakelib").mkdir(parents=True)
    (root / "fakelib" / "__init__.py").write_text(textwrap.dedent("""
        import numpy as np

        def clipped(x):
            if np.max(x) > 1.0:  # a branch on values
                return x / np.max(x)
            return x

        def stringly(x):
            return np.asarray(x, dtype=float).view(np.int64)  # no traced form
    """))
    monkeypatch.setattr(_location, "_LIBRARIES", (*_location._LIBRARIES, str(root) + os.sep))
    monkeypatch.syspath_prepend(str(root))
    import fakelib

    yield fakelib
    sys.modules.pop("fakelib", None)


def test_a_branch_in_library_code_names_the_library_and_the_callers_line(fake_library):
    def f(x):
        return np.sum(fake_library.clipped(x) ** 2)

    with pytest.raises(sj.TracerControlFlowError) as err:
        sj.grad(f)(X)
    message = str(err.value)
    assert "inside fakelib's code, called from test_library_direct.py:" in message
    assert "compute that step outside the traced function" in message


def test_a_raw_error_from_library_code_says_what_to_do(fake_library):
    with pytest.raises(sj.UnsupportedOperationError) as err:
        sj.jacobian(fake_library.stringly)(X)
    assert isinstance(err.value, NotImplementedError)
    message = str(err.value)
    assert message.startswith("fakelib's code failed on traced arrays (")
    assert "outside the function you transform" in message
    assert err.value.__cause__ is not None, "the library's own error is kept as the cause"
