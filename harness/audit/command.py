"""``attackaudit audit LIB==V1 LIB==V2``: the same grid on two releases of a library, and what changed.

Each pinned release gets its own environment (``audit_env.prepare_env``: cached, reused, never
touching the installed one) and its run executes under that environment's interpreter
(``RunConfig.python``); ``LIB==V`` alone compares the release with the installed one.
``LIB@PATH`` is a release candidate (a wheel, an sdist or a source tree), named in every report by
its version and content hash (``VERSION+c<hash>``, see ``audit_env``). Both runs
use the same models, hashed subset, budget and seed and go to ``OUT/<library>-<version>/``
(ordinary run directories: rerunning the command resumes them). ``fidelity.diff`` of the two runs
becomes ``OUT/audit.json``, ``OUT/diff.csv`` and the report section ``OUT/audit.md`` /
``OUT/audit.html``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from attackaudit.audit.bisect import bisect, bisect_lines, index_releases, measures, version_key
from attackaudit.audit.env import (Env, installed_version, is_current_interpreter, prepare_env, resolution_phrase, run_under,
                        unmet_phrase)
from attackaudit.errors import InputError

if TYPE_CHECKING:  # annotations only: the runner loads when the audit runs
    from attackaudit.run.config import RunConfig

__all__ = ["Release", "Side", "audit", "bisect", "index_releases", "parse_releases", "add_arguments", "main"]

_RELEASE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*$")
_CANDIDATE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*@\s*(.+?)\s*$")


@dataclasses.dataclass(frozen=True)
class Release:
    """One side of an audit as the user named it: ``LIB==V`` (``version``) or ``LIB@PATH``
    (``source``: a wheel, an sdist or a source tree, a release candidate)."""

    version: str = ""
    source: str = ""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_releases(releases: list[str]) -> tuple[str, str, list[Release]]:
    """(library, distribution, releases) of ``LIB==V`` / ``LIB@PATH`` arguments; ValueError (one line) otherwise."""
    from attackaudit.adapters import BUILTIN_LIBRARIES

    if not 1 <= len(releases) <= 2:
        raise InputError(f"give one or two releases (LIB==V1 [LIB==V2]), got {len(releases)}")
    by_name = {_normal(k): k for k in BUILTIN_LIBRARIES} | {_normal(v): k for k, v in BUILTIN_LIBRARIES.items()}
    libraries, versions = [], []
    for text in releases:
        m = _RELEASE.match(text) or _CANDIDATE.match(text)
        if not m:
            raise InputError(f"release {text!r} is not of the form LIB==VERSION (e.g. adv-lib==0.2.6) "
                             "or LIB@PATH (a wheel, an sdist or a source tree)")
        library = by_name.get(_normal(m.group(1)))
        if library is None:
            raise InputError(f"unknown library {m.group(1)!r} in {text!r}; audit knows "
                             f"{', '.join(sorted(set(BUILTIN_LIBRARIES.values())))}")
        libraries.append(library)
        if m.re is _CANDIDATE:
            if not Path(m.group(2)).expanduser().exists():
                raise InputError(f"release candidate {m.group(2)!r} does not exist (LIB@PATH: a wheel, an sdist or "
                                 "a source tree)")
            versions.append(Release(source=str(Path(m.group(2)).expanduser().resolve())))
        else:
            versions.append(Release(version=m.group(2)))
    if len(set(libraries)) > 1:
        raise InputError(f"the releases name two libraries ({' and '.join(libraries)}); audit compares one library")
    if len(versions) == 2 and versions[0] == versions[1]:
        raise InputError(f"both releases are {releases[0]}; give two different versions")
    return libraries[0], BUILTIN_LIBRARIES[libraries[0]], versions


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
            # p_value: the verdict's (either endpoint beyond its margin, over its own tests; None: not tested)
            "paired_test": {"test": "per image: failure (paired, ±5 points) and distance ratio (signed rank, ±5%)",
                            **{k: r[k] for k in ("n_samples", "n_better", "n_worse", "ties", "answer", "effect_size")},
                            "failure_before": r["failure_a"], "failure_after": r["failure_b"], "p_distance": r["p_value"],
                            "p_value": float(r["p_adjusted"]) if math.isfinite(r["p_adjusted"]) else None},
            "flags_before": _split(r["flags_a"]), "flags_after": _split(r["flags_b"]),
            "flags_appeared": _split(r["flags_appeared"]), "flags_disappeared": _split(r["flags_disappeared"]),
        })
    return out


def _impl_keys(table):
    from attackaudit.results.schema import with_implementation

    return with_implementation(table)["implementation"].astype(str) + "|" + table["norm"].astype(str)


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
        if self.env is not None and self.env.source:
            return f"{self.version} (candidate {self.env.source})"
        return f"{self.version}" + ("" if self.env else " (installed)")


def run_side(side: Side, base, library: str, echo) -> None:
    from attackaudit.run.config import ConfigError
    from attackaudit.run.runner import run

    config = dataclasses.replace(base, out=str(side.run_dir), python=side.env.python if side.env else "")
    try:
        # the whole run (catalogue, plan, workers) under the release's interpreter
        summary = run_under(config) if config.python and not is_current_interpreter(config.python) else run(config)
    except ConfigError as exc:
        if "match no attack" not in str(exc):
            raise
        side.empty = True  # every implementation of the other release is then new / removed
        echo(f"{library} {side.version}: no attack of this release matches the filters")
        return
    echo(f"{library} {side.version}: {summary.line()}")


def _table(side: Side, columns):
    import pandas as pd
    from attackaudit.reports.run_files import load_runs
    if side.empty:
        return pd.DataFrame(columns=columns)
    table, manifests, _ = load_runs([side.run_dir])
    versions = set(table["library_version"].astype(str))
    if versions != {side.version}:
        raise RuntimeError(f"the run in {side.run_dir} recorded {', '.join(sorted(versions))}, not {side.version}: "
                           "the release environment did not pin the library")
    return table


def prepare_side(release: Release | str, installed: str, dist: str, library: str, out: Path, echo) -> Side:
    """A release's side of the audit: its environment prepared (the installed release runs here,
    as it is). A candidate's version is its own plus ``+c<content hash>`` (``audit_env``)."""
    release = Release(version=release) if isinstance(release, str) else release
    env = None
    if release.source or release.version != installed:
        env = prepare_env(dist, release.version, library, source=release.source)
        echo(env.line())
        for warning in env.warnings:
            echo(f"attackaudit: warning: {warning}")
    version = env.version if env is not None else release.version
    return Side(version, env, out / f"{library}-{version}")


