"""The defect corpus: every rule's recall on defects that released attack libraries really shipped,
each beside its patched twin (benchmarks/defects/, format in its README).

    .venv/bin/python benchmarks/defect_corpus.py [--cases ID ...] [--work DIR] [--record] [--rows] [--markdown]
    .venv/bin/python benchmarks/defect_corpus.py --size default demo [--cases ID ...] [--record]

For each case: the release's spec and its sound siblings run on the case's models (the installed
release in this interpreter, another release in an overlay of it); the patched twin (a copy of the
release's package with the entry's source patch) is prepared as a release candidate
(``harness/audit/env.py`` ``prepare_env(..., source=TREE)``, the ``LIB@PATH`` machinery) and the
spec alone runs under its interpreter; its rows replace the defective ones beside the same
siblings. Both tables go through ``fidelity.flags`` and ``fidelity.recommend`` as a user's default
run's would: with the exact minima that run writes for the case's models (``case_exact``) and the
case's settings (``case_settings``), which pick the measured yardstick. ``--record`` stores
the rows under benchmarks/defects/rows/ (what ``tests/test_defect_corpus.py`` judges in
``make test``); ``--rows`` judges the recorded rows instead of running anything.

The table: per case the expected flag(s), the flags on the defect and on the fix, and the trust
verdict on each (trusted: in the trust set of its family and norm), and whether a user's run at the
default and at the demo size named it (stored rows, below); per rule, recall (cases whose defect it
named; an ``inseparable`` case is shown, not counted) and false flags on the patched twins and on the
sound built-ins (the siblings).

``--size``: recall at the size a user runs (``defect_sizes.py``): each case and its patched twin
run with ``attackaudit run``'s default settings, or the demo preset's, read from
``harness/run/config.py`` when it runs, and ``--metamorphic`` on the case's models, instead of the
case's own settings; ``--record`` stores one row per case and size in
benchmarks/defects/default_run.csv (the table's "named in a default/demo run" columns).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from defect_cases import ROWS, Case, check_source, load_cases, package_root, patched_tree  # noqa: E402
from defect_sizes import SIZES, load_sizes, size_cell, size_models, size_row, size_settings, store_sizes  # noqa: E402


@dataclass
class Outcome:
    """What the corpus found for one case (``fix_*``: the patched twin, or the control)."""

    case: Case
    on_defect: list[str]
    on_fix: list[str]
    trust_defect: str
    trust_fix: str
    sibling_flags: dict[str, list[str]] = field(default_factory=dict)
    fix_label: str = ""
    wall_s: float = 0.0
    #: release audits (``audit_verdicts``): the patched twin → the defect, and the reverse
    audit_defect: str = ""
    audit_fix: str = ""

    @property
    def audit_named(self) -> bool:
        return not self.case.audit or self.audit_defect == f"{self.case.audit} (ε use)"

    @property
    def audit_clean(self) -> bool:
        return not self.case.audit or not self.audit_fix.startswith(self.case.audit)

    @property
    def counted(self) -> bool:
        """Whether the case counts toward recall (an ``inseparable`` entry is shown, not counted)."""
        return not self.case.inseparable

    @property
    def named(self) -> bool:
        return set(self.case.flags) <= set(self.on_defect) and self.audit_named

    @property
    def clean(self) -> bool:
        return not set(self.case.flags) & set(self.on_fix) and self.audit_clean


# ------------------------------------------------------------------ running
def _config(case: Case, out: Path, attacks: list[str], python: str = "", size: str = ""):
    """The run of ``case``: its own settings, or (``size``) a user's run at that size on the case's
    models (``size_settings``, ``size_models``) with ``--metamorphic``."""
    from attackaudit.run.config import resolve

    r = case.run
    settings = {"models": list(r["models"]), "samples": int(r["samples"]), "budget": int(r["budget"]),
                "steps_scale": float(r["steps_scale"]), "seed": int(r["seed"])}
    if size:
        settings = {**size_settings(size), "models": size_models(case), "metamorphic": True}
    from dataclasses import fields

    from attackaudit.run.config import RunConfig

    if "exact" in {f.name for f in fields(RunConfig)}:  # no solving: judged with the shipped minima (case_exact)
        settings["exact"] = False
    return resolve({"out": str(out), "attacks": attacks, **settings, "targeted": bool(r["targeted"]),
                    "python": python, "workers": 1, "quiet": True, "force": True})


def _run(config) -> pd.DataFrame:
    from attackaudit import load_run
    from attackaudit.audit.env import run_under
    from attackaudit.run.runner import run

    (run_under if config.python else run)(config)
    return load_run(config.out)


def _pip_offline_build() -> None:
    """The patched tree is built with the project's setuptools (no isolated build environment,
    which would need the package index)."""
    args = os.environ.get("ATTACKAUDIT_PIP_ARGS", "")
    if "--no-build-isolation" not in args:
        os.environ["ATTACKAUDIT_PIP_ARGS"] = f"{args} --no-build-isolation".strip()


def run_case(case: Case, work: Path, size: str = "") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the defect run's rows: spec, siblings and control; the patched twin's rows: the spec alone,
    empty for a control case); ``size``: at a user's run size (``size_settings``) instead of the
    case's own settings."""
    from attackaudit.audit.env import prepare_env

    installed = importlib.metadata.version(case.dist)
    env = None if case.release == installed else prepare_env(case.dist, case.release, case.library)
    root, tops = package_root(env.site_packages if env else None, case.dist)
    check_source(case, root)
    attacks = [case.spec, *case.run["siblings"], *([case.control] if case.control else [])]
    runs = work / case.id / size if size else work / case.id
    defect = _run(_config(case, runs / "defect", attacks, env.python if env else "", size))
    if not case.patches:
        return defect, defect.iloc[0:0]
    _pip_offline_build()
    tree = patched_tree(case, root, tops, work / case.id / "tree", case.release)  # its hash: the same at every size
    fix_env = prepare_env(case.dist, case.release, case.library, source=tree)
    fix = _run(_config(case, runs / "fix", [case.spec], fix_env.python, size))
    return defect, fix


