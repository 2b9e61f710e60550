"""One conformance suite for every adapter and plugin: each (library, spec) through the same checks.

Every spec runs on the real digits CNN with its steps scaled down:

* through the harness (``attack_with_tracker``): no error, a valid detached float32 batch in the
  box, and a quick run that fits the budget (nothing refused);
* called directly on a QueryTracker and on the reference ledger (``tests/reference_ledger.py``,
  the attribution rule one row at a time) with a budget small enough that most attacks run past
  it: per-sample forwards, backwards, refusals, kept bests (points and distances), the returned
  batch or the exception (type and message) must agree. This is the budget check that can fail:
  a fast path that charges the wrong sample, or lets a query through after the budget, disagrees
  with the ledger; an unbounded run of the same seeded attack says whether it went past the
  budget, and then refusals must have happened.

Per library the catalogue is pinned, and known upstream bugs are strict xfails (a fixed release
shows up as an unexpected pass). Plugins run through the same checks: the example plugin always,
any other file with ``ATTACKAUDIT_CONFORMANCE_PLUGINS=a.py:b.py``. Full-step budget checks are
opt-in (``ATTACKAUDIT_FULL_STEPS=1``). Library-specific behaviour lives in
``tests/test_adapter_<library>.py``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import torch
from reference_ledger import ReferenceLedger, assert_agree, same

from attackaudit.adapters import AttackSpec, load_library, load_plugin_file
from attackaudit.adapters.spec import spec_problem
from attackaudit.sources.subset import load_subset, random_targets
from attackaudit.run.job import attack_with_tracker, output_problem, seed_everything
from attackaudit.measure.tracker import QueryTracker

BUDGET = 2000
SCALE = 0.1
#: small enough that most scaled-down attacks run past it on six samples
LEDGER_BUDGET = 24
#: the fixed-ε attacks' ε in the ledger comparison: large enough that some samples break
LEDGER_EPS = {"l0": 8.0, "l1": 4.0, "l2": 1.0, "linf": 0.1}
FULL = os.environ.get("ATTACKAUDIT_FULL_STEPS") == "1"
EXAMPLE_PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "plugin_example.py"


def _scaled(spec: AttackSpec) -> AttackSpec:
    return spec.scaled(SCALE)


@dataclass(frozen=True)
class Expectation:
    """What one library's catalogue and quick runs must show."""

    keys: frozenset[str] | None  # None: whatever the plugin's specs() gives
    families: frozenset[str] | None = None
    known_bugs: dict[str, str] = field(default_factory=dict)
    quick: Callable[[AttackSpec], AttackSpec] = _scaled
    #: specs that must break ≥80% of the digits at the quick scale
    strong: tuple[str, ...] = ()
    #: targeted specs that must reach ≥80% of the targets, with the step scale they need
    targeted: dict[str, float] = field(default_factory=dict)
    #: specs that make the ledger comparison impractically slow (Python loops per row)
    ledger_skip: frozenset[str] = frozenset()
    #: specs that crash past the small ledger budget, on both sides alike, with the reason
    ledger_crashes: dict[str, str] = field(default_factory=dict)


_EAD_ALIAS = ("torchattacks 3.5.1 EAD: y_k = nn.Parameter(images) shares storage with images, so the "
              "first gradient step moves the reference image and outputs leave [0, 1]")
_BB = {f"foolbox/{c}/{n}" for c, n in (("L0BrendelBethgeAttack", "l0"), ("L1BrendelBethgeAttack", "l1"),
                                       ("L2BrendelBethgeAttack", "l2"),
                                       ("LinfinityBrendelBethgeAttack", "linf"))}


def _foolbox_quick(spec: AttackSpec) -> AttackSpec:
    """Brendel-Bethge's numba optimiser compiles on its first step (30 s to minutes per norm and
    process on a busy 2-core machine): by default BB runs its FMN start, batch split, boundary
    search and return path with ``steps=0``; the numba steps run in the opt-in full-step checks."""
    return spec.with_params(steps=0) if spec.key in _BB else spec.scaled(SCALE)


