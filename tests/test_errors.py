"""Every error users are promised: its class, its builtin base, and a message
that says what was expected, what was seen and how to fix it."""

import numpy as np
import pytest

import symjac as sj

X = np.array([1.0, 2.0, 3.0, 4.0])
outer = lambda x: np.outer(x, x)  # noqa: E731  (4,) -> (4, 4)


pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def test_vjp_with_an_input_shaped_vector_points_to_jvp():
    with pytest.raises(sj.ShapeError) as info:
        sj.vjp(outer)(X, np.ones(4))
    msg = str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, sj.SymjacError)
    assert "(4, 4)" in msg and "(4,)" in msg
    assert "jvp" in msg and "J·v" in msg


def test_jvp_with_an_output_shaped_vector_points_to_vjp():
    with pytest.raises(sj.ShapeError) as info:
        sj.jvp(outer)(X, np.ones((4, 4)))
    msg = str(info.value)
    assert "(4,)" in msg and "(4, 4)" in msg
    assert "vjp" in msg and "uᵀ·J" in msg


def test_wrongly_shaped_vector_without_a_better_guess():
    with pytest.raises(sj.ShapeError, match=r"must have the input's shape \(4,\); got \(3,\)"):
        sj.jvp(outer)(X, np.ones(3))


@pytest.mark.parametrize("transform", [sj.grad, sj.hvp, sj.laplacian])
def test_scalar_only_transforms_reject_vector_outputs(transform):
    args = (X, X) if transform is sj.hvp else (X,)
    with pytest.raises(sj.NonScalarOutputError) as info:
        transform(lambda x: x ** 2)(*args)
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert "scalar" in msg and "(4,)" in msg and "jacobian" in msg


def test_hessian_of_a_vector_output_follows_the_layout_contract():
    assert sj.hessian(lambda x: x ** 2)(X).shape == (4, 4, 4)


def test_divergence_needs_matching_shapes():
    with pytest.raises(sj.ShapeError, match="input's shape"):
        sj.divergence(lambda x: x[:2])(X)


def test_wrong_number_of_arguments():
    def f(x, w):
        return x * w

    with pytest.raises(sj.ArityError) as info:
        sj.jacobian(f)(X)
    assert isinstance(info.value, TypeError) and "'w'" in str(info.value)
    with pytest.raises(sj.ArityError, match="takes 2 positional arguments"):
        sj.jit(f)(X, X, X)
    with pytest.raises(sj.ArityError, match="followed by v"):
        sj.jvp(lambda x: x)()


def test_argnums_out_of_range_or_malformed():
    with pytest.raises(sj.ArgumentError) as info:
        sj.jacobian(lambda x, w: x * w, argnums=2)
    assert isinstance(info.value, ValueError) and "takes 2 arguments" in str(info.value)
    with pytest.raises(sj.ArgumentError, match="int or a tuple"):
        sj.grad(lambda x: x, argnums="x")
    with pytest.raises(sj.ArgumentError, match="both differentiated"):
        sj.grad(lambda x, n: x, argnums=1, static_argnums=1)


def test_empty_argnums_says_what_to_give():
    with pytest.raises(sj.ArgumentError, match="selects no argument") as info:
        sj.jacobian(lambda x: x, argnums=())
    assert "sj.jit" in str(info.value)


def test_vmap_axes_out_of_range_are_symjac_errors():
    f = sj.vmap(sj.jacobian(lambda x: x ** 2), in_axes=2)
    with pytest.raises(sj.ShapeError, match="in_axes=2 for argument 0 of shape \\(3, 4\\)"):
        f(np.ones((3, 4)))
    g = sj.vmap(sj.jacobian(lambda x: x ** 2), out_axes=3)
    with pytest.raises(sj.ShapeError, match="out_axes=3 is out of range for a result with 3 axes"):
        g(np.ones((3, 4)))
    with pytest.raises(sj.ArgumentError, match="out_axes must be an int"):
        sj.vmap(lambda x: x, out_axes=None)


def test_sparse_on_a_vector_product_is_an_argument_error():
    with pytest.raises(sj.ArgumentError, match="sparse=True .* apply to sj.jacobian and sj.hessian"):
        sj.vjp(lambda x: x ** 2, sparse=True)
    with pytest.raises(sj.ArgumentError, match="takes no option 'argnum'"):
        sj.jacobian(lambda x: x, argnum=1)


