"""Reports: files, contents in order, escaping of everything that came from a library or a user,
merging runs, exact distances, the compare command, one-line errors.

Tables are hand-built (fidelity.synthetic) and stored as real run directories, so the whole path
``write_report(run_dirs)`` → load → fidelity → render is exercised. Kept small: the module
builds one full report and a few JSON-only ones.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity.synthetic import job_rows, table
from attackaudit.reports import write_report
from attackaudit.cli import report as command
from attackaudit.reports.svg import shorten
from attackaudit.results.store import write_job, write_manifest

HOSTILE = "<script>alert(1)</script>"
EVIL_IMPL = f'evil{HOSTILE}"&\'/pgd'          # library "evil<script>alert(1)<", attack "/script>..."
EVIL_VERSION = '1.0"&<b>|x'
EVIL_ERROR = f"RuntimeError: {HOSTILE} & \"quoted\" 'single'"
EVIL_PARAMS = json.dumps({"loss": HOSTILE, "note": "a & b"})
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def _base(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    d = rng.uniform(0.05, 0.3, n)
    d[0] = 0.0  # misclassified clean
    return d


def make_table(models=("m-cnn", "m-mlp"), norms=("linf", "l2"), n=10, fool_version="3.3.4",
               fool_scale=1.06) -> pd.DataFrame:
    jobs = []
    for k, model in enumerate(models):
        base = _base(n, k)
        for norm in norms:
            s = 1.0 if norm == "linf" else 4.0
            jobs.append(job_rows(model, "adv_lib/apgd", norm, base * s, family="apgd", library_version="0.2.8",
                                 kind="fixed"))
            jobs.append(job_rows(model, "foolbox/LinfPGD", norm, base * s * fool_scale, family="apgd",
                                 library_version=fool_version))
            evil = np.where(base > 0.22, np.inf, base * s * 1.4)
            jobs.append(job_rows(model, EVIL_IMPL, norm, evil, family="apgd", library_version=EVIL_VERSION,
                                 status=["crash"] + ["ok"] * (n - 1), error=[EVIL_ERROR] + [""] * (n - 1)))
            jobs.append(job_rows(model, "art/fmn", norm, base * s * 1.2, family="fmn", library_version="1.17"))
    t = table(*jobs)
    t.loc[t["implementation"] == EVIL_IMPL, "params"] = EVIL_PARAMS
    return t


def store_run(run_dir: Path, rows: pd.DataFrame, name: str = "synthetic", **manifest) -> Path:
    for i, (_, g) in enumerate(rows.groupby("job_id", sort=True)):
        write_job(run_dir, f"job{i:03d}", g)
    write_manifest(run_dir, {"name": name, "seed": 0, "subset_hash": "h", "dataset": "digits",
                             "library_versions": {"adv_lib": "0.2.8"}, "torch_version": "2.x", "device": "cpu",
                             "unavailable": [{"library": "cleverhans", "reason": f"No module named {HOSTILE}"}],
                             "skipped": [], **manifest})
    return run_dir


def store_exact(run_dir: Path, model: str, norm: str, rows: pd.DataFrame) -> None:
    """Exact distances for ``model``/``norm`` as ``attackaudit exact`` stores them: the true
    minimum is 0.9 × adv_lib's distance, and on sample 3 a proven lower bound just above adv_lib's
    distance (below everyone else's) makes adv_lib ``below_exact`` there."""
    r = rows[(rows["model"] == model) & (rows["norm"] == norm) & (rows["implementation"] == "adv_lib/apgd")]
    d = r["best_distance"].to_numpy() * 0.9
    lower = d.copy()
    lower[3] = r["best_distance"].to_numpy()[3] * 1.01
    exact = pd.DataFrame({"model": model, "dataset": "digits", "subset_hash": "h", "sample": r["sample"].to_numpy(),
                          "label": r["label"].to_numpy(), "norm": norm, "exact_distance": d, "lower_bound": lower,
                          "upper_bound": d, "status": np.where(d > 0, "optimal", "clean_misclassified"),
                          "solve_s": 0.1, "adversarial_class": 1, "adversarial": None, "error": ""})
    path = run_dir / "exact" / f"{model}__{norm}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    exact.to_parquet(path, index=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One full report of a run with two models, two norms, a hostile library, exact distances."""
    run = tmp_path_factory.mktemp("run")
    rows = make_table()
    store_run(run, rows)
    store_exact(run, "m-mlp", "linf", rows)
    written = write_report([run])
    return run, written


def _strict_json(path: Path):
    def bad(token):
        raise AssertionError(f"{path.name}: non-standard JSON constant {token}")
    return json.loads(path.read_text(), parse_constant=bad)


def test_writes_every_file_into_the_run_dir(report):
    run, written = report
    for name in ("leaderboard.csv", "leaderboard.json", "alignment.csv", "alignment.json", "flags.csv",
                 "flags.json", "report.md", "report.html", "report.json", "exact_optimality.csv"):
        assert name in written and written[name] == run / name and (run / name).stat().st_size > 0, name
    board = _strict_json(run / "leaderboard.json")
    assert {"implementation", "optimality", "optimality_attackbench", "asr_at_ref", "median_distance",
            "forwards", "backwards", "wall_s", "opt_m-cnn", "opt_m-mlp"} <= set(board[0])
    align = _strict_json(run / "alignment.json")
    assert align["implementations"] and align["pairs"]
    flags = _strict_json(run / "flags.json")
    assert {"model", "library", "attack", "family", "norm", "flag", "evidence"} <= set(flags[0])
    assert {"crash", "below_exact"} <= {f["flag"] for f in flags}
    summary = _strict_json(run / "report.json")
    assert summary["summary"]["n_implementations"] == 4
    assert pd.read_csv(run / "leaderboard.csv")["norm"].nunique() == 2


def test_html_escapes_everything_from_libraries_and_users(report):
    run, _ = report
    page = (run / "report.html").read_text()
    assert "<script>alert" not in page and "alert(1)</script>" not in page
    assert page.count("<script") == 1  # the sorting script, nothing else
    assert ESCAPED in page                                        # names
    assert "RuntimeError: &lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quoted&quot; &#x27;single&#x27;" in page
    assert "&quot;loss&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in page  # params
    assert "1.0&quot;&amp;&lt;b&gt;|x" in page and "<b>" not in page  # versions
    # self-contained: no external fetches, only namespace URIs inside the inline SVGs
    assert not re.search(r"<(link|img|iframe|object|embed)\b", page)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) <= {"http://www.w3.org/2000/svg",
                                                                "http://www.w3.org/1999/xlink"}
    assert "<!--" not in page  # matplotlib writes labels into comments; they are stripped


