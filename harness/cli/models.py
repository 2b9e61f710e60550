"""``attackaudit models``: the embedded model zoo, with clean accuracy."""
from __future__ import annotations

import argparse
import json

from .common import print_table


def cmd_models(args: argparse.Namespace) -> int:
    import torch

    from attackaudit.sources.subset import digits
    from attackaudit.sources.zoo import ZOO, load_model

    x, y = digits("test")
    rows = []
    for name, entry in ZOO.items():
        with torch.no_grad():
            acc = (load_model(name)(x).argmax(1) == y).float().mean().item()
        rows.append({"name": name, "dataset": entry.dataset, "architecture": entry.architecture,
                     "training": entry.training, "epsilon": entry.epsilon,
                     "clean_accuracy": round(acc, 4), "description": entry.description})
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, ["name", "training", "epsilon", "clean_accuracy", "description"])
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    """The command's arguments on ``sub`` (the subcommands of ``attackaudit``); its entry point is
    ``cmd_models``."""
    p = sub.add_parser("models", help="the embedded model zoo, with clean accuracy")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_models)
    return p
