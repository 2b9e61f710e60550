"""Default outputs: what an attack returns in place of a search result (the ``fallback_output`` evidence).

Some releases return, for the images their search failed on, a fixed default: an all-zero image
(foolbox's C&W L2 and EAD initialise their best to zeros), a constant, the input. The input is
the normal "failed" output (never adversarial unless the clean input already is, where nothing
changes); any other default, when the model happens to misclassify it, would count as broken at a
distance no search produced. A returned row is a **default output** when it differs from its own
input and

- is identical to the returned row of another image whose input differs ("one output shared by k
  images"), or
- is a constant image (every coordinate equal: "all-zero image", "constant 0.5 image").

``QueryTracker.fallbacks`` adds the second half of the rule: a default output is a *fallback*
only when it would change the result, i.e. it is adversarial and closer than every adversarial the
attack's own queries found (so it is not among them). A row that is merely never queried is not
enough: sound attacks return points they never evaluated (ART's DeepFool applies its overshoot
after its last query, torchattacks' EAD its last shrinkage step; measured on digits-mlp, 16
images: 5 and 10 images whose returned row beat every query), and those are search results.
"""
from __future__ import annotations

import torch
from torch import Tensor


#: how a description names one output returned for several images (``is_shared`` reads it back)
SHARED_WORDS = "shared by"


def is_shared(description: str) -> bool:
    """Whether a ``default_outputs`` description is of one output shared by several images."""
    return SHARED_WORDS in description


def describe_constant(value: float) -> str:
    """"all-zero image", "all-one image" or "constant 0.5 image"."""
    if value == 0.0:
        return "all-zero image"
    if value == 1.0:
        return "all-one image"
    return f"constant {value:.3g} image"


def default_outputs(rows: Tensor, inputs: Tensor) -> tuple[Tensor, list[str]]:
    """Which returned ``rows`` (B×D, flattened, clamped to [0, 1]) are default outputs, given
    their ``inputs`` (B×D): (B bools, B descriptions, "" where not a default).

    Cheap on the common batch: one max, one min and one sum per row; rows are compared exactly only
    where two sums coincide."""
    b = len(rows)
    moved = (rows != inputs).any(1)
    lo, hi = rows.amin(1), rows.amax(1)
    constant = moved & (lo == hi) & ((inputs.amax(1) != inputs.amin(1)) | (lo != inputs.amin(1)))
    shared = torch.zeros(b, dtype=torch.bool, device=rows.device)
    count = torch.ones(b, dtype=torch.long, device=rows.device)
    if b > 1:
        sums = rows.double().sum(1)
        _, inv, counts = torch.unique(sums, return_inverse=True, return_counts=True)
        maybe = (counts[inv] > 1) & moved
        if bool(maybe.any()):
            where = maybe.nonzero().squeeze(1)
            _, inv2, counts2 = torch.unique(rows[where], dim=0, return_inverse=True, return_counts=True)
            # identical rows of images whose inputs differ (identical images in the data share honestly)
            for group in torch.unique(inv2[counts2[inv2] > 1]).tolist():
                members = where[inv2 == group]
                if len(torch.unique(inputs[members], dim=0)) > 1:
                    shared[members] = True
                    count[members] = len(members)
    default = constant | shared
    words = []
    for i in range(b):
        if not default[i]:
            words.append("")
            continue
        what = describe_constant(float(lo[i])) if constant[i] else "one output"
        words.append(f"{what} {SHARED_WORDS} {int(count[i])} images" if shared[i] else what)
    return default, words