def test_html_allows_only_its_own_script_by_hash(report):
    import base64
    import hashlib

    page = (report[0] / "report.html").read_text()
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert f"script-src &#x27;sha256-{digest}&#x27;" in csp and "default-src &#x27;none&#x27;" in csp


def test_contents_in_order_with_table_of_contents(report):
    run, _ = report
    page = (run / "report.html").read_text()
    ids = ["summary", "recommendation", "leaderboard", "curves", "alignment", "flags", "crashes", "exact",
           "implementations"]
    positions = [page.index(f'id="{i}"') for i in ids]
    assert positions == sorted(positions)
    toc = page[page.index('class="toc"'):page.index("</nav>")]
    for i in ("summary", "leaderboard", "curves", "alignment", "flags", "crashes", "exact"):
        assert f'href="#{i}"' in toc
    # 2 models × 2 norms robustness plots; per family and norm (apgd, fmn × linf, l2) its evidence: the
    # trust set's curves, and for apgd (3 implementations) the per-image scatter behind the verdict
    labels = re.findall(r'<figure role="img" aria-label="([^"]*)"', page)
    assert sum(x.startswith("robust accuracy against epsilon") for x in labels) == 4
    assert sum(x.startswith("robustness curves, ") for x in labels) == 4
    # the scatter behind apgd l2's "clear" (top pick on x) and behind linf's "only implementation"
    # (foolbox against the flagged adv_lib it was left alone by)
    assert sorted(x for x in labels if x.startswith("per-image distances")) == [
        "per-image distances, adv_lib/apgd 0.2.8 against foolbox/LinfPGD 3.3.4",
        "per-image distances, foolbox/LinfPGD 3.3.4 against adv_lib/apgd 0.2.8"]
    assert page.count("<figure") == 10 and page.count("<svg") == 10
    # the summary states what ran and the recommendation
    for fact in ("m-cnn, m-mlp", "subset hash h", "2000 forwards + backwards per sample", "adv_lib 0.2.8",
                 "foolbox 3.3.4", "4 ran, in 16 jobs", "Largest cross-library gap: apgd"):
        assert fact in page, fact
    md = (run / "report.md").read_text()
    heads = [md.index(h) for h in ("## 1. Summary", "## 2. Leaderboard", "## 3. Robust accuracy",
                                   "## 4. Alignment", "## 5. Flags", "## 6. Crashes", "## 7. Against exact")]
    assert heads == sorted(heads)


