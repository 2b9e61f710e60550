"""Every spec that declares ``per_sample_eps`` gives each row what a scalar call at that row's ε gives.

The minimal-ε search calls such a spec once per round with one ε per row (``FixedEpsAttack``), so
a library's code must broadcast the ε tensor row by row. The reference is the library's own scalar
call on the same batch at each of the ε values, seeded alike (random starts draw the same numbers
for the same row): the rows of one ε value must agree with the per-sample call's rows of that
value. A spec whose code mixes rows (an ε read as one number, a shape that broadcasts across rows,
a batch-wide early stop) fails here, and then must not declare ``per_sample_eps``.

Rows are the digits the model classifies correctly: the search never attacks a row whose clean
input is already adversarial. Real libraries, the digits CNN, steps scaled down.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attackaudit.adapters import BUILTIN_LIBRARIES, AttackKind, AttackSpec, load_library
from attackaudit.measure.minimal import EPS_START
from attackaudit.sources.subset import load_subset

SCALE = 0.1
#: each row's multiple of the norm's starting ε: three values, interleaved so that neighbours differ
MULTIPLES = (1.0, 4.0, 2.0, 1.0, 2.0, 4.0, 4.0, 1.0)


def _declared() -> list[AttackSpec]:
    specs = []
    for library in BUILTIN_LIBRARIES:
        entry = load_library(library)
        specs += [s for s in entry.specs if entry.available and s.kind is AttackKind.FIXED and s.per_sample_eps]
    return specs


DECLARED = {spec.key: spec for spec in _declared()}


@pytest.fixture(scope="module")
def rows(model):
    """(inputs, labels) of the first digits the CNN classifies correctly, one per ``MULTIPLES``."""
    sub = load_subset("digits", 32, 0)
    with torch.no_grad():
        correct = model(sub.inputs).argmax(1) == sub.labels
    keep = torch.nonzero(correct).squeeze(1)[:len(MULTIPLES)]
    assert len(keep) == len(MULTIPLES)
    return sub.inputs[keep], sub.labels[keep]


def _seeded_call(spec: AttackSpec, model, x, y, eps) -> torch.Tensor:
    torch.manual_seed(0)
    np.random.seed(0)
    return spec.run(model, x.clone(), y.clone(), eps=eps).detach().float()


def test_the_libraries_declare_per_sample_eps_where_the_conformance_below_holds():
    """The declarations the benchmarks rely on (benchmarks/README.md, "Cost per image"): a change
    of catalogue shows up here, and each declared spec is checked below."""
    expected = {"torchattacks/APGD:ce/l2", "torchattacks/APGD:dlr/l2", "torchattacks/APGD:ce/linf",
                "torchattacks/APGD:dlr/linf", "torchattacks/BIM/linf", "torchattacks/FGSM/linf",
                "foolbox/LinfProjectedGradientDescentAttack/linf", "foolbox/LinfBasicIterativeAttack/linf",
                "foolbox/LinfFastGradientAttack/linf", "cleverhans/fast_gradient_method/l2",
                "cleverhans/fast_gradient_method/linf"}
    available = {lib for lib in BUILTIN_LIBRARIES if load_library(lib).available}
    assert {key for key in expected if key.split("/")[0] in available} <= set(DECLARED)
    assert all(key.split("/")[0] in available for key in DECLARED)


@pytest.mark.parametrize("key", sorted(DECLARED))
def test_a_per_sample_eps_call_gives_each_row_its_scalar_call_s_row(key, model, rows):
    spec = DECLARED[key].scaled(SCALE)
    x, y = rows
    eps = torch.tensor(MULTIPLES, dtype=torch.float32) * EPS_START[spec.norm]
    together = _seeded_call(spec, model, x, y, eps)
    assert together.shape == x.shape
    for value in torch.unique(eps):
        mine = eps == value
        alone = _seeded_call(spec, model, x, y, float(value))
        assert torch.allclose(together[mine], alone[mine], atol=1e-5), (
            f"{key}: rows at ε {float(value):.4g} differ from the scalar call's by "
            f"{float((together[mine] - alone[mine]).abs().max()):.3g}")


def test_the_check_fails_for_a_spec_whose_code_reads_one_eps_for_the_batch(model, rows):
    """The check can fail: torchattacks' APGDT takes the batch apart per target class, so an
    N×1×1×1 ε does not follow its rows (it raises or mixes them); it is not declared."""
    entry = load_library("torchattacks")
    if not entry.available:
        pytest.skip(entry.reason)
    spec = next(s for s in entry.specs if s.key == "torchattacks/APGDT/linf").scaled(SCALE)
    assert not spec.per_sample_eps
    from attackaudit.adapters.torchattacks import _call

    x, y = rows
    eps = torch.tensor(MULTIPLES, dtype=torch.float32) * EPS_START[spec.norm]
    keywords = dict(spec.run.keywords, targeted=False, targets=None)
    keywords.setdefault("alpha_scale", 0.0)
    keywords.setdefault("target_by_map", False)
    try:
        torch.manual_seed(0)
        together = _call(spec.run.args[0], model, x.clone(), y.clone(), eps=eps, **keywords)
    except RuntimeError:
        return  # a shape that does not broadcast: the check's first way to fail
    alone = [(eps == v, _seeded_call(spec, model, x, y, float(v))) for v in torch.unique(eps)]
    assert any(not torch.allclose(together[m].float(), a[m], atol=1e-5) for m, a in alone)
