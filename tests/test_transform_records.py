"""The transform records (``ir/transforms.py``): each is well formed, every
stage that reads them covers every record, and what a record says is what
the transform does (its result's layout, its options, its vector, its label)."""

import numpy as np
import pytest

import symjac as sj
from symjac import __main__ as cli
from symjac.diff import products
from symjac.diff import tensor as tensor_products
from symjac.ir.transforms import INPUT, KINDS, OUTPUT, RECORDS, STEPS, VECTOR, Kind, Spec, nesting
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


def test_both_tiers_implement_every_step_and_every_record_is_made_of_steps():
    assert set(products._STEPS) == set(tensor_products._STEPS) == set(STEPS)
    for record in RECORDS:
        assert set(record.steps) <= set(STEPS)
        assert record.result == nesting(record.steps)


@pytest.mark.parametrize("steps, why", [
    (("jvp", "vjp"), "must be the first step"),
    (("trace",), "pairs a level with a last input level"),
    (("jacobian", "gradient"), "takes one scalar"),
    (("curl",), "is none of jacobian, jvp"),
])
def test_a_chain_the_steps_cannot_make_is_refused(steps, why):
    with pytest.raises(ValueError, match=why):
        nesting(steps)


def test_explain_writes_hand_written_formulas_only_for_records():
    assert set(explain._FORMULAS) <= set(KINDS)


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


# ----- a new transform is one record ---------------------------------------------------------------
# Records made here, in the test, and nowhere else: each one is computed by both tiers from
# its steps, called through sj.Transform, shown and explained, with no code of its own.

NEW = {
    "third": Kind("third", "T", "third derivative", ("jacobian", "jacobian", "jacobian"), order=3),
    "grad_div": Kind("grad_div", "gd", "gradient of divergence", ("jacobian", "trace", "gradient"), order=2,
                     output="field", single_argnum=True),
    "laplacians": Kind("laplacians", "L", "laplacian per output", ("jacobian", "jacobian", "trace"), order=2),
    "jvp_of_jacobian": Kind("jvp_of_jacobian", "Jv'", "jvp of jacobian", ("jacobian", "jvp"), order=2, vector="v"),
}


@pytest.fixture
def new_records(monkeypatch):
    for name, record in NEW.items():
        monkeypatch.setitem(KINDS, name, record)


def _vector(x):
    return np.stack([np.sum(np.sin(x) * x**2), np.exp(np.sum(np.cos(x))) * x[0]])


def _field(x):
    return np.sin(x) * x[::-1] ** 2


def _reference(name, x, v):
    if name == "third":
        return sj.jacobian(sj.hessian(_vector))(x)
    if name == "grad_div":
        return sj.grad(sj.divergence(_field))(x)
    if name == "laplacians":
        return np.array([sj.laplacian(lambda x, k=k: _vector(x)[k])(x) for k in range(2)])
    return sj.jvp(sj.jacobian(_vector))(x, v)


@pytest.mark.usefixtures("new_records")
@pytest.mark.parametrize("tier", ["scalar", "array"])
@pytest.mark.parametrize("name", list(NEW))
def test_a_new_record_is_a_transform_on_both_tiers(name, tier):
    record = NEW[name]
    f = _field if record.output == "field" else _vector
    x, v = np.array([0.3, -0.7, 1.1]), np.array([0.5, 2.0, -1.0])
    args = (x, v) if record.vector else (x,)
    want = _reference(name, x, v)
    with sj.using_tier(tier):
        transform = sj.Transform(f, name)
        got = transform(*args)
        assert transform.info(*args).why.startswith(f"{tier} tier")
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    expected = sum(((np.shape(f(x)) if axis == OUTPUT else x.shape) for axis in record.result), ())
    if "trace" not in record.steps:
        assert np.shape(got) == expected


@pytest.mark.usefixtures("new_records")
@pytest.mark.parametrize("tier", ["scalar", "array"])
def test_a_new_record_nests_per_argnum_as_its_steps_say(tier):
    """Three input levels: [argnum][argnum][argnum] for a tuple argnums, as
    sj.jacobian(sj.hessian(f, argnums=(0, 1)), argnums=(0, 1)) nests them."""
    def f(x, w):
        return np.sum(np.sin(x * w) * x**2) + w[0] ** 3 * x[1]

    x, w = np.array([0.3, -0.7, 1.1]), np.array([0.2, 0.4, -0.9])
    with sj.using_tier(tier):
        got = sj.Transform(f, "third", argnums=(0, 1))(x, w)
    want = sj.jacobian(sj.hessian(f, argnums=(0, 1)), argnums=(0, 1))(x, w)
    for a in range(2):
        for b in range(2):
            for c in range(2):
                np.testing.assert_allclose(got[a][b][c], want[a][b][c], rtol=1e-12, atol=1e-14)


@pytest.mark.usefixtures("new_records")
def test_a_new_record_is_shown_and_explained_from_its_steps(capsys):
    x = np.array([0.3, -0.7, 1.1])
    text = str(sj.Transform(_field, "grad_div").show(x))
    assert text.startswith("gradient of divergence of ") and "\n  gd[" in text
    sj.explain(sj.Transform(_field, "grad_div"), x)
    printed = capsys.readouterr().out
    assert "the result is jacobian, then trace, then gradient" in printed
    assert "D1[i, j] = ∂y[i] / ∂x[j], shape (3, 3)" in printed
    assert "D2 = Σ_i D1[i, i], shape ()" in printed
    assert "result[k] = ∂D2 / ∂x[k], shape (3,)" in printed
    sj.explain(sj.Transform(_vector, "grad_div"), x)  # a trace the output's shape does not fit
    assert "✗ grad_div traces D1 over x's indices, but D1 has shape (2, 3)" in capsys.readouterr().out
