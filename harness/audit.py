"""``attackaudit audit LIB==V1 LIB==V2``: the same grid on two releases of a library, and what changed.

Each pinned release gets its own environment (``audit_env.prepare_env``: cached, reused, never
touching the installed one) and its run executes under that environment's interpreter
(``RunConfig.python``); ``LIB==V`` alone compares the release with the installed one. Both runs
use the same models, hashed subset, budget and seed and go to ``OUT/<library>-<version>/``
(ordinary run directories: rerunning the command resumes them). ``fidelity.diff`` of the two runs
becomes ``OUT/audit.json``, ``OUT/diff.csv`` and the report section ``OUT/audit.md`` /
``OUT/audit.html``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from pathlib import Path

from .audit_env import Env, installed_version, prepare_env

_RELEASE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*$")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_releases(releases: list[str]) -> tuple[str, str, list[str]]:
    """(library, distribution, versions) of ``LIB==V`` arguments; ValueError (one line) otherwise."""
    from attackaudit.adapters import BUILTIN_LIBRARIES

    if not 1 <= len(releases) <= 2:
        raise ValueError(f"give one or two releases (LIB==V1 [LIB==V2]), got {len(releases)}")
    by_name = {_normal(k): k for k in BUILTIN_LIBRARIES} | {_normal(v): k for k, v in BUILTIN_LIBRARIES.items()}
    libraries, versions = [], []
    for text in releases:
        m = _RELEASE.match(text)
        if not m:
            raise ValueError(f"release {text!r} is not of the form LIB==VERSION (e.g. adv-lib==0.2.6)")
        library = by_name.get(_normal(m.group(1)))
        if library is None:
            raise ValueError(f"unknown library {m.group(1)!r} in {text!r}; audit knows "
                             f"{', '.join(sorted(set(BUILTIN_LIBRARIES.values())))}")
        libraries.append(library)
        versions.append(m.group(2))
    if len(set(libraries)) > 1:
        raise ValueError(f"the releases name two libraries ({' and '.join(libraries)}); audit compares one library")
    if len(versions) == 2 and versions[0] == versions[1]:
        raise ValueError(f"both releases are {releases[0]}; give two different versions")
    return libraries[0], BUILTIN_LIBRARIES[libraries[0]], versions


def _version_key(version: str):
    try:
        from packaging.version import Version
    except ImportError:  # pragma: no cover
        from pip._vendor.packaging.version import Version
    try:
        return (0, Version(version))
    except Exception:
        return (1, version)


def _clean(value):
    """JSON-safe: NaN -> null, inf -> "inf", numpy scalars -> Python."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value


def _split(text) -> list[str]:
    return [t for t in str(text or "").split(",") if t]


def implementation_records(diff) -> list[dict]:
    """One audit.json record per implementation and norm of a ``fidelity.diff`` table."""
    from attackaudit.reports.text import verdict_line

    out = []
    for _, r in diff.iterrows():
        out.append({
            "implementation": r["implementation"], "family": r["family"], "norm": r["norm"],
            "verdict": r["verdict"], "reason": r["reason"], "line": verdict_line(r),
            "version_before": r["version_a"], "version_after": r["version_b"],
            "optimality_before": r["optimality_a"], "optimality_after": r["optimality_b"],
            "delta_optimality": r["delta_optimality"], "asr_before": r["asr_a"], "asr_after": r["asr_b"],
            "paired_test": {"test": "wilcoxon signed-rank on per-sample best distances",
                            "n_samples": r["n_samples"], "n_better": r["n_better"], "n_worse": r["n_worse"],
                            "ties": r["ties"], "statistic": r["statistic"], "p_value": r["p_value"],
                            "effect_size": r["effect_size"]},
            "flags_before": _split(r["flags_a"]), "flags_after": _split(r["flags_b"]),
            "flags_appeared": _split(r["flags_appeared"]), "flags_disappeared": _split(r["flags_disappeared"]),
        })
    return out


def _impl_keys(table):
    impl = table["implementation"] if "implementation" in table.columns else \
        table["library"].astype(str) + "/" + table["attack"].astype(str)
    return impl.astype(str) + "|" + table["norm"].astype(str)