def test_recommendation_skips_flagged_and_crashes_have_their_cause(report):
    run, _ = report
    summary = _strict_json(run / "report.json")
    rec = {(r["family"], r["norm"]): r for r in summary["recommendation"]}
    assert rec[("apgd", "l2")]["implementation"] == "adv_lib/apgd" and rec[("apgd", "l2")]["trusted"]
    assert rec[("fmn", "l2")]["implementation"] == "art/fmn" and rec[("fmn", "l2")]["trusted"]
    # a flagged implementation is never trusted: no member of any trust set carries a defect flag
    # (optimality_gap, a weakness, is the one flag the trust set's own tests decide on)
    defects = {(f["implementation"], f["norm"]) for f in _strict_json(run / "flags.json") if f["flag"] != "optimality_gap"}
    assert ("adv_lib/apgd", "linf") in defects and (EVIL_IMPL, "l2") in defects
    for (family, norm), r in rec.items():
        assert not {(m["implementation"], norm) for m in r["trust_set"]} & defects, (family, norm)
    # under linf adv_lib is below_exact on m-mlp and the hostile one crashed: foolbox is the only
    # unflagged implementation, and the trust cell says how it stands against the best of linf
    linf = rec[("apgd", "linf")]
    assert linf["verdict"] == "only implementation" and linf["trusted"]
    assert [m["implementation"] for m in linf["trust_set"]] == ["foolbox/LinfPGD"]
    md = (run / "report.md").read_text()
    assert (f"| only implementation: foolbox/LinfPGD (ξ {linf['optimality']:.3f}; the best attack of linf here: "
            "adv_lib/apgd (flagged), ξ 1.000) |") in md
    page = (run / "report.html").read_text()
    assert "<strong>below_exact</strong> (m-mlp)" in page
    # each recommendation carries its trust set, with a bootstrap interval of each member's ξ
    apgd = rec[("apgd", "l2")]
    assert apgd["verdict"] == "clear" and apgd["trust_set"][0]["implementation"] == "adv_lib/apgd"
    for member in apgd["trust_set"]:
        lo, hi = member["optimality_ci"]
        assert 0 <= lo <= hi <= 1
    assert "| clear: adv_lib/apgd |" in md
    crashes = summary["crashes"]
    assert len(crashes) == 4 and all(c["cause"] == EVIL_ERROR for c in crashes)
    assert summary["summary"]["largest_gap"]["worse"] == EVIL_IMPL


def test_markdown_escapes_and_links_its_plots(report):
    run, _ = report
    md = (run / "report.md").read_text()
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    links = re.findall(r"!\[[^\]]*\]\((plots/[^)]+\.svg)\)", md)
    assert len(links) == 6 and all((run / link).stat().st_size > 1000 for link in links)
    # a "|" inside a cell (the hostile version) is escaped: every row has its header's cell count
    tables = re.findall(r"((?:^\|.*\|\n)+)", md, re.M)
    assert tables and any("1.0&quot;" in t or '1.0"' in t for t in tables)
    for block in tables:
        counts = {len(re.findall(r"(?<!\\)\|", line)) for line in block.splitlines()}
        assert len(counts) == 1, block[:300]


def test_exact_curve_and_true_optimality(report):
    run, _ = report
    exact = pd.read_csv(run / "exact_optimality.csv")
    adv = exact[exact["implementation"] == "adv_lib/apgd"]
    assert len(adv) == 1 and 0 < adv["true_optimality"].iloc[0] < 1
    assert "dashed red line is the exact curve" in (run / "report.html").read_text()


