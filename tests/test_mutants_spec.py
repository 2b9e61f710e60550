"""``attackaudit.adapters.spec``: what mutation testing found the suite left unchecked (docs/testing.md).

An ``AttackSpec`` is what every adapter and plugin declares; ``spec_problem`` is the one-line
reason a plugin's spec cannot run as declared (shown when the plugin is loaded), ``scaled`` /
``with_params`` are how ``--steps-scale`` reaches the attack, and ``num_classes`` is how an attack
learns the class count. Each test builds real specs around small functions and reads what a
user would: the problem line, the params recorded, the arguments the attack is called with.
"""
from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from attackaudit.adapters.spec import AttackKind, AttackSpec, num_classes, spec_problem

WHERE = "attack mine/x/linf"


def minimal(model, inputs, labels, *, targeted=False, targets=None, steps=1, sizes=None):
    return {"steps": steps, "sizes": sizes, "targeted": targeted}


def fixed(model, inputs, labels, *, eps, targeted=False, targets=None, steps=1):
    return {"eps": eps, "steps": steps}


def untargeted_only(model, inputs, labels, *, steps=1):
    return steps


def needs_targets(model, inputs, labels, *, targeted, targets):
    return targets


def with_scale(scale, model, inputs, labels, *, targeted=False, targets=None, steps=1):
    return {"scale": scale, "steps": steps}


class CallableAttack:
    """An attack object (no ``__qualname__`` of its own, as an instance)."""

    def __call__(self, model, inputs, labels, *, targeted=False, targets=None, steps=1):
        return steps


def spec(run=None, params=None, *, kind="minimal", **fields) -> AttackSpec:
    params = {} if params is None else params
    run = functools.partial(minimal, **params) if run is None else run
    return AttackSpec(fields.pop("library", "mine"), fields.pop("name", "x"), "fgm", "linf", kind, params, run,
                      **fields)


# -- construction -------------------------------------------------------------------------------------
def test_a_spec_keeps_its_kind_as_attackkind_and_rejects_bad_fields():
    s = spec(kind="fixed", run=functools.partial(fixed))
    assert s.kind is AttackKind.FIXED and type(s.kind) is AttackKind and f"{s.kind}" == "fixed"
    assert spec().kind is AttackKind.MINIMAL
    with pytest.raises(ValueError) as caught:
        AttackSpec("mine", "x", "fgm", "L3", "minimal", {}, minimal)
    assert str(caught.value) == "AttackSpec mine/x: norm 'L3' is not one of ('l0', 'l1', 'l2', 'linf')"
    with pytest.raises(ValueError) as caught:
        AttackSpec("mine", "x", "fgm", "l2", "fixd", {}, minimal)
    assert str(caught.value) == "AttackSpec mine/x: kind 'fixd' is not one of ('minimal', 'fixed')"


def test_targeted_only_needs_targeted_support():
    with pytest.raises(ValueError) as caught:
        spec(targeted_only=True, targeted_support=False)
    assert str(caught.value) == ("AttackSpec mine/x: targeted_only=True with targeted_support=False would never run; "
                                 "drop one of them")
    assert spec(targeted_only=True).targeted_only  # with support: fine
    assert not spec(targeted_support=False).targeted_support  # untargeted only: fine


# -- with_params, scaled, steps_at ---------------------------------------------------------------------
def test_with_params_changes_the_params_and_what_the_run_receives():
    base = spec(functools.partial(with_scale, 0.5, steps=10, targeted=False), {"steps": 10, "targeted": False},
                steps_param="steps")
    changed = base.with_params(steps=3)
    assert changed.params == {"steps": 3, "targeted": False}
    assert changed.run(None, None, None) == {"scale": 0.5, "steps": 3}  # positional and other keywords kept
    assert changed.run.func is with_scale
    assert base.params == {"steps": 10, "targeted": False} and base.run(None, None, None)["steps"] == 10
    assert spec_problem(changed) == ""


def test_with_params_refuses_a_run_that_is_not_a_partial():
    with pytest.raises(TypeError) as caught:
        spec(untargeted_only).with_params(steps=2)
    assert str(caught.value) == "mine/x/linf: run is not a functools.partial, its params cannot be changed"


