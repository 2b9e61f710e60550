"""``attackaudit attacks``: the catalogue of attack implementations, with availability."""
from __future__ import annotations

import argparse
import json

from .common import UsageError, print_table


def cmd_attacks(args: argparse.Namespace) -> int:
    from attackaudit.adapters import catalogue

    plugins = args.plugin or []
    if args.plugin_only and not plugins:
        raise UsageError("--plugin-only needs --plugin FILE")
    # --plugin-only: no built-in library is imported (seconds each), only the files are loaded
    entries = catalogue([] if args.plugin_only else args.library, plugins=plugins)
    if args.library and not entries:
        raise UsageError(f"unknown library {args.library[0]!r}; run `attackaudit attacks` for the list")
    # a plugin author's own specs first: the built-in catalogue would push them off the screen
    entries = sorted(entries, key=lambda e: e.plugin is None)
    rows = []
    for e in entries:
        if not e.available:
            rows.append({"library": e.library, "library_version": e.version, "available": False,
                         "reason": e.reason})
        for s in e.specs:
            rows.append({"library": s.library, "library_version": e.version, "name": s.name,
                         "key": s.key, "implementation": s.implementation, "family": s.family,
                         "norm": s.norm, "kind": s.kind, "params": dict(s.params),
                         "targeted_support": s.targeted_support, "targeted_only": s.targeted_only,
                         "available": True, "steps_param": s.steps_param, "steps_scale": steps_scale_effect(s),
                         **({"plugin": e.plugin.path, "fingerprint": e.plugin.fingerprint} if e.plugin else {}),
                         **({"note": s.note} if s.note else {})})
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str))
        return 0
    for e in entries:
        if e.plugin is not None:  # what a plugin author needs to check: params as recorded, steps scaling
            print(f"plugin {e.plugin.path}: library {e.library}, version {e.version}, "
                  f"fingerprint {e.plugin.fingerprint}")
            print_table([{**r, "params": json.dumps(r.get("params", {}), default=str),
                           "--steps-scale": r.get("steps_scale", ""), "targeted": targeted_mode(r)}
                          for r in rows if r.get("plugin") == e.plugin.path and r["library"] == e.library],
                         ["key", "params", "--steps-scale", "targeted", "family", "kind"])
            print()
    if not args.plugin_only:
        print_table([r for r in rows if "plugin" not in r], ["key", "family", "kind", "library_version", "available"])
    return 0


def targeted_mode(row: dict) -> str:
    """Which runs a spec takes part in: ``both``, ``untargeted only`` or ``targeted only``."""
    if row.get("targeted_only"):
        return "targeted only"
    return "both" if row.get("targeted_support") else "untargeted only"


def steps_scale_effect(spec) -> str:
    """What ``--steps-scale s`` does to ``spec``, with the presets' factors as examples."""
    from attackaudit.run.config import PRESETS

    if spec.steps_at(1.0) is None:
        return "none: no steps_param, same iterations at any scale"
    examples = ", ".join(f"{name} ×{preset['steps_scale']:g}: {spec.steps_at(preset['steps_scale'])}"
                         for name, preset in PRESETS.items() if "steps_scale" in preset)
    return f"{spec.steps_param}={spec.steps_at(1.0)} × s, rounded, at least 1 ({examples})"


def add_parser(sub) -> argparse.ArgumentParser:
    """The command's arguments on ``sub`` (the subcommands of ``attackaudit``); its entry point is
    ``cmd_attacks``."""
    p = sub.add_parser("attacks", help="the catalogue of attack implementations, with availability")
    p.add_argument("--library", action="append", help="only this library (repeatable)")
    p.add_argument("--plugin", action="append", help="a .py file defining specs(); its specs are listed first")
    p.add_argument("--plugin-only", dest="plugin_only", action="store_true",
                   help="list only the --plugin files' specs (no built-in library is imported)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_attacks)
    return p