def test_several_runs_merge_into_out(tmp_path):
    a = store_run(tmp_path / "a", make_table(models=("m-cnn",), norms=("linf",), n=6), name="a")
    b = store_run(tmp_path / "b", make_table(models=("m-cnn",), norms=("linf",), n=6, fool_version="3.4.0",
                                             fool_scale=1.3), name="b")
    with pytest.raises(ValueError, match="--out"):
        write_report([a, b])
    written = write_report([a, b], tmp_path / "merged", formats=("json",))
    assert "report.html" not in written and "report.md" not in written
    board = pd.read_csv(written["leaderboard.csv"])
    fool = board[board["implementation"] == "foolbox/LinfPGD"]
    assert sorted(fool["library_version"]) == ["3.3.4", "3.4.0"]
    assert fool.sort_values("library_version")["optimality"].is_monotonic_decreasing
    assert _strict_json(written["report.json"])["summary"]["run_names"] == ["a", "b"]


def test_one_line_errors(tmp_path):
    ns = argparse.Namespace
    with pytest.raises(ValueError, match=r"does not exist") as missing:
        command.main(ns(dirs=[str(tmp_path / "nope")], out=None, format=None))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"holds no results") as empty:
        command.main(ns(dirs=[str(tmp_path / "empty")], out=None, format=None))
    with pytest.raises(ValueError, match=r"--format 'pdf'"):
        command.main(ns(dirs=[str(tmp_path / "empty")], out=None, format=["pdf"]))
    for exc in (missing.value, empty.value):
        assert "\n" not in str(exc)
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["A", "B", "--out", "O", "--format", "md,html", "--format", "json"])
    assert args.dirs == ["A", "B"] and command.report_formats(args.format) == ("md", "html", "json")


def test_compare_writes_audit_with_one_verdict_line_each(tmp_path, capsys):
    rows_a = make_table(models=("m-cnn",), norms=("linf",), n=12)
    rows_b = make_table(models=("m-cnn",), norms=("linf",), n=12, fool_version="3.4.0", fool_scale=1.5)
    a, b = store_run(tmp_path / "a", rows_a, name="a"), store_run(tmp_path / "b", rows_b, name="b")
    parser = argparse.ArgumentParser()
    command.add_compare_arguments(parser)
    code = command.compare_main(parser.parse_args([str(a), str(b), "--strict"]))
    out = capsys.readouterr().out.splitlines()
    audit = _strict_json(b / "audit.json")
    verdicts = {v["implementation"]: v for v in audit["verdicts"]}
    assert verdicts["foolbox/LinfPGD"]["verdict"] == "regressed" and code == 1
    assert verdicts["adv_lib/apgd"]["verdict"] == "unchanged"
    assert len(out) == len(verdicts) + 1 and all("\n" not in v["line"] for v in verdicts.values())
    assert "foolbox/LinfPGD [linf] 3.3.4 -> 3.4.0: regressed" in "\n".join(out)
    assert _strict_json(b / "diff.json") and (b / "diff.csv").exists() and (b / "compare.md").exists()
    page = (b / "compare.html").read_text()
    assert "<script>alert" not in page and ESCAPED in page and page.count("<script") == 1


def test_svg_shared_definitions_and_labels():
    from attackaudit.reports.plots import robustness_svg
    from attackaudit.reports.tables import Curve

    d = np.array([0.0, 0.1, 0.2, np.inf])
    curve = Curve("m", "linf", np.arange(4), d, {("a/pgd", "1"): d * 1.1}, {("a/pgd", "1"): 0.9})
    plot = robustness_svg(curve, "c0")
    svg = plot.standalone()
    assert svg.startswith("<svg") and "<!--" not in svg and "<text" not in svg and "style=" not in svg
    # every id it refers to is defined in it, once
    ids = re.findall(r'\bid="([^"]+)"', svg)
    assert len(ids) == len(set(ids)) and set(re.findall(r'href="#([^"]+)"', svg)) <= set(ids)
    # inline, without the shared definitions (the page carries them once)
    assert "<defs>" not in plot.element() and "<style>" not in plot.element()
    assert shorten("a  b\nc") == "a b c" and len(shorten("x" * 200)) == 48


def test_plots_never_carry_names_as_markup():
    from attackaudit.reports.plots import scatter_svg
    from attackaudit.reports.tables import Pair

    evil = f"x-->{HOSTILE}<!--$a$"
    pair = Pair("apgd", "linf", (evil, '1"&'), ("b", "2"), "lib", "other", 0.5, 0.6, 0.01, 0.5, 2, 1,
                np.array([0.1, 0.2, np.inf]), np.array([0.2, 0.1, 0.3]), np.array([evil] * 3, dtype=object))
    svg = scatter_svg(pair, "t").standalone()
    assert svg.startswith("<svg") and "script" not in svg and "<!--" not in svg and "-->" not in svg


