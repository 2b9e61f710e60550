"""Evaluation data: the hashed evaluation subset of a dataset source (``datasets``, which holds
the sources, the embedded digits among them; this module imports it, never the reverse).

Every job of a run sees the same subset; its SHA-256 over the exact input bytes and labels is
recorded so two runs can prove they attacked the same samples. Subsets nest: with one seed, the
first k samples of an n-sample subset are the k-sample subset (``--samples 64`` contains the
samples of a run of 16), because a subset is a prefix of one seeded permutation of the dataset.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attackaudit.sources.dataset_sources import digits, open_source  # digits re-exported: callers load it from here
from attackaudit.errors import InputError
from attackaudit.results.parameters import BY_NAME


@dataclass(frozen=True)
class Subset:
    """The samples a run attacks. ``inputs``: N×C×H×W float32 in [0, 1]; ``labels``: N int64."""

    dataset: str
    indices: np.ndarray
    inputs: Tensor
    labels: Tensor
    hash: str

    def __len__(self) -> int:
        return len(self.labels)


def subset_hash(inputs: Tensor, labels: Tensor) -> str:
    """SHA-256 over the exact float32 input bytes, the shape and the int64 labels."""
    h = hashlib.sha256()
    x = inputs.detach().cpu().contiguous().to(torch.float32).numpy()
    h.update(repr(tuple(x.shape)).encode())
    h.update(x.tobytes())
    h.update(labels.detach().cpu().to(torch.int64).numpy().tobytes())
    return h.hexdigest()


def subset_indices(n: int, size: int, seed: int) -> np.ndarray:
    """``size`` of ``n`` sample indices chosen by ``seed``: the first ``size`` of one seeded
    permutation of 0…n−1, in that order, so that smaller subsets are prefixes of larger ones."""
    problem = BY_NAME["samples"].problem(size)  # the run's rule (the parameter table), for any caller
    if problem:
        raise InputError(problem, "samples")
    size = min(size, n)
    return np.random.default_rng(seed).permutation(n)[:size]


def samples_note(asked: int, available: int) -> str:
    """The one rule for more samples than the data has, ``attackaudit run --samples`` and
    ``compare(samples=...)`` alike: every image is attacked (a subset is a prefix of one
    permutation, so that is the same subset as ``--samples available``), the run records that
    number, and this note says so; "" when ``asked`` fits."""
    if asked <= available:
        return ""
    return (f"--samples {asked} is more than the {available} images the dataset has: all {available} are attacked, "
            f"and the run records --samples {available}")


def select_subset(inputs: Tensor, labels: Tensor, size: int, seed: int, dataset: str) -> Subset:
    """Choose ``size`` samples by ``seed`` (``subset_indices``) and hash them."""
    indices = subset_indices(len(labels), size, seed)
    idx = torch.from_numpy(indices)
    x, y = inputs[idx].contiguous(), labels[idx].contiguous()
    return Subset(dataset, indices, x, y, subset_hash(x, y))


def load_subset(dataset: str, size: int, seed: int) -> Subset:
    """The evaluation subset of a dataset source: ``digits`` (embedded) or a local-file source
    of ``attackaudit.sources.dataset_sources`` (``cifar10:DIR``, ``imagenet:ROOT:LIST``, ``tensors:FILE``, ...).

    Only the chosen samples are decoded; raises ``DataSourceError`` (a ValueError) for a bad source.
    """
    if dataset == "digits":
        x, y = digits("test")
        return select_subset(x, y, size, seed, dataset)
    source = open_source(dataset)
    indices = subset_indices(len(source), size, seed)
    x, y = source.load(indices)
    x, y = x.contiguous(), y.contiguous()
    return Subset(dataset, indices, x, y, subset_hash(x, y))


def dataset_size(dataset: str) -> int | None:
    """How many images ``dataset`` (a source as ``load_subset`` takes it) has to draw a subset
    from: the most a rerun with more ``--samples`` can attack. None when the source cannot be
    opened now (a moved file): a verdict then says only how many images it needs."""
    try:
        if dataset == "digits":
            return len(digits("test")[1])
        return len(open_source(dataset))
    except Exception:  # a size is a courtesy of the verdict text, never a reason to fail a report
        return None


def random_targets(labels: Tensor, num_classes: int, seed: int) -> Tensor:
    """Seeded target classes, each different from its sample's label."""
    g = torch.Generator().manual_seed(seed)
    offset = torch.randint(1, num_classes, (len(labels),), generator=g)
    return (labels.cpu() + offset) % num_classes