EXPECTATIONS: dict[str, Expectation] = {
    "adv_lib": Expectation(
        keys=frozenset({
            *(f"adv_lib/{a}/{n}" for a in ("fmn", "pdpgd") for n in ("l0", "l1", "l2", "linf")),
            "adv_lib/ddn/l2", "adv_lib/pdgd/l2", "adv_lib/alma/l1", "adv_lib/alma/l2",
            *(f"adv_lib/{a}/{n}" for a in ("fab", "apgd", "apgd:ce", "apgd_targeted")
              for n in ("l1", "l2", "linf")),
            "adv_lib/df/l2", "adv_lib/df/linf", "adv_lib/tr/l2", "adv_lib/tr/linf",
            "adv_lib/carlini_wagner_l2/l2", "adv_lib/carlini_wagner_linf/linf", "adv_lib/vfga/l0",
            "adv_lib/sigma_zero/l0", "adv_lib/pgd_linf/linf"}),
        strong=("adv_lib/pgd_linf/linf", "adv_lib/ddn/l2"),
        targeted={"adv_lib/fmn/l2": SCALE},
    ),
    "art": Expectation(
        keys=frozenset({
            *(f"art/AutoProjectedGradientDescent:{v}/{n}" for v in ("ce", "dlr") for n in ("l1", "l2", "linf")),
            *(f"art/ProjectedGradientDescent/{n}" for n in ("l1", "l2", "linf")),
            *(f"art/FastGradientMethod/{n}" for n in ("l1", "l2", "linf")),
            "art/BasicIterativeMethod/linf", "art/CarliniL2Method/l2", "art/CarliniLInfMethod/linf",
            "art/DeepFool/l2", "art/ElasticNet/l1", "art/SaliencyMapMethod/l0"}),
        strong=("art/ProjectedGradientDescent/linf", "art/BasicIterativeMethod/linf"),
        targeted={"art/ProjectedGradientDescent/linf": SCALE, "art/ProjectedGradientDescent/l2": SCALE},
        # one sample at a time, hundreds of steps: minutes through the row-by-row ledger
        ledger_skip=frozenset({"art/CarliniL2Method/l2", "art/CarliniLInfMethod/linf", "art/ElasticNet/l1"}),
    ),
    "cleverhans": Expectation(
        keys=frozenset({
            "cleverhans/fast_gradient_method/l2", "cleverhans/fast_gradient_method/linf",
            "cleverhans/projected_gradient_descent/l2", "cleverhans/projected_gradient_descent/linf",
            "cleverhans/carlini_wagner_l2/l2"}),
        families=frozenset({"fgm", "pgd", "cw"}),
        strong=("cleverhans/projected_gradient_descent/linf",),
        # CW needs its iterations to reach a target
        targeted={"cleverhans/projected_gradient_descent/linf": SCALE, "cleverhans/carlini_wagner_l2/l2": 0.5},
    ),
    "foolbox": Expectation(
        keys=frozenset({
            "foolbox/L0FMNAttack/l0", "foolbox/L1FMNAttack/l1", "foolbox/L2FMNAttack/l2",
            "foolbox/LInfFMNAttack/linf", "foolbox/DDNAttack/l2", "foolbox/L2CarliniWagnerAttack/l2",
            "foolbox/EADAttack/l1", "foolbox/L2DeepFoolAttack/l2", "foolbox/LinfDeepFoolAttack/linf",
            "foolbox/L1FastGradientAttack/l1", "foolbox/L2FastGradientAttack/l2",
            "foolbox/LinfFastGradientAttack/linf", *_BB,
            *(f"foolbox/{p}{a}/{n}" for p, n in (("L1", "l1"), ("L2", "l2"), ("Linf", "linf"))
              for a in ("ProjectedGradientDescentAttack", "BasicIterativeAttack"))}),
        families=frozenset({"fmn", "ddn", "cw", "ead", "deepfool", "pgd", "bim", "fgm", "bb"}),
        quick=_foolbox_quick,
        ledger_crashes={"foolbox/L0BrendelBethgeAttack/l0": (
            "foolbox 3.3.4 L0FMNAttack.project (BB's start) indexes past the last pixel once ε reaches "
            "the pixel count, which the refusals' zero gradients drive it to")},
        strong=("foolbox/LinfProjectedGradientDescentAttack/linf",),
        targeted={"foolbox/L2FMNAttack/l2": SCALE, "foolbox/LinfProjectedGradientDescentAttack/linf": SCALE},
    ),
    "torchattacks": Expectation(
        keys=frozenset({
            *(f"torchattacks/APGD:{v}/{n}" for v in ("ce", "dlr") for n in ("l2", "linf")),
            "torchattacks/APGDT/l2", "torchattacks/APGDT/linf", "torchattacks/PGD/linf",
            "torchattacks/PGDL2/l2", "torchattacks/BIM/linf", "torchattacks/FGSM/linf",
            *(f"torchattacks/FAB/{n}" for n in ("l1", "l2", "linf")), "torchattacks/CW/l2",
            "torchattacks/DeepFool/l2", "torchattacks/SparseFool/l0", "torchattacks/SparseFool/l1",
            "torchattacks/EADL1/l1", "torchattacks/EADEN/l1", "torchattacks/JSMA/l0"}),
        known_bugs={
            "torchattacks/FAB/l1": ("torchattacks 3.5.1 FAB.perturb computes the distance only for Linf "
                                    "and L2: norm='L1' raises UnboundLocalError"),
            "torchattacks/EADL1/l1": _EAD_ALIAS,
            "torchattacks/EADEN/l1": _EAD_ALIAS,
        },
        strong=("torchattacks/PGD/linf", "torchattacks/APGD:ce/linf"),
        targeted={"torchattacks/PGD/linf": SCALE, "torchattacks/PGDL2/l2": SCALE, "torchattacks/JSMA/l0": SCALE},
        # a Python loop per pixel or per sample: 10–20 s each through the row-by-row ledger
        ledger_skip=frozenset({"torchattacks/SparseFool/l0", "torchattacks/SparseFool/l1", "torchattacks/JSMA/l0"}),
    ),
}