def diff_sides(a: Side, b: Side, *, alpha: float, min_delta: float | None, eps: dict[str, float] | None = None):
    """``fidelity.diff`` of two finished sides, their subset hash and result tables (the evidence)."""
    from attackaudit import fidelity
    from attackaudit.results.schema import ROW_COLUMNS
    from attackaudit.results.store import read_manifest
    from attackaudit.sources.dataset_images import dataset_images
    table_a, table_b = _table(a, ROW_COLUMNS), _table(b, ROW_COLUMNS)
    hashes = {str(t["subset_hash"].iloc[0]) for t in (table_a, table_b) if len(t)}
    if len(hashes) > 1:
        raise RuntimeError(f"the two runs attacked different subsets ({', '.join(sorted(hashes))})")
    diff = fidelity.diff(table_a, table_b, alpha=alpha, min_delta=min_delta, eps=eps,
                         flags_a=flags_in_joint_context(table_a, table_b),
                         flags_b=flags_in_joint_context(table_b, table_a),
                         dataset_images=dataset_images([read_manifest(s.run_dir) or {} for s in (a, b) if not s.empty]))
    return diff, next(iter(hashes), ""), (table_a, table_b)


def side_doc(side: Side) -> dict:
    """audit.json's account of one release: where it ran and what its environment had to resolve."""
    env = side.env
    return {"version": side.version, "run_dir": str(side.run_dir), "installed": env is None,
            "no_matching_attack": side.empty,
            "environment": None if env is None else {
                "path": env.path, "python": env.python, "reused": env.reused, "key": env.key,
                "prepare_s": round(env.prepare_s, 3), "added_requirements": env.added_requirements,
                "resolved": env.resolved, "unmet": env.unmet, "warnings": env.warnings},
            **({"candidate": {"source": env.source, "content_hash": env.content_hash}} if env and env.source else {})}


def environment_lines(sides: list[Side]) -> list[str]:
    """One line per release: what its environment had to resolve beside the release, and why."""
    out = []
    for s in sides:
        if s.env is None:
            out.append(f"{s.version}: the installed release, in the project's environment")
        else:
            what = f"{s.version} (candidate {s.env.source}, content sha256 {s.env.content_hash})" \
                if s.env.source else s.version
            phrases = [resolution_phrase(r) for r in s.env.resolved] + [unmet_phrase(u) for u in s.env.unmet]
            out.append(f"{what}: {'; '.join(phrases)}" if phrases else
                       f"{what}: the release alone; the project's environment satisfies all its requirements")
    return out


