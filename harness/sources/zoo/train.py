"""Train the embedded digits zoo from fixed seeds: ``python -m attackaudit.sources.zoo.train``.

Adversarial training uses our own PGD (not any audited library), so the zoo does not depend on
the implementations it is used to judge.
"""
from __future__ import annotations

import argparse
import json

import torch
from torch import Tensor, nn

from attackaudit.sources.subset import digits
import attackaudit.sources.zoo.WEIGHTS_DIR as WEIGHTS_DIR
import attackaudit.sources.zoo.ZOO as ZOO
import attackaudit.sources.zoo.ZooModel as ZooModel
from attackaudit.sources.zoo.architectures import ARCHITECTURES

EPOCHS = 60
BATCH = 64
PGD_STEPS = 10


def _project(delta: Tensor, norm: str, eps: float) -> Tensor:
    if norm == "linf":
        return delta.clamp(-eps, eps)
    flat = delta.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
    return delta * (eps / flat).clamp(max=1.0)


def pgd(model: nn.Module, x: Tensor, y: Tensor, norm: str, eps: float, steps: int = PGD_STEPS) -> Tensor:
    """Untargeted PGD on cross-entropy inside the ε-ball and [0, 1]."""
    alpha = 2.5 * eps / steps
    delta = _project(torch.empty_like(x).uniform_(-eps, eps), norm, eps)
    delta = ((x + delta).clamp(0, 1) - x).requires_grad_(True)
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x + delta), y)
        (grad,) = torch.autograd.grad(loss, delta)
        with torch.no_grad():
            if norm == "linf":
                step = alpha * grad.sign()
            else:
                step = alpha * grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
            delta = _project(delta + step, norm, eps)
            delta = ((x + delta).clamp(0, 1) - x)
        delta.requires_grad_(True)
    return (x + delta).detach()


def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def train(entry: ZooModel) -> tuple[nn.Module, dict]:
    torch.manual_seed(entry.seed)
    x_tr, y_tr = digits("train")
    x_te, y_te = digits("test")
    model = ARCHITECTURES[entry.architecture]()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, EPOCHS)
    g = torch.Generator().manual_seed(entry.seed)
    norm = {"pgd-at-linf": "linf", "pgd-at-l2": "l2"}.get(entry.training)
    for _ in range(EPOCHS):
        perm = torch.randperm(len(y_tr), generator=g)
        for i in range(0, len(perm), BATCH):
            xb, yb = x_tr[perm[i:i + BATCH]], y_tr[perm[i:i + BATCH]]
            if norm is not None:
                model.eval()
                xb = torch.cat([xb, pgd(model, xb, yb, norm, entry.epsilon)])
                yb = torch.cat([yb, yb])
                model.train()
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    model.eval()
    info = {"clean_accuracy": round(accuracy(model, x_te, y_te), 4)}
    for n, e in (("linf", 0.1), ("l2", 0.75)):
        torch.manual_seed(0)
        info[f"pgd_{n}_{e}_accuracy"] = round(accuracy(model, pgd(model, x_te, y_te, n, e, 20), y_te), 4)
    return model, info


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="*", default=list(ZOO), help="zoo models to (re)train")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # bitwise-reproducible CPU training
    WEIGHTS_DIR.mkdir(parents=True, exist_ok=True)
    meta_path = WEIGHTS_DIR / "zoo.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    for name in args.models:
        entry = ZOO[name]
        model, info = train(entry)
        torch.save(model.state_dict(), WEIGHTS_DIR / f"{name}.pt")
        meta[name] = {"architecture": entry.architecture, "training": entry.training, "seed": entry.seed,
                      "epsilon": entry.epsilon, "dataset": entry.dataset, **info}
        print(name, info, flush=True)
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