def _plugin_files() -> list[Path]:
    extra = os.environ.get("ATTACKAUDIT_CONFORMANCE_PLUGINS", "")
    return [EXAMPLE_PLUGIN, *(Path(p) for p in extra.split(os.pathsep) if p)]


def _entries() -> dict[str, tuple[object, Expectation]]:
    """library name → (its LibraryEntry, what it must show), built-ins first, then plugins."""
    entries = {name: (load_library(name), expect) for name, expect in EXPECTATIONS.items()}
    for path in _plugin_files():
        for entry in load_plugin_file(path):
            expect = Expectation(keys=None, strong=tuple(s.key for s in entry.specs
                                                         if s.norm == "linf" and s.kind == "fixed"))
            entries[entry.library] = (entry, expect)
    return entries


ENTRIES = _entries()
SPECS: dict[str, AttackSpec] = {s.key: s for entry, _ in ENTRIES.values() if entry.available for s in entry.specs}
EXPECT: dict[str, Expectation] = {s.key: ENTRIES[s.library][1] for s in SPECS.values()}


def _cases(keys, skip: Callable[[str], bool] = lambda key: False, bugs_fail: bool = True) -> list:
    """pytest params for spec keys: known bugs strict-xfail (when the check runs into them), specs
    of an absent library skip."""
    params = []
    for key in sorted(keys):
        expect = EXPECT.get(key)
        if key not in SPECS:
            params.append(pytest.param(key, marks=pytest.mark.skip(reason=f"{key}: library not available")))
        elif bugs_fail and key in expect.known_bugs:
            params.append(pytest.param(key, marks=pytest.mark.xfail(strict=True, raises=AssertionError,
                                                                    reason=expect.known_bugs[key])))
        elif skip(key):
            params.append(pytest.param(key, marks=pytest.mark.skip(reason="too slow for the row-by-row ledger")))
        else:
            params.append(key)
    return params