def test_non_numeric_and_complex_inputs():
    with pytest.raises(sj.InputTypeError) as info:
        sj.jit(lambda x, mode: x)(X, "fast")
    assert isinstance(info.value, TypeError) and "static_argnums" in str(info.value)
    with pytest.raises(sj.InputTypeError, match="complex"):
        sj.grad(lambda z: np.sum(z))(np.array([1 + 2j]))


def test_unhashable_static_argument():
    with pytest.raises(sj.ArgumentError, match="hashable") as info:
        sj.jit(lambda x, opts: x, static_argnums=1)(X, {"a": 1})
    assert "got a dict" in str(info.value) and "instead of a dict" in str(info.value)
    with pytest.raises(sj.ArgumentError, match="got a list inside a tuple") as info:
        sj.jit(lambda x, opts: x, static_argnums=1)(X, ("mode", [1, 2]))
    assert "instead of a list" in str(info.value)


def test_unsupported_numpy_function_is_named():
    with pytest.raises(sj.UnsupportedOperationError) as info:
        sj.jacobian(lambda x: np.unique(x))(X)
    msg = str(info.value)
    assert isinstance(info.value, NotImplementedError)
    assert "np.unique" in msg and "supported_operations" in msg
    with pytest.raises(sj.UnsupportedOperationError, match="np.linalg.eigvalsh"):
        sj.jit(lambda x: np.linalg.eigvalsh(x))(np.eye(2))


def test_python_if_on_a_traced_value_names_the_line_and_np_where():
    def f(x):
        if x[0] > 0:  # the offending line
            return x
        return -x

    with pytest.raises(sj.TracerControlFlowError) as info:
        sj.grad(lambda x: np.sum(f(x)))(X)
    msg = str(info.value)
    assert isinstance(info.value, TypeError)
    assert "np.where" in msg and "test_errors.py" in msg and "if x[0] > 0" in msg


def test_while_and_builtin_max_on_traced_values():
    def loop(x):
        while x.sum() < 10:
            x = x * 2
        return x

    with pytest.raises(sj.TracerControlFlowError):
        sj.jit(loop)(X)
    with pytest.raises(sj.TracerControlFlowError, match="np.maximum"):
        sj.jit(lambda x: max(x[0], x[1]))(X)


def test_concretizing_a_traced_value():
    with pytest.raises(sj.TracerConversionError, match="drop the float"):
        sj.jit(lambda x: float(x[0]))(X)

    with pytest.raises(sj.TracerConversionError, match=r"np.where\(cond, 1.0, 0.0\) or cond.astype\(float\)"):
        sj.jit(lambda x: float(x[0] >= 0))(X)

    with pytest.raises(sj.TracerConversionError, match="np.floor.*np.trunc"):
        sj.jit(lambda x: x * int(x[0]))(X)

    buffer = np.zeros(2)

    def fill(x):
        buffer[0] = x[0]  # made outside the traced function: cannot hold a traced value
        return buffer

    with pytest.raises(sj.TracerConversionError, match=r"writes into buffer \(at test_errors.py:\d+: `buffer\[0\] = x\[0\].*Make the array inside"):
        sj.jit(fill)(X)
    def repeat(x, n):
        for _ in range(n):  # n is a runtime input unless static
            x = np.sin(x)
        return x

    with pytest.raises(sj.TracerConversionError, match="static_argnums"):
        sj.jit(repeat)(X, 3)
    np.testing.assert_allclose(sj.jit(repeat, static_argnums=1)(X, 2), np.sin(np.sin(X)))


def test_traced_index_is_rejected_with_a_fix():
    with pytest.raises(sj.UnsupportedOperationError, match="np.where"):
        sj.jit(lambda x: x[x > 2])(X)


def test_every_error_subclasses_symjac_error_and_a_builtin():
    builtins = (ValueError, TypeError, NotImplementedError, RuntimeError, MemoryError)
    for name in dir(sj):
        obj = getattr(sj, name)
        if isinstance(obj, type) and issubclass(obj, Warning):
            assert obj is sj.SymjacWarning or issubclass(obj, sj.SymjacWarning), name
        elif isinstance(obj, type) and issubclass(obj, Exception) and obj is not sj.SymjacError:
            assert issubclass(obj, sj.SymjacError) and issubclass(obj, builtins), name


# ----- unclear errors made clear (issue 12) ------------------------------------------------