# ------------------------------------------------------------------ judging
def fix_table(case: Case, defect: pd.DataFrame, fix: pd.DataFrame) -> tuple[pd.DataFrame, str, str]:
    """The table the fix is judged on (the defect's rows replaced by the patched twin's, beside
    the same siblings), and the (implementation, library_version) judged as the fix."""
    if case.patches:
        rest = defect[defect["implementation"] != case.implementation]
        version = str(fix["library_version"].iloc[0]) if len(fix) else ""
        return pd.concat([rest, fix], ignore_index=True), case.implementation, version
    rest = defect[defect["implementation"] != case.implementation]
    control = case.control.rsplit("/", 1)[0]
    version = str(rest.loc[rest["implementation"] == control, "library_version"].iloc[0])
    return rest, control, version


def _named(found: pd.DataFrame, impl: str, norm: str, version: str | None = None) -> list[str]:
    m = (found["implementation"] == impl) & (found["norm"] == norm)
    if version is not None:
        m &= found["library_version"].astype(str) == version
    return sorted(set(found.loc[m, "flag"]))


def _trust(table: pd.DataFrame, found: pd.DataFrame, impl: str, family: str, norm: str, case: Case,
           size: str = "") -> str:
    from attackaudit.fidelity import recommend

    rec = recommend(table, found, n_boot=50, exact=case_exact(case), settings=case_settings(case, size))
    row = rec[(rec["family"] == family) & (rec["norm"] == norm)]
    if row.empty:
        return "not judged"
    r = row.iloc[0]
    members = [m["implementation"] for m in r["trust_set"]]
    if impl not in members:
        return f"not trusted ({r['verdict']})"
    return "top pick" if members[0] == impl else f"trusted ({r['verdict']})"


