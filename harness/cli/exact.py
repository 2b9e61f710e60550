"""``attackaudit exact``: its arguments and entry point (the solving itself: ``harness/exact/command.py``
``run_exact``, ``run_subset``)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attackaudit.errors import AttackauditError
from attackaudit.exact.command import exact_path, run_exact, run_subset
from attackaudit.results.schema import parse_model_name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="zoo model (ReLU MLP or small CNN)")
    parser.add_argument("--norm", required=True, choices=["linf", "l1", "l0", "l2"],
                        help="l0: fewest moved pixels; l2: a MIQP, solved by SCIP (pyscipopt)")
    parser.add_argument("--samples", type=int, default=None,
                        help="subset size, as in `run` (default: the run's own in OUT)")
    parser.add_argument("--out", type=Path, required=True, help="run directory; writes OUT/exact/")
    parser.add_argument("--seed", type=int, default=None, help="subset seed, as in `run` (default: the run's, else 0)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per sample (default 60)")
    parser.add_argument("--margin", type=float, default=1e-4,
                        help="logit margin an adversarial must reach, in float64 (default 1e-4: "
                             "float32 rounding of the logits undoes a 1e-6 margin)")
    parser.add_argument("--dataset", default=None, help="dataset source (default: the run's, else digits)")
    parser.add_argument("--no-cache", dest="no_cache", action="store_true",
                        help="solve every sample again (default: reuse the shipped and cached answers)")


def main(args: argparse.Namespace) -> int:
    """Exit 0 when done (time-limited samples are results, not failures), 2 on bad input."""
    def report(row: dict) -> None:
        if not getattr(args, "quiet", False):
            print(f"sample {row['sample']}: {row['status']} distance {row['exact_distance']:.6g} "
                  f"[{row['lower_bound']:.6g}, {row['upper_bound']:.6g}] "
                  + (f"(known: solved in {row['solve_s']:.1f}s)" if row.get("cached") else f"in {row['solve_s']:.1f}s"),
                  file=sys.stderr)

    try:
        samples, seed, dataset = run_subset(args.out, args.samples, args.seed, args.dataset)
        # the model's name read here, at the command line (``M~shift``: the log-softmax twin, M's network)
        table = run_exact(parse_model_name(args.model), args.norm, samples, seed, args.out, args.time_limit,
                          dataset=dataset, margin=args.margin, progress=report,
                          use_cache=not getattr(args, "no_cache", False))
    except (AttackauditError, KeyError, FileNotFoundError) as exc:  # the input's (KeyError: a model not in the zoo)
        print(f"attackaudit exact: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    counts = table["status"].value_counts().to_dict()
    print(f"{exact_path(args.out, args.model, args.norm)}: {len(table)} samples, "
          + ", ".join(f"{k} {v}" for k, v in counts.items())
          + f"; median solve {table['solve_s'].median():.2f}s")
    return 0


def add_parser(sub) -> None:
    """``exact`` on ``sub`` (the subcommands of ``attackaudit``)."""
    p = sub.add_parser("exact", help="exact minimal L∞/L1/L0/L2 distances of a small ReLU net by MILP (L2: MIQP)")
    add_arguments(p)
    p.set_defaults(func=main)