def _report_sections(env_lines: list[str], bisect_doc: dict | None, dist: str) -> tuple[str, str]:
    """Markdown and HTML of the audit's own sections: environments, and the bisect evidence."""
    from html import escape

    md = ["", "## Release environments", ""] + [f"- {ln}" for ln in env_lines]
    html = ["<h2>Release environments</h2><ul>"] + [f"<li>{escape(ln)}</li>" for ln in env_lines] + ["</ul>"]
    if bisect_doc:
        md += ["", f"## Bisect over {len(bisect_doc['releases'])} releases of {dist}", ""]
        md += [f"- {ln}" for ln in bisect_doc["lines"]]
        md += ["", "| release | implementation | norm | ξ | ASR | verdict vs first |", "|---|---|---|---|---|---|"]
        html += [f"<h2>Bisect over {len(bisect_doc['releases'])} releases of {escape(dist)}</h2><ul>"]
        html += [f"<li>{escape(ln)}</li>" for ln in bisect_doc["lines"]] + ["</ul><table><tr><th>release</th>"
                 "<th>implementation</th><th>norm</th><th>ξ</th><th>ASR</th><th>verdict vs first</th></tr>"]
        for t in bisect_doc["tested"]:
            if t.get("error"):
                md.append(f"| {t['version']} | — | — | — | — | not testable: {t['error']} |")
                html.append(f"<tr><td>{escape(t['version'])}</td><td colspan=5>not testable: "
                            f"{escape(t['error'])}</td></tr>")
            for r in t.get("implementations", []):
                xi, asr = (f"{v:.3f}" if isinstance(v, float) else "—" for v in (r["optimality"], r["asr"]))
                cells = [t["version"], r["implementation"], r["norm"], xi, asr, r["verdict"]]
                md.append("| " + " | ".join(cells) + " |")
                html.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
        html.append("</table>")
    return "\n".join(md) + "\n", "\n".join(html)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What every side of one audit shares: the library, the grid, where runs go, the diff's test."""

    library: str
    dist: str
    installed: str  # the installed release's version ("none" when not installed)
    base: "RunConfig"  # only ``out`` and ``python`` differ per side
    out: Path
    alpha: float
    min_delta: float | None
    echo: Callable[[str], Any]
    eps: dict[str, float] | None = None  # ``--eps``: {norm or "*": ε}, fidelity/eps_use.py

    def prepare(self, release: Release | str) -> Side:
        return prepare_side(release, self.installed, self.dist, self.library, self.out, self.echo)

    def run(self, side: Side) -> None:
        run_side(side, self.base, self.library, self.echo)

    def diff(self, a: Side, b: Side):
        return diff_sides(a, b, alpha=self.alpha, min_delta=self.min_delta, eps=self.eps)