@pytest.mark.parametrize("factor, steps", [(0.5, 5), (2, 20), (0.26, 3), (0.01, 1), (0.001, 1), (1.04, 10)])
def test_scaled_rounds_the_steps_and_keeps_at_least_one(factor, steps):
    s = spec(params={"steps": 10}, steps_param="steps")
    scaled = s.scaled(factor)
    assert scaled.params["steps"] == steps == s.steps_at(factor)
    assert scaled.run(None, None, None)["steps"] == steps


def test_scaled_leaves_alone_what_it_cannot_or_need_not_scale():
    s = spec(params={"steps": 10}, steps_param="steps")
    assert s.scaled(1) is s and s.steps_at(1) == 10
    no_steps = spec(params={"steps": 10})  # no steps_param: nothing to scale
    assert no_steps.scaled(0.5) is no_steps and no_steps.steps_at(0.5) is None
    plain = spec(untargeted_only, steps_param="steps")  # not a partial: spec_problem says so, scaled leaves it
    assert plain.scaled(0.5) is plain


# -- spec_problem: one line per way a spec cannot run as declared --------------------------------------
def test_valid_specs_have_no_problem():
    assert spec_problem(spec(params={"steps": 2}, steps_param="steps")) == ""
    assert spec_problem(spec(untargeted_only, targeted_support=False)) == ""
    assert spec_problem(spec(functools.partial(fixed), kind="fixed")) == ""
    assert spec_problem(spec(needs_targets, targeted_only=True)) == ""
    assert spec_problem(spec(functools.partial(CallableAttack(), steps=3), {"steps": 3})) == ""
    assert spec_problem(spec(max)) == "" and spec_problem(spec(functools.partial(max))) == ""  # no signature


def test_norm_and_kind_changed_after_construction_are_named():
    s = spec()
    object.__setattr__(s, "norm", "L3")
    assert spec_problem(s) == "attack mine/x/L3: norm 'L3' is not one of l0, l1, l2, linf"
    s = spec()
    object.__setattr__(s, "kind", "fixd")
    assert spec_problem(s) == f"{WHERE}: kind 'fixd' is not one of minimal, fixed"


def test_library_name_empty_name_and_run_not_callable():
    assert spec_problem(spec(library="my lib")) == ("attack my lib/x/linf: library name 'my lib' must be letters, "
                                                    "digits, '_', '.' or '-'")
    assert spec_problem(spec(library="")) == "attack /x/linf: library name '' must be letters, digits, '_', '.' or '-'"
    assert spec_problem(spec(library="my_lib-2.0")) == ""
    assert spec_problem(spec(name="")) == "attack mine//linf: name is empty"
    assert spec_problem(spec(42)) == f"{WHERE}: run is int, not callable"


def test_steps_param_must_name_a_positive_integer_param():
    assert spec_problem(spec(params={"a": 1, "b": 2}, steps_param="steps",
                             run=functools.partial(minimal, a=1, b=2))) == (
        f"{WHERE}: steps_param 'steps' is not a key of params ('a', 'b'); --steps-scale would do nothing")
    assert spec_problem(spec(steps_param="steps")) == (
        f"{WHERE}: steps_param 'steps' is not a key of params (empty); --steps-scale would do nothing")
    for bad in (0, -3, True, 1.5, 2.0):
        assert spec_problem(spec(params={"steps": bad}, steps_param="steps")) == (
            f"{WHERE}: params['steps'] = {bad!r} is not a positive integer number of steps")
    assert spec_problem(spec(params={"steps": 1}, steps_param="steps")) == ""


