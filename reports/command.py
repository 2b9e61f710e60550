"""``attackaudit compare DIR_A DIR_B``: the comparison of two runs (its arguments are
``harness/cli/report.py``'s).

``compare_main`` returns an exit code and raises ``InputError`` with a one-line message for input
the user must fix (a missing or empty run directory, runs made with other settings, ...).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .run_files import dump_json, load_runs, records
from attackaudit.errors import InputError


def compare_main(args: argparse.Namespace) -> int:
    """Diff two runs (``fidelity.diff``): one verdict line per implementation and norm on stdout;
    ``diff.csv``, ``diff.json``, ``audit.json`` (the verdicts), ``compare.md`` and
    ``compare.html`` in ``--out`` (default DIR_B). Runs made with different settings
    (``compare_settings.setting_changes``) are refused in one line naming them, unless
    ``--across-settings``: then every output says so first."""
    from attackaudit import fidelity
    from .audit_html import render_compare_html
    from .audit_markdown import render_compare_markdown

    from .compare_settings import refusal, setting_changes, settings_label

    run_a, run_b = Path(args.run_a), Path(args.run_b)
    table_a, manifests_a, _ = load_runs([run_a])
    table_b, manifests_b, _ = load_runs([run_b])
    settings, grid = setting_changes(manifests_a[0], manifests_b[0])
    if settings and not getattr(args, "across_settings", False):
        raise InputError(refusal(str(run_a), str(run_b), settings))
    notes = ([settings_label(settings)] if settings else []) + (
        [f"The grids differ ({'; '.join(grid)}): what one run lacks is new or removed."] if grid else [])
    from attackaudit.sources.dataset_images import dataset_images
    diff = fidelity.diff(table_a, table_b, alpha=getattr(args, "alpha", 0.05),
                         min_delta=getattr(args, "min_delta", None), by_model=bool(getattr(args, "by_model", False)),
                         dataset_images=dataset_images(manifests_b))
    out = Path(args.out) if getattr(args, "out", None) else run_b
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write the comparison into {out} ({exc.strerror or exc})") from None
    from .audit_text import verdict_line

    diff.to_csv(out / "diff.csv", index=False)
    dump_json(records(diff), out / "diff.json")
    counts = {str(k): int(v) for k, v in diff["verdict"].value_counts().items()} if len(diff) else {}
    verdicts = [{"implementation": r["implementation"], "norm": r["norm"], "model": r["model"],
                 "version_a": r["version_a"], "version_b": r["version_b"], "verdict": r["verdict"],
                 "reason": r["reason"], "line": verdict_line(r)} for _, r in diff.iterrows()]
    dump_json({"run_a": str(run_a), "run_b": str(run_b), "rule": fidelity.VERDICT_RULE, "counts": counts,
               "settings_differ": settings, "grid_differs": grid, "verdicts": verdicts}, out / "audit.json")
    title = "Comparison of two runs"
    (out / "compare.md").write_text(render_compare_markdown(diff, str(run_a), str(run_b), title, notes),
                                    encoding="utf-8")
    (out / "compare.html").write_text(render_compare_html(diff, str(run_a), str(run_b), tables=(table_a, table_b),
                                                          title=title, notes=notes), encoding="utf-8")
    for note in notes:
        print(note)
    for v in verdicts:
        print(v["line"])
    print(f"{', '.join(f'{n} {k}' for k, n in counts.items()) or 'nothing to compare'}; "
          f"audit: {out / 'audit.json'}; report: {out / 'compare.html'}")
    return 1 if getattr(args, "strict", False) and counts.get("regressed", 0) else 0
