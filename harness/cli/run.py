"""``attackaudit run``: the grid of models × attacks × norms into a run directory."""
from __future__ import annotations

import argparse
import sys

from attackaudit.run.grid_args import GRID_SWITCHES, GRID_VALUES, add_grid_arguments, grid_flags


def run_flags(args: argparse.Namespace) -> dict:
    flags = grid_flags(args, GRID_VALUES + ["out", "preset", "libraries", "executor", "scheduler", "batch_size",
                                            "memory_limit_mb", "dataset", "model_dir", "threat_model", "repeat",
                                            "retry", "until_decided", "exact"],
                       GRID_SWITCHES + ["metamorphic", "force", "strict", "allow_download", "trust_checkpoint"])
    flags["plugins"] = args.plugin
    return flags


def cmd_run(args: argparse.Namespace) -> int:
    from attackaudit.run.config import load_toml, resolve
    from attackaudit.run.sequential import run_grid

    toml = load_toml(args.config) if args.config else None
    config = resolve(toml, run_flags(args))
    summary = run_grid(config)
    print(summary.line(), file=sys.stderr if config.quiet else sys.stdout)
    print(f"results: {summary.run_dir} (attackaudit.load_run({str(summary.run_dir)!r}))")
    failed = summary.counts.get("crash", 0) + summary.counts.get("timeout", 0) + summary.counts.get("invalid", 0)
    return 1 if config.strict and failed else 0


def add_parser(sub) -> argparse.ArgumentParser:
    """The command's arguments on ``sub`` (the subcommands of ``attackaudit``); its entry point is
    ``cmd_run``."""
    p = sub.add_parser("run", help="run the grid of models × attacks × norms")
    p.add_argument("config", nargs="?", help="a CONFIG.toml; flags override it")
    p.add_argument("--out", help="run directory (created; rerunning resumes)")
    p.add_argument("--preset", choices=["quick", "demo"])
    add_grid_arguments(p)
    p.add_argument("--libraries", nargs="+")
    p.add_argument("--metamorphic", action="store_true", help="also run every model's metamorphic twins (~shift: logits shifted; ~perm: classes permuted) "
                        "and, on the first model, the run twins (~seed: randomised attacks with another seed, "
                        "the noise floor; ~split: every attack on one sample per call; ~batch: every attack on "
                        "the images reversed, with companions, in one call)")
    p.add_argument("--repeat", type=int, help="2: run every job on the first model a second time with the same "
                                              "seed (in OUT/repeat); reports flag results that differ (nondeterminism)")
    p.add_argument("--executor", choices=["local", "dask"])
    p.add_argument("--scheduler", help="address of an existing Dask scheduler")
    p.add_argument("--batch-size", dest="batch_size", type=int, help="samples per attack call (0: all at once)")
    p.add_argument("--dataset", help="digits, cifar10:DIR, cifar100:DIR, imagenet:ROOT:LIST[:CROP[:RESIZE]], "
                                     "tensors:FILE or tensors:INPUTS:LABELS")
    p.add_argument("--model-dir", dest="model_dir",
                   help="RobustBench checkpoints, laid out as DIR/<dataset>/<threat_model>/<name>.pt")
    p.add_argument("--threat-model", dest="threat_model",
                   help="RobustBench threat model (Linf, L2, corruptions) for robustbench: models naming none")
    p.add_argument("--allow-download", dest="allow_download", action="store_true",
                   help="let model sources download missing weights (never done otherwise)")
    p.add_argument("--trust-checkpoint", dest="trust_checkpoint", action="store_true",
                   help="unpickle checkpoints in full (torch.load weights_only=False): only for trusted files")
    p.add_argument("--memory-limit-mb", dest="memory_limit_mb", type=int)
    p.add_argument("--plugin", action="append", help="a .py file defining specs() (repeatable)")
    p.add_argument("--force", action="store_true", help="run a changed config in an existing run directory")
    p.add_argument("--retry", choices=["crashed"], help="crashed: also run again the finished jobs that crashed "
                                                         "(jobs whose worker failed before the attack always run again)")
    p.add_argument("--strict", action="store_true", help="exit 1 when any job crashed, timed out or was invalid")
    p.add_argument("--no-exact", dest="exact", action="store_false", default=None,
                   help="skip the exact minimal distances a run of digits-mlp or digits-mlp-tiny writes to OUT/exact/")
    p.add_argument("--until-decided", dest="until_decided", type=int, metavar="CAP",
                   help="judge at --samples, then run only the undecided family x norm rows again on doubling "
                        "nested subsets up to CAP images (or the dataset's size), the error rate spent across "
                        "the looks; the looks go to OUT/looks/ and OUT/manifest.json")
    p.set_defaults(func=cmd_run)
    return p