def _check_output(returned, error: str, x: torch.Tensor) -> None:
    assert error == ""
    assert output_problem(returned, x) == ""
    assert returned.shape == x.shape and returned.dtype == torch.float32
    assert not returned.requires_grad
    assert float(returned.min()) >= 0 and float(returned.max()) <= 1


@pytest.mark.parametrize("library", sorted(ENTRIES))
def test_catalogue(library):
    entry, expect = ENTRIES[library]
    assert entry.available, entry.reason
    keys = {s.key for s in entry.specs}
    if expect.keys is not None:
        assert keys == expect.keys
    if expect.families is not None:
        assert {s.family for s in entry.specs} == expect.families
    for spec in entry.specs:
        assert spec.library == library
        assert spec_problem(spec) == "", spec.key  # the plugin contract holds for built-ins too
        assert spec.targeted_support or spec.note, f"{spec.key}: untargeted-only without a note"


#: spec key → (tracker, returned, error) of its seeded quick run on the module's model and data: the
#: budget test and the strong-attack test check the same run, which is made once (the model and data
#: fixtures are module-scoped, so one module's runs all see the same inputs)
_QUICK_RUNS: dict[str, tuple] = {}


def _quick_run(key: str, model, x: torch.Tensor, y: torch.Tensor) -> tuple:
    """The seeded quick run of ``key`` at ``BUDGET``, made on the first call and kept for the module."""
    if key not in _QUICK_RUNS:
        seed_everything(0)
        _QUICK_RUNS[key] = attack_with_tracker(EXPECT[key].quick(SPECS[key]), model, x, y, budget=BUDGET)
    return _QUICK_RUNS[key]


@pytest.mark.parametrize("key", _cases(SPECS.keys() | {k for e in EXPECTATIONS.values() for k in e.keys}))
def test_spec_runs_within_budget(key, model, data):
    x, y = data
    tracker, returned, error = _quick_run(key, model, x, y)
    _check_output(returned, error, x)
    assert int(tracker.refused.sum()) == 0  # the quick steps fit the budget: nothing was refused