def case_exact(case: Case) -> pd.DataFrame | None:
    """The exact minima a user's default run writes for the case's models (``harness/exact``
    writes them on ``EXACT_MODELS``; the shipped tables hold seed 0's first samples, which every
    case's images are), every norm; None where no model of the case has them."""
    from attackaudit.exact.defaults import EXACT_MODELS
    from attackaudit.exact.ship import shipped_path
    from attackaudit.run.config import RunConfig

    parts = []
    for model in dict.fromkeys(m.base_model for m in RunConfig(models=list(case.run["models"])).twins):
        for norm in ("linf", "l2", "l1", "l0") if model in EXACT_MODELS else ():
            if shipped_path(model, norm).is_file():
                e = pd.read_parquet(shipped_path(model, norm))
                parts.append(e if "model" in e.columns else e.assign(model=model))
    return pd.concat(parts, ignore_index=True) if parts else None


def case_settings(case: Case, size: str = "") -> dict:
    """The ``steps_scale`` and ``budget`` the case's run used (a user's run's at ``size``): the
    settings a run's manifest gives its yardstick (``fidelity.yardstick.run_settings``)."""
    r = size_settings(size) if size else case.run
    return {"steps_scale": float(r["steps_scale"]), "budget": float(r["budget"])}


def measured_flags(table: pd.DataFrame, case: Case | None = None, size: str = "") -> pd.DataFrame:
    """``fidelity.flags`` without ``known_defect``: that flag is the corpus' own knowledge read
    back (fidelity/known_defects.py), never a rule's measurement, so it never counts as recall.
    With ``case``: judged as a user's default run would be, with the exact minima it writes for the
    case's models (``case_exact``) and the run's settings (``case_settings``)."""
    from attackaudit.fidelity import flags

    found = flags(table) if case is None else flags(table, exact=case_exact(case), settings=case_settings(case, size))
    return found[found["flag"] != "known_defect"]


