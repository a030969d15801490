"""The transform records (``ir/transforms.py``): each is well formed, every
stage that reads them covers every record, and what a record says is what
the transform does (its result's layout, its options, its vector, its label)."""

import numpy as np
import pytest

import symjac as sj
from symjac import __main__ as cli
from symjac.diff import products
from symjac.diff import tensor as tensor_products
from symjac.ir.transforms import INPUT, KINDS, OUTPUT, RECORDS, VECTOR, Spec
from symjac.show import explain

pytestmark = pytest.mark.usefixtures("tape_only")

IDS = [k.name for k in RECORDS]
X = np.array([0.3, -0.7, 1.1])


def _function(record):
    """A function of the kind the record's transform takes: R^3 -> R, R^3 -> R^3 or R^3 -> R^2."""
    if record.output == "scalar":
        return lambda x: np.sum(np.sin(x) * x**2)
    if record.output == "field":
        return lambda x: np.sin(x) * x[::-1]
    return lambda x: np.stack([np.sum(x**2), np.prod(np.cos(x))])


def _arguments(record, f):
    vector = {"v": (np.ones_like(X),), "u": (np.ones(np.shape(f(X))),)}
    return (X,) + vector.get(record.vector, ())


# ----- the records ---------------------------------------------------------------------------


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_each_record_is_well_formed(record):
    assert set(record.result) <= {OUTPUT, INPUT}
    assert record.vector in (None, "v", "u")
    assert record.output in ("any", "scalar", "field")
    assert record.differentiates == (record.order > 0)
    assert (record.torch is None) == (record.jax is None) == (not record.differentiates)
    assert record.with_vector is None or KINDS[record.with_vector].vector
    assert record.n_extra == (1 if record.vector else 0)


def test_names_labels_and_command_line_names_are_unique():
    for field in ("name", "label", "what"):
        values = [getattr(k, field) for k in RECORDS]
        assert len(set(values)) == len(values), field
    assert VECTOR == {"jvp": "v", "vjp": "u", "hvp": "v"}


# ----- every reader covers every record -------------------------------------------------------


def test_both_tiers_compute_every_record():
    assert set(products._FINISH) == set(KINDS)
    assert set(tensor_products._FINISH) == set(KINDS)


def test_explain_writes_every_record_as_a_formula():
    assert set(explain._FORMULAS) == set(KINDS)


def test_the_command_line_offers_every_record():
    show = next(a for a in cli.parser()._subparsers._group_actions[0].choices["show"]._actions
                if a.dest == "what")
    assert set(show.choices) == {k.what for k in RECORDS}


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_every_record_has_its_public_function(record):
    transform = getattr(sj, record.name)(lambda x: x)
    assert transform.kind == record.name and transform.spec.transform is record


# ----- what a record says is what the transform does ------------------------------------------


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_the_result_is_nested_and_shaped_as_the_record_says(record):
    f = _function(record)
    out_shape = np.shape(f(X))
    result = getattr(sj, record.name)(f)(*_arguments(record, f))
    expected = sum(((out_shape if axis == OUTPUT else X.shape) for axis in record.result), ())
    assert np.shape(result) == expected


@pytest.mark.parametrize("record", [k for k in RECORDS if k.differentiates], ids=lambda k: k.name)
def test_argnums_as_a_tuple_nest_per_argument_where_the_record_has_inputs(record):
    def f2(x, w):
        return _function(record)(x * w)

    args = (X, X[::-1].copy())
    extra = {"v": ((np.ones(3), np.ones(3)),), "u": (np.ones(np.shape(f2(*args))),)}.get(record.vector, ())
    transform = getattr(sj, record.name)(f2, argnums=(0, 1))
    if record.single_argnum:
        with pytest.raises(sj.ArgumentError, match="takes a single argnum"):
            transform(*args, *extra)
        return
    result = transform(*args, *extra)
    if INPUT in record.result:
        assert isinstance(result, tuple) and len(result) == 2
    else:
        assert isinstance(result, np.ndarray)


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_sparse_and_has_aux_are_taken_where_the_record_says(record):
    f = _function(record)
    if record.sparse:
        sj.Transform(f, record.name, sparse=True)
    else:
        with pytest.raises(sj.ArgumentError, match="sparse=True applies to jacobian and hessian"):
            sj.Transform(f, record.name, sparse=True)
    if record.has_aux:
        value, aux = sj.Transform(lambda x: (f(x), x), record.name, has_aux=True)(*_arguments(record, f))
        np.testing.assert_array_equal(aux, X)
    else:
        with pytest.raises(sj.ArgumentError, match="has_aux=True applies to"):
            sj.Transform(f, record.name, has_aux=True)


@pytest.mark.parametrize("record", [k for k in RECORDS if k.output != "any"], ids=lambda k: k.name)
def test_a_transform_of_one_output_refuses_a_container(record):
    with pytest.raises((sj.NonScalarOutputError, sj.ShapeError), match=f"{record.name} needs a function with"):
        getattr(sj, record.name)(lambda x: {"a": _function(record)(x), "b": x})(*_arguments(record, _function(record)))


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_show_labels_and_titles_the_result_as_the_record_says(record):
    f = _function(record)
    text = str(getattr(sj, record.name)(f).show(*_arguments(record, f)))
    assert text.startswith(f"{record.what} of ")
    assert f"\n  {record.label}" in text


@pytest.mark.parametrize("record", [k for k in RECORDS if k.torch], ids=lambda k: k.name)
def test_explain_gives_the_records_peers(record, capsys):
    f = _function(record)
    sj.explain(getattr(sj, record.name)(f), *_arguments(record, f))
    printed = capsys.readouterr().out
    assert "PyTorch: " + record.torch.split("(")[0] in printed and "JAX: " + record.jax.split("(")[0] in printed


def test_an_unknown_transform_is_refused_with_the_list():
    with pytest.raises(sj.ArgumentError, match="no transform 'curl'; the transforms are jacobian, hessian"):
        sj.Transform(lambda x: x, "curl")


def test_a_spec_reads_its_record():
    assert Spec("hvp", (0,), False, 1).transform is KINDS["hvp"]