def flags_in_joint_context(own, other):
    """``fidelity.flags`` of ``own``'s implementations, computed next to the implementations that
    only ``other`` ran. Some flags are relative to the other implementations (samples *they* broke):
    computed on each run alone, an attack a release adds would change the flags, and so the
    verdicts, of attacks the release left alone."""
    import pandas as pd

    from attackaudit import fidelity

    if own.empty:
        return pd.DataFrame(columns=fidelity.FLAG_COLUMNS)
    mine = set(_impl_keys(own))
    extra = other[~_impl_keys(other).isin(mine)] if len(other) else other
    found = fidelity.flags(pd.concat([own, extra], ignore_index=True) if len(extra) else own)
    return found[_impl_keys(found).isin(mine)].reset_index(drop=True)


@dataclasses.dataclass
class Side:
    version: str
    env: Env | None  # None: the installed release, run by this interpreter
    run_dir: Path
    empty: bool = False  # the release has no attack that matches the filters

    @property
    def label(self) -> str:
        return f"{self.version}" + ("" if self.env else " (installed)")


def _run_side(side: Side, base, library: str, echo) -> None:
    from .config import ConfigError
    from .runner import run

    config = dataclasses.replace(base, out=str(side.run_dir), python=side.env.python if side.env else "")
    try:
        summary = run(config)
    except ConfigError as exc:
        if "match no attack" not in str(exc):
            raise
        side.empty = True  # every implementation of the other release is then new / removed
        echo(f"{library} {side.version}: no attack of this release matches the filters")
        return
    echo(f"{library} {side.version}: {summary.line()}")


def _table(side: Side, columns):
    import pandas as pd

    from attackaudit.reports.tables import load_runs

    if side.empty:
        return pd.DataFrame(columns=columns)
    table, manifests, _ = load_runs([side.run_dir])
    versions = set(table["library_version"].astype(str))
    if versions != {side.version}:
        raise RuntimeError(f"the run in {side.run_dir} recorded {', '.join(sorted(versions))}, not {side.version}: "
                           "the release environment did not pin the library")
    return table