def test_params_must_be_the_keywords_the_run_gets():
    assert spec_problem(spec(minimal, {"steps": 2})) == (
        f"{WHERE}: run is not a functools.partial, so its params cannot be overridden; "
        "write run=functools.partial(fn, **params)")
    assert spec_problem(spec(functools.partial(minimal), {"steps": 2})) == (
        f"{WHERE}: params['steps'] is not a keyword of its functools.partial run; "
        "write run=functools.partial(fn, **params)")
    assert spec_problem(spec(functools.partial(minimal, steps=3), {"steps": 2})) == (
        f"{WHERE}: params['steps'] = 2 but run passes 3; the recorded params must be those it runs with")
    # equal values that are other objects are the same params; tensors only when they are one object
    assert spec_problem(spec(functools.partial(minimal, sizes=[1, 2]), {"sizes": [1, 2]})) == ""
    t = torch.arange(3)
    assert spec_problem(spec(functools.partial(minimal, sizes=t), {"sizes": t})) == ""
    assert spec_problem(spec(functools.partial(minimal, sizes=t.clone()), {"sizes": t})).startswith(
        f"{WHERE}: params['sizes'] = tensor([0, 1, 2]) but run passes tensor([0, 1, 2])")


def test_a_misspelt_bound_param_names_the_function():
    problem = spec_problem(spec(functools.partial(minimal, stepz=3), {"stepz": 3}))
    assert problem == (f"{WHERE}: run's bound params do not fit minimal() (got an unexpected keyword argument "
                       "'stepz'); check their spelling")
    problem = spec_problem(spec(functools.partial(CallableAttack(), stepz=3), {"stepz": 3}))
    assert problem.startswith(f"{WHERE}: run's bound params do not fit CallableAttack() (")
    problem = spec_problem(spec(functools.partial(minimal, 1, 2, 3, 4)))  # one positional too many
    assert problem == (f"{WHERE}: run's bound params do not fit minimal() (too many positional arguments); "
                       "check their spelling")


def test_the_run_must_take_the_calls_of_its_kind():
    # a fixed-ε attack without eps
    assert spec_problem(spec(functools.partial(minimal), kind="fixed")) == (
        f"{WHERE}: run cannot be called as run(model, inputs, labels, eps=...) (got an unexpected keyword argument "
        "'eps'); see FixedEpsAttack")
    # an attack without targeted/targets that declares targeted support
    assert spec_problem(spec(untargeted_only)) == (
        f"{WHERE}: run cannot be called as run(model, inputs, labels, targeted=..., targets=...) (got an unexpected "
        "keyword argument 'targeted'); see MinimalAttack")
    # an attack that needs targets but is not declared targeted_only
    assert spec_problem(spec(needs_targets)) == (
        f"{WHERE}: run cannot be called as run(model, inputs, labels) (missing a required argument: 'targeted'); "
        "see MinimalAttack")
    assert spec_problem(spec(lambda model, inputs: inputs)).startswith(
        f"{WHERE}: run cannot be called as run(model, inputs, labels) (too many positional arguments)")


# -- num_classes ---------------------------------------------------------------------------------------
class Counting(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.linear = nn.Linear(4, classes)
        self.rows: list[int] = []

    def forward(self, x):
        self.rows.append(len(x))
        return self.linear(x.flatten(1))


def test_num_classes_reads_the_trackers_count_or_costs_one_row():
    inputs = torch.rand(5, 1, 2, 2)
    model = Counting(7)
    assert num_classes(model, inputs) == 7 and model.rows == [1]
    model.num_classes = torch.tensor(3)  # known without a query (the QueryTracker's attribute)
    n = num_classes(model, inputs)
    assert n == 3 and type(n) is int and model.rows == [1]


# -- the attack protocols ------------------------------------------------------------------------------
def test_the_attack_protocols_say_an_untargeted_call_passes_neither_targeted_nor_targets():
    # the published signatures (docs/api.md renders them; plugin authors copy them): untargeted runs
    # pass neither argument, so an attack must default to untargeted with no targets
    import inspect

    from attackaudit.adapters.spec import FixedEpsAttack, MinimalAttack

    for protocol in (MinimalAttack, FixedEpsAttack):
        params = inspect.signature(protocol.__call__).parameters
        assert params["targeted"].default is False and params["targeted"].kind is inspect.Parameter.KEYWORD_ONLY
        assert params["targets"].default is None
    assert inspect.signature(FixedEpsAttack.__call__).parameters["eps"].default is inspect.Parameter.empty