def _ledger_call(spec: AttackSpec, wrapper, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | str:
    """The seeded attack on ``wrapper``: its output, or its crash as "Type: message" (a crash is
    data; both sides must crash alike)."""
    seed_everything(0)
    eps = LEDGER_EPS[spec.norm]
    kw = {} if spec.kind == "minimal" else {
        "eps": torch.full((len(x),), eps) if spec.per_sample_eps else eps}  # ε's two forms
    try:
        return spec.run(wrapper, x.clone(), y.clone(), **kw)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("key", _cases(SPECS, skip=lambda key: key in EXPECT[key].ledger_skip, bugs_fail=False))
def test_counts_agree_with_the_reference_ledger(key, model, data):
    """Past a small budget: the same seeded attack on the tracker and on the ledger is charged
    identically, sample by sample, refusals included, keeps the same bests (points and distances)
    and returns (or raises) the same. An unbounded run of the same seeded attack tells whether it
    runs past the budget: until the first refusal both runs are the same computation, so one that
    goes past it must be refused, and one that stays within it is charged as the unbounded run."""
    x, y = data
    spec = EXPECT[key].quick(SPECS[key])
    tracker = QueryTracker(model, x, y, norm=spec.norm, budget=LEDGER_BUDGET)
    ledger = ReferenceLedger(model, x, y, norm=spec.norm, budget=LEDGER_BUDGET)
    unbounded = QueryTracker(model, x, y, norm=spec.norm, budget=10**9)
    outcome = _ledger_call(spec, tracker, x, y)
    ref_outcome = _ledger_call(spec, ledger, x, y)
    free_outcome = _ledger_call(spec, unbounded, x, y)
    if isinstance(outcome, str) or isinstance(ref_outcome, str):
        assert outcome == ref_outcome, (outcome, ref_outcome)  # the same exception type and message
    else:
        assert same(outcome, ref_outcome), f"{key}: the attack returned different outputs"
    crashes = {**EXPECT[key].known_bugs, **EXPECT[key].ledger_crashes}
    assert isinstance(outcome, torch.Tensor) or key in crashes, outcome
    assert_agree(tracker, ledger, key)
    assert sum(ledger.forwards) > 0, f"{key} never queried the model"
    needed = int((unbounded.queries + unbounded.refused).max())
    if needed > LEDGER_BUDGET:
        assert int(tracker.refused.sum()) > 0, f"{key} needs {needed} queries on a sample, none refused at {LEDGER_BUDGET}"
    else:
        assert tracker.refused.sum() == 0 and torch.equal(tracker.queries, unbounded.queries), key
        assert isinstance(free_outcome, str) == isinstance(outcome, str), (outcome, free_outcome)


@pytest.mark.parametrize("key", _cases({k for e in ENTRIES.values() for k in e[1].strong}))
def test_strong_attacks_make_most_samples_adversarial(key, model, data):
    x, y = data
    tracker, returned, error = _quick_run(key, model, x, y)
    assert error == ""
    assert torch.isfinite(tracker.best_distance).float().mean() >= 0.8
    with torch.no_grad():
        assert (model(returned).argmax(1) != y).float().mean() >= 0.8


@pytest.mark.parametrize("key", _cases({k for e in EXPECTATIONS.values() for k in e.targeted}))
def test_targeted_reaches_the_target(key, model, data):
    x, y = data
    targets = random_targets(y, 10, 0)
    seed_everything(0)
    spec = SPECS[key].scaled(EXPECT[key].targeted[key])
    _, returned, error = attack_with_tracker(spec, model, x, y, budget=BUDGET, targets=targets)
    assert error == ""
    with torch.no_grad():
        hit = model(returned).argmax(1) == targets
    assert hit.float().mean() >= 0.8


@pytest.mark.skipif(not FULL, reason="set ATTACKAUDIT_FULL_STEPS=1")
@pytest.mark.parametrize("key", _cases(SPECS))
def test_full_steps_fit_the_budget(key, model):
    # twenty samples cover all ten classes: ART's class gradients cost one backward per
    # distinct label in the batch, charged to every row
    sub = load_subset("digits", 20, 0)
    seed_everything(0)
    tracker, returned, error = attack_with_tracker(SPECS[key], model, sub.inputs, sub.labels, budget=BUDGET)
    _check_output(returned, error, sub.inputs)
    assert int(tracker.refused.sum()) == 0


@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_adv_lib_trust_region_reaches_the_digits_boundary(norm, model, data):
    """adv-lib's TR at its catalogue settings (50 iterations, the adaptive trust region) breaks the
    digits; its default fixed region (0.001 per step) broke none of them, which the demo reported as a
    silent failure of adv-lib when it was this adapter's choice."""
    x, y = data
    spec = SPECS[f"adv_lib/tr/{norm}"]
    assert spec.params["adaptive"] is True
    tracker, returned, error = attack_with_tracker(spec, model, x, y, budget=BUDGET)
    assert error == ""
    assert torch.isfinite(tracker.best_distance).float().mean() >= 0.8
    fixed = spec.with_params(adaptive=False)
    tracker, _, error = attack_with_tracker(fixed, model, x, y, budget=BUDGET)
    assert error == "" and torch.isfinite(tracker.best_distance).float().mean() < 0.5
