"""The run twins of ``--metamorphic``: the same network on the same samples, the attack run another way.

- ``M~seed`` (the seed twin): the attack with another seed: the job's global RNG seed (torch,
  numpy, ``random``) moved by ``SEED_OFFSET``, and so is the spec's own ``seed`` parameter when it
  has one (torchattacks' APGD reseeds itself from it on every call). Only randomised specs get
  one (``is_randomised``): a deterministic attack on another seed is itself again. The subset and
  the targets still come from the job's seed, so the twin attacks the same images towards the
  same targets. Its spread against ``M`` is the attack's own noise floor (fidelity's
  ``batch_dependence`` and the label-evidence rules read it).
- ``M~split`` (the batch-split twin): the attack called on one sample at a time (batch size 1,
  whatever ``--batch-size`` says). A sound attack's result for a sample does not depend on the
  rest of the batch; a step size, stopping test or normalisation computed over the batch does.
  The strict check, but one call per image: on a few images (``split_samples``).
- ``M~batch`` (the batch-composition twin): every image of the run, in another arrangement: the
  order reversed and **companions** added to the batch: the dataset's next images in the subset's
  order, half as many as the job's (``companions``, ``arrangement``), the first of them labelled as
  a class the model does not predict, so adversarial from the start (``already_adversarial``).
  Every image shares its call with other images than on ``M``: a batch-wide mean, sum or maximum
  moves, and a stop on "one image done" comes at once. The job is still one call. The
  companions' rows are attacked and dropped: results are the run's images'. Where the dataset has
  no image left, the twin falls back to half batches (two calls).

``--metamorphic`` adds all three on the first real model of the run (``run_twin_models``), beside
the model twins ``~shift`` and ``~perm`` on every model (``attackaudit.sources.zoo``). Whether an
attack is randomised is measured by the job (``rng_used``: its call moved a global random state);
a spec's ``randomised`` and ``moves_global_rng`` only decide which specs get a seed twin.
"""
from __future__ import annotations

import math

import torch

from attackaudit.measure.criterion import Targeted
from attackaudit.results.schema import BATCH, RUN_TWINS, SEED, SPLIT, Twin

#: the seed twin's global seed and ``seed`` parameter are the job's plus this
SEED_OFFSET = 1


def is_randomised(spec) -> bool:
    """Whether ``spec``'s results depend on the seed, as it declares (``AttackSpec.randomised``:
    measured for the built-ins, ``spec.declare_randomness``)."""
    return bool(spec.randomised)


def needs_seed_twin(spec) -> bool:
    """Whether ``--metamorphic`` gives ``spec`` a seed twin: randomised ones, built-ins that move a
    global random state (``AttackSpec.moves_global_rng``), and every plugin spec, declared or not
    (whether a plugin draws random numbers is measured on its rows, ``rng_used``, never taken from its spec)."""
    from attackaudit.adapters import BUILTIN_LIBRARIES

    return is_randomised(spec) or spec.moves_global_rng or spec.library not in BUILTIN_LIBRARIES


def randomised_builtins() -> frozenset[str]:
    """The built-in implementations whose specs declare ``randomised`` (the installed libraries'),
    for the benchmarks that measure seed noise."""
    from attackaudit.adapters import BUILTIN_LIBRARIES, catalogue

    return frozenset(s.implementation for e in catalogue(list(BUILTIN_LIBRARIES)) for s in e.specs if s.randomised)


def run_twin_models(models: list[Twin]) -> list[Twin]:
    """What ``--metamorphic`` adds for the run twins: all three, on the first real model."""
    real = [m for m in models if not m.is_twin]
    return [real[0].of(kind) for kind in RUN_TWINS] if real else []


def has_job(model: Twin, spec) -> bool:
    """Whether the grid holds a job for ``spec`` on ``model``: a seed twin only where ``needs_seed_twin``."""
    return model.kind != SEED or needs_seed_twin(spec)


def attack_seed(model: Twin, seed: int) -> int:
    """The global RNG seed of the attack of a job on ``model`` whose run seed is ``seed``."""
    return seed + SEED_OFFSET if model.kind == SEED else seed


def twin_spec(spec, model: Twin):
    """``spec`` as the job on ``model`` runs it: the seed twin moves a ``seed`` parameter too."""
    if model.kind == SEED and isinstance(spec.params.get("seed"), int):
        return spec.with_params(seed=spec.params["seed"] + SEED_OFFSET)
    return spec


#: the batch-composition twin's companions per image of the job (rounded up). On models as small as
#: the digits nets a call's cost is mostly per step, not per image: a batch half as large again
#: costs about 1.2 calls, where two half batches (the twin's first form) cost 1.6-1.7
COMPANION_SHARE = 0.5


def companions(model: Twin, samples: int, available: int | None) -> int:
    """Images the batch-composition twin adds to a job of ``samples`` images on ``model`` (the
    dataset's next ones in the subset's order: subsets nest); ``available``: the dataset's images
    (None: unknown). 0 on every other model, and where the dataset has none left."""
    if model.kind != BATCH or not available:
        return 0
    return max(0, min(math.ceil(samples * COMPANION_SHARE), available - samples))


def already_adversarial(labels: torch.Tensor, criterion, predicted: int, num_classes: int):
    """(labels, criterion) of the companions with the first one adversarial before any step: its
    label a class the model does not predict for it, and in a targeted run its target the class
    the model predicts. Real batches hold misclassified images; a sound attack's result for one
    image does not depend on them, an attack that stops the batch when one image is done does."""
    labels = labels.clone()
    labels[0] = (predicted + 1) % num_classes
    if isinstance(criterion, Targeted):
        targets = criterion.targets.clone()
        targets[0] = predicted
        criterion = Targeted(targets)
    return labels, criterion


def batch_size(model: Twin, requested: int, samples: int = 0, companions: int = 0) -> int:
    """Samples per attack call of a job on ``model`` (``requested``: ``--batch-size``, 0 = all;
    ``samples``: the job's images, for the batch-composition twin's half batches when it has no
    ``companions``)."""
    if model.kind == SPLIT:
        return 1
    if model.kind == BATCH and not companions:
        whole = requested if 0 < requested < samples or not samples else samples
        return max(1, (whole + 1) // 2) if whole else 0
    return requested


def arrangement(model: Twin, n: int) -> torch.Tensor | None:
    """The order in which a job on ``model`` hands its ``n`` images to the attack: reversed on the
    batch-composition twin (None elsewhere: the subset's order)."""
    return torch.arange(n - 1, -1, -1) if model.kind == BATCH else None


def twin_samples(model: Twin, samples: int, split_samples: int) -> int:
    """Images of a job on ``model``: the batch-split twin may run on the first ``split_samples``
    (0 = all; subsets nest, so they are the base model's first images)."""
    return min(samples, split_samples) if model.kind == SPLIT and split_samples > 0 else samples