def audit(releases: list[str], out: str | Path, flags: dict, *, alpha: float = 0.01, min_delta: float = 0.02,
          echo=print) -> dict:
    """Run the audit; returns the audit.json document. ValueError (one line) for bad input or a
    release that cannot be installed."""
    from attackaudit import fidelity
    from attackaudit.reports.html import render_compare_html
    from attackaudit.reports.markdown import render_compare_markdown

    from .config import resolve

    library, dist, versions = parse_releases(releases)
    installed = installed_version(dist)
    if len(versions) == 1:
        if versions[0] == installed:
            raise ValueError(f"{dist}=={installed} is the installed release; name another one, or two releases")
        if installed == "none":
            raise ValueError(f"{dist} is not installed here: name two releases, {dist}==V1 {dist}==V2")
        versions = sorted([versions[0], installed], key=_version_key)  # before = the older
    out = Path(out)
    # the grid, validated before anything is installed; only ``out`` and ``python`` differ per side
    base = resolve(None, {**flags, "out": str(out / library), "libraries": [library]})
    sides = []
    for version in versions:
        env = None
        if version != installed:  # the installed release runs here, as it is
            env = prepare_env(dist, version, library)
            echo(env.line())
            for warning in env.warnings:
                echo(f"attackaudit: warning: {warning}")
        sides.append(Side(version, env, out / f"{library}-{version}"))
    for side in sides:
        _run_side(side, base, library, echo)
    if all(s.empty for s in sides):
        raise ValueError(f"no attack of {dist} {' or '.join(versions)} matches the filters "
                         "(--families/--norms/--attacks); `attackaudit attacks` lists the catalogue")
    from .schema import ROW_COLUMNS

    table_a, table_b = (_table(s, ROW_COLUMNS) for s in sides)
    hashes = {str(t["subset_hash"].iloc[0]) for t in (table_a, table_b) if len(t)}
    if len(hashes) > 1:
        raise RuntimeError(f"the two runs attacked different subsets ({', '.join(sorted(hashes))})")
    diff = fidelity.diff(table_a, table_b, alpha=alpha, min_delta=min_delta,
                         flags_a=flags_in_joint_context(table_a, table_b),
                         flags_b=flags_in_joint_context(table_b, table_a))
    out.mkdir(parents=True, exist_ok=True)
    diff.to_csv(out / "diff.csv", index=False)
    counts = {str(k): int(v) for k, v in diff["verdict"].value_counts().items()} if len(diff) else {}

    def side_doc(side: Side) -> dict:
        env = side.env
        return {"version": side.version, "run_dir": str(side.run_dir), "installed": env is None,
                "no_matching_attack": side.empty,
                "environment": None if env is None else {
                    "path": env.path, "python": env.python, "reused": env.reused,
                    "prepare_s": round(env.prepare_s, 3), "added_requirements": env.added_requirements,
                    "warnings": env.warnings}}

    doc = _clean({
        "library": library, "distribution": dist,
        "before": side_doc(sides[0]), "after": side_doc(sides[1]),
        "grid": {"models": base.models, "dataset": base.dataset, "families": base.families, "norms": base.norms,
                 "attacks": base.attacks, "samples": base.samples, "budget": base.budget, "seed": base.seed,
                 "steps_scale": base.steps_scale, "targeted": base.targeted, "subset_hash": next(iter(hashes), "")},
        "rule": fidelity.VERDICT_RULE, "alpha": alpha, "min_delta": min_delta, "counts": counts,
        "implementations": implementation_records(diff),
    })
    (out / "audit.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    label_a = f"{dist} {sides[0].label} ({sides[0].run_dir})"
    label_b = f"{dist} {sides[1].label} ({sides[1].run_dir})"
    (out / "audit.md").write_text(render_compare_markdown(diff, label_a, label_b), encoding="utf-8")
    (out / "audit.html").write_text(render_compare_html(diff, label_a, label_b), encoding="utf-8")
    for record in doc["implementations"]:
        echo(record["line"])
    echo(f"{', '.join(f'{n} {k}' for k, n in counts.items()) or 'nothing to compare'}; "
         f"audit: {out / 'audit.json'}; report: {out / 'audit.html'}")
    return doc


# -- command line -------------------------------------------------------------------------------
_GRID = ["models", "families", "norms", "attacks", "samples", "budget", "seed", "steps_scale", "device",
         "workers", "timeout_s"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("releases", nargs="+", metavar="LIB==V",
                   help="one or two releases, e.g. adv-lib==0.2.6 adv-lib==0.2.8 (one: against the installed)")
    p.add_argument("--out", required=True, help="audit directory: a run per release, audit.json, audit.md|html")
    p.add_argument("--models", nargs="+")
    p.add_argument("--families", nargs="+")
    p.add_argument("--norms", nargs="+")
    p.add_argument("--attacks", nargs="+", help="spec keys or implementations, e.g. adv_lib/fmn")
    p.add_argument("--samples", type=int)
    p.add_argument("--budget", type=int, help="forwards + backwards per sample (default 2000)")
    p.add_argument("--seed", type=int)
    p.add_argument("--steps-scale", dest="steps_scale", type=float, help="scale every attack's iterations")
    p.add_argument("--targeted", action="store_true")
    p.add_argument("--device", help="cpu, cuda, cuda:N or auto")
    p.add_argument("--workers", type=int)
    p.add_argument("--timeout", dest="timeout_s", type=float, help="seconds per job before it is killed")
    p.add_argument("--alpha", type=float, default=0.01, help="significance level of the paired test")
    p.add_argument("--min-delta", dest="min_delta", type=float, default=0.02,
                   help="smallest optimality change that counts")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--strict", action="store_true", help="exit 1 when an implementation regressed")


def main(args: argparse.Namespace) -> int:
    flags = {k: getattr(args, k) for k in _GRID}
    flags["targeted"] = True if args.targeted else None
    flags["quiet"] = True if args.quiet else None
    doc = audit(args.releases, args.out, flags, alpha=args.alpha, min_delta=args.min_delta,
                echo=lambda line: print(line, file=sys.stdout))
    return 1 if args.strict and doc["counts"].get("regressed") else 0