def test_runs_on_different_subsets_or_budgets_are_refused(tmp_path):
    base = job_rows("m", "lib/pgd", "linf", [0.1, 0.2, float("inf")])
    a, b = tmp_path / "a", tmp_path / "b"
    for d, frame in ((a, base), (b, base.assign(budget=base["budget"] * 2))):
        (d / "jobs").mkdir(parents=True)
        frame.to_parquet(d / "jobs" / "x.parquet", index=False)
    with pytest.raises(ValueError, match="query budget"):
        write_report([a, b], out=tmp_path / "merged")


def test_verdict_words_from_old_and_new_recommendation_fields():
    from attackaudit.reports.answer import VERDICTS, verdict_word

    assert verdict_word({"verdict": "untrusted", "trusted": False}) == "none"
    assert verdict_word({"verdict": "clear", "trust_set": [{}], "candidates": 3}) == "clear"
    assert verdict_word({"verdict": "", "trusted": True, "trust_set": [{}], "candidates": 1}) == "only implementation"
    assert verdict_word({"trusted": True, "trust_set": [{}, {}], "candidates": 3}) == "tied"
    for word in VERDICTS:
        assert verdict_word({"verdict": word}) == word


def test_flag_evidence_rows_stand_out_and_links_resolve(report):
    from attackaudit.reports import build, load_runs
    from attackaudit.reports.answer import MAX_FLAG_ROWS, answers, flag_anchor, flag_evidence_rows

    run, _ = report
    table_, manifests, exact = load_runs([run])
    data = build(table_, manifests, [run], exact)
    rows = flag_evidence_rows(data)
    crash, n = rows[(EVIL_IMPL, EVIL_VERSION, "l2")]
    # the crashed image of each model comes first: it is what the crash flag rests on
    assert n >= 2 and 0 < len(crash) <= MAX_FLAG_ROWS
    assert set(crash.loc[crash["status"] == "crash", "model"]) == {"m-cnn", "m-mlp"}
    assert all("crash" in w for w in crash.loc[crash["status"] == "crash", "why"])
    assert (crash["d_star"] <= crash["best_distance"]).all()
    page = (run / "report.html").read_text()
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    assert flag_anchor(EVIL_IMPL, EVIL_VERSION, "l2") in ids
    assert set(re.findall(r'href="#([^"]+)"', page)) <= ids
    found = {(a.family, a.norm): a for a in answers(data)}
    apgd = found[("apgd", "l2")]
    assert apgd.members and apgd.members[0].implementation == "adv_lib/apgd" and apgd.pair is not None
    assert apgd.pair.a[0] == "adv_lib/apgd" and (EVIL_IMPL, EVIL_VERSION) in apgd.flagged