def named_flags(case: Case, defect: pd.DataFrame, fix: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(the measured flags on the defective spec, those on the patched twin or the control)."""
    table, fix_impl, fix_version = fix_table(case, defect, fix)
    return (_named(measured_flags(defect, case), case.implementation, case.norm),
            _named(measured_flags(table, case), fix_impl, case.norm, fix_version))


def _audit_verdict(old: pd.DataFrame, new: pd.DataFrame, impl: str, norm: str) -> str:
    """The release audit's verdict on ``impl`` from the ``old`` rows to the ``new`` ones, "(ε use)"
    appended when its reason carries the ε-use evidence."""
    from attackaudit.fidelity import diff
    from attackaudit.fidelity.eps_use import EVIDENCE_PREFIX

    d = diff(old, new)
    row = d[(d["implementation"] == impl) & (d["norm"] == norm)]
    if row.empty:
        return "not judged"
    verdict, reason = str(row["verdict"].iloc[0]), str(row["reason"].iloc[0])
    return f"{verdict} (ε use)" if EVIDENCE_PREFIX in reason else verdict


def audit_verdicts(case: Case, defect: pd.DataFrame, fix: pd.DataFrame) -> tuple[str, str]:
    """(the audit of the patched twin as the old release against the defect as the new one, the
    audit the other way round), on the spec's own rows; ("", "") when the case asks none."""
    if not case.audit or not len(fix):
        return "", ""
    mine = defect[defect["implementation"] == case.implementation]
    return (_audit_verdict(fix, mine, case.implementation, case.norm),
            _audit_verdict(mine, fix, case.implementation, case.norm))


def judge(case: Case, defect: pd.DataFrame, fix: pd.DataFrame, size: str = "") -> Outcome:
    """Flags and trust on the defect's table and on the fix's (``size``: a run at a user's size)."""
    norm = case.norm
    found = measured_flags(defect, case, size)
    family = str(defect.loc[defect["implementation"] == case.implementation, "family"].iloc[0])
    table, fix_impl, fix_version = fix_table(case, defect, fix)
    found_fix = measured_flags(table, case, size)
    siblings = {s.rsplit("/", 1)[0]: _named(found, s.rsplit("/", 1)[0], s.rsplit("/", 1)[1])
                for s in case.run["siblings"]}
    label = f"{fix_impl} {fix_version}" if case.patches else f"control {fix_impl}"
    audit_defect, audit_fix = audit_verdicts(case, defect, fix)
    return Outcome(case, _named(found, case.implementation, norm), _named(found_fix, fix_impl, norm, fix_version),
                   _trust(defect, found, case.implementation, family, norm, case, size),
                   _trust(table, found_fix, fix_impl, family, norm, case, size), siblings, label,
                   audit_defect=audit_defect, audit_fix=audit_fix)


def recorded(case: Case) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows ``--record`` stored for ``case`` (FileNotFoundError when there are none)."""
    defect = pd.read_parquet(ROWS / f"{case.id}.defect.parquet")
    fix_path = ROWS / f"{case.id}.fix.parquet"
    return defect, (pd.read_parquet(fix_path) if fix_path.is_file() else defect.iloc[0:0])


def record(case: Case, defect: pd.DataFrame, fix: pd.DataFrame) -> None:
    ROWS.mkdir(parents=True, exist_ok=True)
    defect.to_parquet(ROWS / f"{case.id}.defect.parquet", index=False)
    if len(fix):
        fix.to_parquet(ROWS / f"{case.id}.fix.parquet", index=False)


# ------------------------------------------------------------------ the table
def _cell(names: list[str]) -> str:
    return ", ".join(names) if names else "—"


def table(outcomes: list[Outcome]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per case, one row per rule). Per rule: recall over the cases that expect it; false
    flags on the patched twins of those cases (another case's defect that a twin still has, e.g. an
    EAD without its zero-division crash still leaving the box, is shown in the case row, not counted);
    false flags on the sound built-ins (every case's siblings). "named in a default/demo run": the
    stored runs at a user's size (defect_sizes.py, benchmarks/defects/default_run.csv)."""
    stored = load_sizes()
    cases = pd.DataFrame([{
        "case": o.case.id, "release": f"{o.case.dist} {o.case.release}", "spec": o.case.spec,
        "expected": ", ".join(o.case.flags) + (f"; audit {o.case.audit} (ε use)" if o.case.audit else ""),
        "on defect": _cell(o.on_defect) + (f"; audit {o.audit_defect}" if o.case.audit else ""),
        "on fix": _cell(o.on_fix) + (f" ({o.fix_label})" if not o.case.patches else "")
        + (f"; audit {o.audit_fix}" if o.case.audit else ""),
        "trust (defect)": o.trust_defect, "trust (fix)": o.trust_fix,
        "named": ("yes" if o.named else "NO") if o.counted else f"{'yes' if o.named else 'no'} (inseparable)",
        "fix clean": "yes" if o.clean else "NO",
        **{f"named in a {size} run": size_cell(stored, o.case.id, size) for size in SIZES}} for o in outcomes])
    rules = sorted({f for o in outcomes for f in o.case.flags})
    rows = []
    for rule in rules:
        mine = [o for o in outcomes if rule in o.case.flags and o.counted]
        apart = [o for o in outcomes if rule in o.case.flags and not o.counted]
        sibs = [(o.case.id, s) for o in outcomes for s, names in o.sibling_flags.items() if rule in names]
        n_sibs = sum(len(o.sibling_flags) for o in outcomes)
        rows.append({"rule": rule, "recall": f"{sum(rule in o.on_defect for o in mine)} of {len(mine)}",
                     "false flags on patched twins": f"{sum(rule in o.on_fix for o in mine)} of {len(mine)}",
                     "false flags on sound built-ins": f"{len(sibs)} of {n_sibs}",
                     "missed": ", ".join(o.case.id for o in mine if rule not in o.on_defect) or "—",
                     "inseparable (not counted)": ", ".join(o.case.id for o in apart) or "—"})
    audited = [o for o in outcomes if o.case.audit]
    if audited:  # the release audit's ε-use rule (fidelity/eps_use.py), judged as a rule of its own
        rows.append({"rule": "audit: ε use", "recall": f"{sum(o.audit_named for o in audited)} of {len(audited)}",
                     "false flags on patched twins": f"{sum(not o.audit_clean for o in audited)} of {len(audited)}",
                     "false flags on sound built-ins": "—",
                     "missed": ", ".join(o.case.id for o in audited if not o.audit_named) or "—",
                     "inseparable (not counted)": "—"})
    return cases, pd.DataFrame(rows)


def known_entries(cases: list[Case]) -> dict:
    """fidelity/known_defects.json: the cases every run of whose spec has the defect."""
    def first_sentence(text: str) -> str:
        text = " ".join(text.split())
        end = text.find(". ")
        return text[: end + 1] if end > 0 else text
    return {"source": "benchmarks/defects/ (benchmarks/defect_corpus.py --known)", "defects": [
        {"implementation": c.implementation, "norm": c.norm, "library": c.dist, "since": c.since,
         "through": c.release, "case": c.id, "cause": first_sentence(c.summary), "file": c.source_file,
         "line": c.source_line} for c in cases if c.in_every_run]}


def _markdown(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(df.columns) + " |\n|" + "---|" * len(df.columns) + "\n"
    return head + "".join("| " + " | ".join(str(v) for v in r) + " |\n" for r in df.itertuples(index=False))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="*", help="case ids (default: all)")
    p.add_argument("--work", default="runs/defect-corpus", help="where the runs and patched trees go")
    p.add_argument("--record", action="store_true", help="store the rows under benchmarks/defects/rows/")
    p.add_argument("--rows", action="store_true", help="judge the recorded rows, run nothing")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--known", action="store_true", help="write fidelity/known_defects.json and stop")
    p.add_argument("--size", nargs="+", choices=SIZES, help="run each case at a user's run size (`attackaudit run`'s "
                   "defaults, the demo preset's) with --metamorphic instead of its own settings; --record stores "
                   "the rows of benchmarks/defects/default_run.csv")
    a = p.parse_args(argv)
    if a.size:
        return main_sizes(load_cases(a.cases), a.size, Path(a.work), a.record, a.markdown)
    if a.known:
        import json

        target = Path(__file__).resolve().parents[1] / "fidelity" / "known_defects.json"
        target.write_text(json.dumps(known_entries(load_cases(a.cases)), indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {target}")
        return 0
    start = time.perf_counter()
    outcomes = []
    for case in load_cases(a.cases):
        t0 = time.perf_counter()
        defect, fix = recorded(case) if a.rows else run_case(case, Path(a.work))
        if a.record and not a.rows:
            record(case, defect, fix)
        o = judge(case, defect, fix)
        o.wall_s = time.perf_counter() - t0
        outcomes.append(o)
        print(f"{case.id}: defect {_cell(o.on_defect)}; fix {_cell(o.on_fix)} ({o.wall_s:.0f} s)", file=sys.stderr)
    cases, rules = table(outcomes)
    show = _markdown if a.markdown else (lambda df: df.to_string(index=False) + "\n")
    print(show(cases))
    print(show(rules))
    print(f"{len(outcomes)} cases in {time.perf_counter() - start:.0f} s")
    return 0 if all(o.named and o.clean for o in outcomes if o.counted) else 1


def main_sizes(cases: list[Case], sizes: list[str], work: Path, store: bool, markdown: bool) -> int:
    """Each case and its patched twin at each of ``sizes``, one at a time; prints one row per case
    and size; ``store``: each row goes into benchmarks/defects/default_run.csv as soon as it is done."""
    rows = []
    for case in cases:
        for size in sizes:
            t0 = time.perf_counter()
            defect, fix = run_case(case, work, size)
            row = size_row(case, size, judge(case, defect, fix, size), defect, time.perf_counter() - t0)
            rows.append(row)
            if store:
                store_sizes([row])
            print(f"{case.id} at the {size} size: named {row['named']}, fix clean {row['fix_clean']}; "
                  f"{row['seen']} ({row['wall_s']} s)", file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    print(_markdown(df) if markdown else df.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