def audit(releases: list[str], out: str | Path, flags: dict, *, alpha: float = 0.05, min_delta: float | None = None,
          bisect_range: bool = False, echo=print, eps: dict[str, float] | None = None) -> dict:
    """Run the audit; returns the audit.json document. ValueError (one line) for bad input or a
    release that cannot be installed. ``bisect_range``: also find, over the releases between the
    two on the package index, the first at which each changed implementation's verdict changed."""
    from attackaudit.run.config import resolve

    library, dist, named = parse_releases(releases)
    installed = installed_version(dist)
    named = _ordered_releases(named, installed, dist, bisect_range)
    out = Path(out)
    # the grid, validated before anything is installed; only ``out`` and ``python`` differ per side
    base = resolve(None, {**flags, "out": str(out / library), "libraries": [library]})
    plan = _Plan(library, dist, installed, base, out, alpha, min_delta, echo, eps)
    between = index_releases(dist, *[r.version for r in named]) if bisect_range else []  # before installs: fail fast
    sides = [plan.prepare(release) for release in named]
    for side in sides:
        plan.run(side)
    if all(s.empty for s in sides):
        raise InputError(f"no attack of {dist} {' or '.join(s.version for s in sides)} matches the filters "
                         "(--families/--norms/--attacks); `attackaudit attacks` lists the catalogue")
    diff, subset_hash, tables = plan.diff(*sides)
    out.mkdir(parents=True, exist_ok=True)
    diff.to_csv(out / "diff.csv", index=False)
    counts = {str(k): int(v) for k, v in diff["verdict"].value_counts().items()} if len(diff) else {}
    bisect_doc, tested = _bisect_doc(plan, sides, diff, between) if bisect_range else (None, sides)
    env_lines = environment_lines(tested)
    doc = _audit_doc(plan, sides, diff, env_lines, subset_hash, counts, bisect_doc)
    (out / "audit.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    _write_pages(plan, sides, diff, tables, env_lines, doc.get("bisect"))
    for record in doc["implementations"]:
        echo(record["line"])
    for line in (bisect_doc or {}).get("lines", []):
        echo(line)
    echo(f"{', '.join(f'{n} {k}' for k, n in counts.items()) or 'nothing to compare'}; "
         f"audit: {out / 'audit.json'}; report: {out / 'audit.html'}")
    return doc


def _ordered_releases(named: list[Release], installed: str, dist: str, bisect_range: bool) -> list[Release]:
    """The two releases to compare, before then after (by version under ``bisect_range``); one named
    release is paired with the installed one. ValueError (one line) for nothing to compare."""
    if bisect_range and (len(named) != 2 or any(r.source for r in named)):
        raise InputError(f"--bisect needs two releases, {dist}==V1 {dist}==V2, and searches the releases between them")
    if bisect_range:
        return [Release(v) for v in sorted((r.version for r in named), key=version_key)]
    if len(named) == 1:
        if named[0].version == installed:
            raise InputError(f"{dist}=={installed} is the installed release; name another one, or two releases")
        if installed == "none":
            raise InputError(f"{dist} is not installed here: name two releases, {dist}==V1 {dist}==V2")
        # before = the older release; a candidate comes after the installed release it is compared with
        named = [Release(installed), named[0]] if named[0].source else \
            sorted([named[0], Release(installed)], key=lambda r: version_key(r.version))
    return named


def _bisect_doc(plan: _Plan, sides: list[Side], diff, between: list[str]) -> tuple[dict, list[Side]]:
    """audit.json's ``bisect``: each changed implementation's first release with the new verdict,
    over the releases ``between`` the two sides, with each tested release's evidence; and every
    side that ran (the two and the tested releases), in version order."""
    tested_sides = {s.version: s for s in sides}

    def measure(version: str) -> dict:
        side = plan.prepare(version)
        plan.run(side)
        tested_sides[version] = side
        return measures(plan.diff(sides[0], side)[0], "b")

    changed = {(r["implementation"], r["norm"]): r["verdict"] for _, r in diff.iterrows()
               if r["verdict"] != "unchanged"}
    changes, evidence = bisect(between, changed, measure, plan.echo)
    first = {k: {**v, "verdict": "first release"} for k, v in measures(diff, "a").items()}
    evidence = {sides[0].version: first, **evidence, sides[1].version: measures(diff, "b")}
    tested = []
    for version, found in sorted(evidence.items(), key=lambda item: version_key(item[0])):
        side = tested_sides.get(version)
        entry = {"version": version, **(side_doc(side) if side else {})}
        if "error" in found:
            entry["error"] = found["error"]
        else:
            entry["implementations"] = [{"implementation": k[0], "norm": k[1], **v}
                                        for k, v in sorted(found.items())]
        tested.append(entry)
    doc = {"releases": between, "changes": changes, "tested": tested,
           "evidence": "ξ and ASR of each tested release against the joint envelope of the first "
                       "release and that release, as its verdict against the first uses them",
           "lines": bisect_lines(changes, plan.dist, len(between), len(evidence))}
    return doc, sorted(tested_sides.values(), key=lambda s: version_key(s.version))


def _audit_doc(plan: _Plan, sides: list[Side], diff, env_lines: list[str], subset_hash: str, counts: dict,
               bisect_doc: dict | None) -> dict:
    """The audit.json document (JSON-clean: no NaN, numpy scalars as numbers)."""
    from attackaudit import fidelity

    base = plan.base
    return _clean({
        "library": plan.library, "distribution": plan.dist,
        "before": side_doc(sides[0]), "after": side_doc(sides[1]),
        "environments": env_lines,
        "grid": {"models": base.models, "dataset": base.dataset, "families": base.families, "norms": base.norms,
                 "attacks": base.attacks, "samples": base.samples, "budget": base.budget, "seed": base.seed,
                 "steps_scale": base.steps_scale, "targeted": base.targeted, "subset_hash": subset_hash},
        "rule": fidelity.VERDICT_RULE, "alpha": plan.alpha, "min_delta": plan.min_delta, "counts": counts,
        "implementations": implementation_records(diff),
        **({"bisect": bisect_doc} if bisect_doc else {}),
    })


def _write_pages(plan: _Plan, sides: list[Side], diff, tables, env_lines: list[str], bisect_doc: dict | None) -> None:
    """audit.md and audit.html: the diff's report section, then the environments and the bisect."""
    from attackaudit.reports.html import render_compare_html
    from attackaudit.reports.markdown import render_compare_markdown

    out, dist = plan.out, plan.dist
    label_a, label_b = (f"{dist} {side.label} ({side.run_dir})" for side in sides)
    extra_md, extra_html = _report_sections(env_lines, bisect_doc, dist)
    (out / "audit.md").write_text(render_compare_markdown(diff, label_a, label_b) + extra_md, encoding="utf-8")
    page = render_compare_html(diff, label_a, label_b, tables=tables)
    at = page.rfind("</body>")
    page = page[:at] + extra_html + page[at:] if at >= 0 else page + extra_html
    (out / "audit.html").write_text(page, encoding="utf-8")
