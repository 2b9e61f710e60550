"""What counts as an adversarial example: the one definition of success.

Untargeted, a row succeeds when some class other than its label has a logit **strictly** greater
than the label's; targeted, when the target's logit is strictly greater than every other class's.
An exact tie is never a success, whatever the class order: ``argmax`` breaks ties by the lower
class index, so with it the same point on the decision boundary would be "adversarial" on a model
and not on the same model with its classes renamed (the ``~perm`` twin), and a different summation
order in another framework could flip it either way. An exact boundary point is not an adversarial
example. NaN logits never succeed (every comparison with NaN is false).

The tracker (its rows, the re-check of kept bests, the clean inputs), the minimal-ε search's
success check (through the tracker), the re-check of an attack's returned output and the test
suite's reference ledger all call :func:`is_success`.
"""
from __future__ import annotations

import torch
from torch import Tensor


def is_success(logits: Tensor, labels: Tensor, targets: Tensor | None = None) -> Tensor:
    """Whether each row of ``logits`` (…×classes) is adversarial: untargeted, another class's
    logit strictly above the label's (``labels``, …); targeted, the target's (``targets``, …)
    strictly above every other class's. Returns a bool tensor of shape ``logits.shape[:-1]``."""
    reference = labels if targets is None else targets
    reference = reference.to(device=logits.device, dtype=torch.long).expand(logits.shape[:-1]).unsqueeze(-1)
    own = logits.gather(-1, reference).squeeze(-1)
    others = logits.scatter(-1, reference, float("-inf")).amax(-1)  # amax propagates NaN
    return others > own if targets is None else own > others