def test_explain_prints_one_implementations_story(report, capsys):
    from attackaudit.cli import main

    run, _ = report
    assert main(["explain", str(run), "foolbox/LinfPGD", "--norm", "l2", "--images", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("foolbox/LinfPGD 3.3.4 · apgd · l2: global ξ ")
    assert "flags: " in out and ("trusted:" in out or "not trusted:" in out)
    assert re.search(r"ξ per model: m-cnn \d\.\d{3} \(\d+ of \d+ broken\); m-mlp", out)
    # foolbox is 1.06 × adv_lib everywhere: its worst images are 1.06× d*, two per model
    behind = re.findall(r"  (m-cnn|m-mlp) image \d+: .* \((1\.06)× d\*; d\* by adv_lib/apgd\)", out)
    assert len(behind) == 4
    evil = main(["explain", str(run), "evil", "--norm", "l2"])
    story = capsys.readouterr().out
    assert evil == 0 and "crash (defect; m-cnn)" in story and "not trusted" in story and "it is flagged (crash" in story
    for args, message in ((["pgd"], "ambiguous"), (["nope/none"], "not in this run"),
                          (["art/fmn", "--norm", "l0"], "did not run under --norm l0")):
        assert main(["explain", str(run), *args]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1


def _two_impls(ratios: np.ndarray, model: str = "m", seed_ratios: np.ndarray | None = None) -> pd.DataFrame:
    """adv_lib/apgd and foolbox/LinfPGD (foolbox ``ratios`` × adv_lib per image) on ``model``;
    with ``seed_ratios`` also both on the seed twin ``model~seed`` (adv_lib × ``seed_ratios``)."""
    base = np.linspace(0.05, 0.3, ratios.size)
    jobs = [job_rows(model, "adv_lib/apgd", "linf", base, family="apgd"),
            job_rows(model, "foolbox/LinfPGD", "linf", base * ratios, family="apgd")]
    if seed_ratios is not None:
        jobs += [job_rows(f"{model}~seed", "adv_lib/apgd", "linf", base * seed_ratios, family="apgd"),
                 job_rows(f"{model}~seed", "foolbox/LinfPGD", "linf", base * ratios, family="apgd")]
    return table(*jobs)


def test_inconclusive_trust_cell_names_the_images_that_would_decide():
    from attackaudit.reports import build
    from attackaudit.reports.answer import answers
    from attackaudit.reports.answer_html import answer_section
    from attackaudit.reports.text import recommendation_rows

    # 12 images: foolbox 7% farther on half of them, 1% closer on the others: neither shown
    # different (beyond ±5%) nor equivalent (inside it) on so few images
    ratios = np.where(np.arange(12) % 2 == 0, 1.07, 0.99)
    data = build(_two_impls(ratios))
    r = data.recommend.iloc[0]
    assert r["verdict"] == "inconclusive" and np.isfinite(r["images_to_decide"]) and r["images_to_decide"] > 12
    cell = recommendation_rows(data)["trust"].iloc[0]
    assert cell == f"inconclusive: adv_lib/apgd, foolbox/LinfPGD; rerun with --samples {r['images_to_decide']:.0f} (planned for 80% power)"
    found = answers(data)[0]
    assert found.verdict == "inconclusive" and found.members[1].answer == "inconclusive"
    # as the reader sees it: in a few words on the first screen, the whole sentence in its title
    page = answer_section(data, [found])
    shown = re.sub(r"<[^>]+>", "", page)
    assert f"rerun: --samples {r['images_to_decide']:.0f}" in shown
    assert f'title="rerun with --samples {r["images_to_decide"]:.0f} (planned for 80% power)"' in page
    # the pair row says the same in its own words
    pooled = data.pairs.iloc[0]
    assert pooled["answer"] == "inconclusive" and "statistic" not in data.pairs.columns


def test_seed_twins_are_the_noise_floor_and_absent_without_them():
    from attackaudit.reports import build
    from attackaudit.reports.seed_twins import seed_twin_sentence

    n = 16
    assert build(_two_impls(np.ones(n))).seed_twins is None
    # another seed moves adv_lib by ±1–2% per image: noise, never separated from itself
    noise = 1 + 0.02 * np.sin(np.arange(n))
    quiet = build(_two_impls(np.ones(n), seed_ratios=noise)).seed_twins
    assert len(quiet) == 2 and set(quiet["answer"]) <= {"equivalent", "inconclusive"} and not quiet["flags"].any()
    assert quiet.set_index("implementation").loc["adv_lib/apgd", "n_differ"] == int((abs(noise - 1) > 0.01).sum())
    assert "No seed twin was flagged or separated from itself" in seed_twin_sentence(quiet)
    # a "seed" that doubles every distance is not noise: that seed twin is named
    loud = build(_two_impls(np.ones(n), seed_ratios=np.full(n, 2.0))).seed_twins
    assert loud.set_index("implementation").loc["adv_lib/apgd", "answer"] == "different"
    assert "adv_lib/apgd linf different from itself" in seed_twin_sentence(loud)


def test_a_flag_the_seed_twin_shares_with_its_model_is_not_a_separation():
    """adv_lib/apgd gets last_not_best on its model and on its seed twin (the demo's case): the
    attack's own behaviour on both seeds, not a seed twin flagged apart from its model; a flag only
    the seed twin has is named."""
    from attackaudit.reports.seed_twins import seed_twin_sentence, seed_twin_table

    n = 16
    t = _two_impls(np.ones(n), seed_ratios=1 + 0.02 * np.sin(np.arange(n)))
    t = t.assign(implementation=t["library"].astype(str) + "/" + t["attack"].astype(str))
    version = str(t["library_version"].iloc[0])

    def flag(model, impl, name):
        return {"model": model, "implementation": impl, "norm": "linf", "library_version": version, "flag": name}

    shared = pd.DataFrame([flag("m", "adv_lib/apgd", "last_not_best"), flag("m~seed", "adv_lib/apgd", "last_not_best")])
    frame = seed_twin_table(t, shared)
    assert not frame["flags"].astype(bool).any()
    assert "No seed twin was flagged or separated from itself" in seed_twin_sentence(frame)
    apart = pd.DataFrame([flag("m~seed", "adv_lib/apgd", "last_not_best")])
    frame = seed_twin_table(t, apart)
    assert frame.set_index("implementation").loc["adv_lib/apgd", "flags"] == "last_not_best"
    assert "adv_lib/apgd linf flagged last_not_best" in seed_twin_sentence(frame)


def test_every_flag_and_column_the_fidelity_tables_hold_is_explained():
    from attackaudit import fidelity
    from attackaudit.fidelity.alignment import PAIR_COLUMNS
    from attackaudit.fidelity.diff import DIFF_COLUMNS
    from attackaudit.reports import text as T
    from attackaudit.fidelity.flag_kinds import evidence_twins
    from attackaudit.reports.tables import FLAG_MEANINGS

    assert set(fidelity.FLAGS) <= set(FLAG_MEANINGS)
    assert {c.key for c in T.PAIR_COLS} - {"verdict"} <= set(PAIR_COLUMNS)
    assert {"answer", "estimate", "images_to_decide"} <= {c.key for c in T.PAIR_COLS}
    assert {c.key for c in T.DIFF_COLS} <= set(DIFF_COLUMNS) and {"answer", "identical"} <= {c.key for c in T.DIFF_COLS}
    twin_flags = {f: evidence_twins(f) for f in fidelity.FLAGS if evidence_twins(f)}
    assert {"perm", "shift", "split", "batch"} <= {s for kinds in twin_flags.values() for s in kinds}
    assert all("seed" in kinds for kinds in twin_flags.values())
    # silent_failure also covers an attack that ran but broke none of what the others broke
    assert "broke none of the images" in FLAG_MEANINGS["silent_failure"]


def test_a_split_twin_on_the_first_images_merges_and_one_outside_does_not():
    """The demo runs its batch-split twin on the first 4 of 16 images (split_samples): the report
    must accept that nested subset, and refuse a twin whose images are not the run's."""
    import pandas as pd

    from attackaudit.reports.run_files import _check_mergeable

    def rows(model, samples, subset, twin=""):  # load_run's rows: the twin column beside the name
        return pd.DataFrame({"model": model, "sample": samples, "subset_hash": subset, "budget": 2000,
                             "targeted": False, "twin": twin})

    run = pd.concat([rows("m", range(16), "h16"), rows("m~split", range(4), "h4", "split")])
    _check_mergeable([Path("r")], [run])
    outside = pd.concat([rows("m", range(16), "h16"), rows("m~split", [3, 99], "hx", "split")])
    with pytest.raises(ValueError, match="outside the run's subset"):
        _check_mergeable([Path("r")], [outside])
    other = pd.concat([rows("m", range(16), "h16"), rows("n", range(16), "other")])
    with pytest.raises(ValueError, match="differ in subset"):
        _check_mergeable([Path("r")], [other])


def test_a_normal_report_prints_no_warning(tmp_path):
    """Issue 39: a report of an ordinary run (with the metamorphic twins, failures on both seeds
    and on the twins) writes no Python warning: the demo's printed NumPy's "invalid value in
    subtract" (inf − inf between seeds) until the seed-twin table masked before subtracting."""
    import warnings

    n = 10
    base = _base(n, 0)
    failing = np.where(np.arange(n) >= 7, np.inf, base)  # the last 3 images broken by no seed
    jobs = []
    for model in ("m-mlp", "m-mlp~seed", "m-mlp~shift", "m-mlp~perm", "m-mlp~batch"):
        jobs.append(job_rows(model, "adv_lib/apgd", "linf", failing, family="apgd", library_version="0.2.8",
                             kind="fixed"))
        jobs.append(job_rows(model, "torchattacks/PGD", "linf", failing * 1.02, family="pgd", library_version="3.5.1",
                             kind="fixed"))
    run = store_run(tmp_path / "run", table(*jobs))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written = write_report([run])
    assert written