def test_a_formatted_debug_print_of_a_traced_value_says_what_to_do():
    def f(x):
        print(f"{x[0]}")  # the symbolic value: fine
        print(f"x0 = {x[0]:.3f}")
        return x * 2

    with pytest.raises(sj.TracerConversionError, match="print\\(x\\)") as info:
        sj.jit(f)(np.ones(2))
    assert "test_errors.py" in str(info.value) and ":.3f" in str(info.value)


def test_a_matmul_shape_mismatch_names_the_users_line():
    def f(x):
        W = np.ones((3, 4))
        return W @ x

    with pytest.raises(sj.ShapeError, match="4 against 3") as info:
        sj.jit(f)(np.ones(3))
    assert isinstance(info.value, ValueError) and "return W @ x" in str(info.value)
    with pytest.raises(sj.ShapeError, match="axis"):
        sj.jit(lambda x: np.tensordot(x, np.ones((2, 2)), axes=1))(np.ones(3))


def test_a_masked_array_is_refused_not_silently_unmasked():
    x = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False])
    with pytest.raises(sj.InputTypeError, match="filled"):
        sj.jit(lambda x: x * 2)(x)
    f = sj.jit(lambda x: x * 2)
    np.testing.assert_array_equal(f(np.ma.masked_array([1.0, 2.0])), [2.0, 4.0])  # nothing masked
    with pytest.raises(sj.InputTypeError):
        f(np.ma.masked_array([1.0, 2.0], mask=[True, False]))  # same shape, now masked


@pytest.mark.parametrize("subscripts, shapes, says", [
    ("ij->i", [(3,)], "'ij' name 2 axes, but operand 0 has 1"),
    ("i,ij->j", [(3,), (3,)], "'ij' name 2 axes, but operand 1 has 1"),
    ("ij,jk", [(2, 3)], "name 2 operands, but 1 was given"),
])
def test_einsum_subscripts_that_do_not_fit_the_operands(subscripts, shapes, says):
    arrays = [np.ones(s) for s in shapes]
    with pytest.raises(sj.ShapeError, match=says):
        sj.jit(lambda *a: np.einsum(subscripts, *a))(*arrays)


def test_tensordot_with_unpaired_axes():
    with pytest.raises(sj.ShapeError, match=r"got 2 axes \[0, 1\] and 1 axes \[0\]"):
        sj.jit(lambda a, b: np.tensordot(a, b, axes=([0, 1], [0])))(np.ones((2, 3)), np.ones((2, 4)))


def test_item_of_a_one_entry_traced_array_says_how_to_index_it():
    def f(x):
        return (x.reshape(1, 1) @ x.reshape(1, 1)).item() * x

    with pytest.raises(sj.TracerConversionError, match=r"x\[0, 0\] is its one entry") as err:
        sj.jacobian(f)(np.ones(1))
    assert isinstance(err.value, TypeError)


def test_a_write_into_a_preallocated_attribute_names_it_and_says_what_to_write():
    """The right-hand side kept as self.rhs and filled in place, as ODE codes do:
    the error used to speak of float() and not name the array."""

    class Model:
        def __init__(self):
            self.rhs, self.k = np.zeros(2), 2.0

        def f(self, y):
            self.rhs[0] = -self.k * y[0]
            self.rhs[1] = y[0] - y[1]
            return self.rhs

    with pytest.raises(sj.TracerConversionError) as err:
        sj.jacobian(Model().f)(np.ones(2))
    message = str(err.value)
    assert message.startswith("the function writes into self.rhs (at test_errors.py:")
    assert "rhs = np.zeros(2)" in message


def test_and_or_operands_are_ordered_without_walking_shared_graphs(monkeypatch):
    """sp.ordered over the operands of And/Or compared whole expressions, walking
    deeply shared select trees as trees: a 16-entry np.sort took 32 s."""
    import sympy as sp

    from symjac.ir import graph as g

    walked = []
    original = sp.ordered

    def ordered(seq, *args, **kwargs):
        seq = list(seq)
        walked.extend(a for a in seq if not a.is_Atom)
        return original(seq, *args, **kwargs)

    monkeypatch.setattr(g.sp, "ordered", ordered)
    x = np.random.default_rng(1).normal(size=12)
    J = sj.jacobian(np.sort)(x)
    np.testing.assert_array_equal(J @ x, np.sort(x))
    assert not walked
