"""Runs that extend until decided (``--until-decided``, ``pair_test(until_decided=...)``): the α
spending against a simple reference, which rows a look leaves open, the per-look α reaching the
verdicts, a real small run whose second look extends only its undecided row (killed mid-look and
resumed, its looks in the manifest, its report answering each row from its last look), and the
stored A/A false-positive rate across looks on real seed noise (benchmarks/sequential.py)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats as sps

import attackaudit
from attackaudit.cli import main as cli_main
from attackaudit.fidelity import recommend, synthetic
from attackaudit.fidelity.equivalence import pair_test, pair_values
from attackaudit.fidelity.sequential import SPENDING_POWER, is_open, look_alphas, look_sizes, verdicts
from attackaudit.results.store import load_run

ALPHA = 0.05
STORED = Path(__file__).resolve().parents[1] / "benchmarks" / "noise" / "sequential.csv"
NO_FLAGS = pd.DataFrame(columns=["model", "norm", "implementation", "library_version", "flag"])


@settings(max_examples=200, deadline=None)
@given(first=st.integers(1, 300), cap=st.integers(1, 5000))
def test_the_looks_double_and_spend_alpha_in_proportion_to_their_images(first, cap):
    """Reference: the sizes by repeated doubling, capped; look k spends α·((n_k/n_K)³ − (n_{k−1}/n_K)³),
    or α·(n_k − n_{k−1})/n_K with ρ = 1."""
    sizes = [first]
    while sizes[-1] < cap:
        sizes.append(min(sizes[-1] * 2, cap))
    assert look_sizes(first, cap) == sizes
    assert SPENDING_POWER == 3
    for power, alphas in ((3, look_alphas(sizes, ALPHA)), (1, look_alphas(sizes, ALPHA, power=1.0))):
        reference = [ALPHA * ((n / sizes[-1]) ** power - (prev / sizes[-1]) ** power)
                     for prev, n in zip([0] + sizes[:-1], sizes)]
        assert alphas == pytest.approx(reference, rel=1e-9, abs=1e-15)
        assert sum(alphas) == pytest.approx(ALPHA) and all(a > 0 for a in alphas)
    assert look_alphas([16, 32, 64], ALPHA, power=1.0) == pytest.approx([0.0125, 0.0125, 0.025])


def _row(verdict: str, *answers: str) -> dict:
    return {"family": "f", "norm": "l2", "verdict": verdict,
            "trust_set": [{"answer": ""}] + [{"answer": a} for a in answers]}


def test_a_row_stays_open_only_while_a_member_is_neither_equivalent_nor_different():
    for verdict in ("clear", "tied", "only implementation", "none"):
        assert not is_open(_row(verdict))
    assert is_open(_row("inconclusive", "inconclusive"))
    assert is_open(_row("inconclusive", "equivalent", "inconclusive"))
    assert is_open(_row("inconclusive", "mixed", "inconclusive"))
    # the endpoints disagree: more images will not order the pair, the row is decided
    assert not is_open(_row("inconclusive", "mixed"))
    assert not is_open(_row("inconclusive", "equivalent", "mixed"))
    rec = pd.DataFrame([_row("inconclusive", "mixed") | {"family": "a"}, _row("inconclusive", "inconclusive")])
    assert verdicts(rec) == {"a/l2": "mixed", "f/l2": "inconclusive"}


def test_a_look_s_alpha_reaches_the_headline_and_the_verdict():
    """A copy 1.5× farther on 8 of 24 images: p 0.016, shown at α 0.05, not at the 0.0125 a first
    look of four spends; the same row through ``recommend``."""
    base = np.random.default_rng(0).uniform(0.5, 2.0, 24)
    farther = base.copy()
    farther[:8] *= 1.5
    values = pair_values(base, farther)
    assert pair_test(values)["headline"] == pair_test(values, alpha=ALPHA)["headline"] == "better"
    assert pair_test(values, alpha=0.0125)["headline"] == "inconclusive"
    table = synthetic.table(synthetic.job_rows("m", "lib/a", "l2", base, family="f"),
                            synthetic.job_rows("m", "lib/b", "l2", farther, family="f"))
    assert recommend(table, NO_FLAGS, n_boot=2, alpha=ALPHA).iloc[0]["verdict"] == "clear"
    assert recommend(table, NO_FLAGS, n_boot=2, alpha=0.0125).iloc[0]["verdict"] == "inconclusive"


RUN = ["run", "--models", "digits-mlp-tiny", "--libraries", "adv_lib", "--attacks", "adv_lib/apgd/linf",
       "adv_lib/apgd:ce/linf", "adv_lib/ddn/l2", "--samples", "8", "--until-decided", "16", "--steps-scale", "0.1",
       "--workers", "1", "--quiet"]


def _mtimes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.parquet")}


def test_a_real_run_extends_only_its_undecided_row_and_resumes_after_a_kill(tmp_path, capsys):
    """Two APGDs in L∞ (inconclusive on 8 images) and DDN in L2 (the only implementation) on the
    tiny MLP: the second look runs the two APGDs on 16 images, not DDN. The run is killed once the
    second look's first job is written; the same command again keeps every finished job and runs
    the one left. The report answers APGD from its second look and DDN from its first."""
    out = tmp_path / "run"
    second = out / "looks" / "n16" / "jobs"
    proc = subprocess.Popen([sys.executable, "-m", "attackaudit", *RUN, "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 400
    while not _mtimes(second):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the second look never wrote a job"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    first_jobs, kept = _mtimes(out / "jobs"), _mtimes(second)
    assert len(first_jobs) == 3 and len(kept) == 1  # killed mid-look: one of the look's two jobs done
    capsys.readouterr()
    assert cli_main([*RUN, "--out", str(out)]) == 0
    assert "(1 run now, 4 already done)" in capsys.readouterr().err
    assert _mtimes(out / "jobs") == first_jobs and {k: v for k, v in _mtimes(second).items() if k in kept} == kept
    manifest = json.loads((out / "manifest.json").read_text())
    one, two = manifest["looks"]
    assert (one["images"], one["directory"], two["images"], two["directory"]) == (8, ".", 16, "looks/n16")
    assert one["rows"] == {"apgd/linf": "inconclusive", "ddn/l2": "only implementation"}
    assert one["extended"] == ["apgd/linf"] and set(two["rows"]) == {"apgd/linf"} and two["extended"] == []
    # α·t³: 8 of 16 images spend 0.05 / 8 at the first look, the rest at the cap
    assert (one["alpha"], two["alpha"]) == pytest.approx((0.00625, 0.04375))
    assert two["alpha_cumulative"] == pytest.approx(ALPHA)
    assert manifest["alpha"] == pytest.approx(0.00625) and manifest["until_decided"]["sizes"] == [8, 16]
    rows = load_run(out / "looks" / "n16")
    assert set(rows["implementation"]) == {"adv_lib/apgd", "adv_lib/apgd:ce"}
    assert rows.groupby("implementation")["sample"].nunique().tolist() == [16, 16]
    assert json.loads((out / "looks" / "n16" / "manifest.json").read_text())["alpha"] == pytest.approx(0.04375)
    rec = attackaudit.open(out).recommendation.set_index("family")
    assert rec.loc["apgd", "samples_per_model"] == 16 and "look 2" in rec.loc["apgd", "note"]
    assert rec.loc["apgd", "verdict"] == two["rows"]["apgd/linf"]
    assert rec.loc["ddn", "samples_per_model"] == 8 and rec.loc["ddn", "verdict"] == "only implementation"


def test_the_cap_must_lie_above_the_first_look(tmp_path, capsys):
    assert cli_main(["run", "--models", "digits-mlp-tiny", "--samples", "8", "--until-decided", "8",
                     "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--until-decided 8 must be larger than --samples 8" in err[0]
    from attackaudit.sources.subset import digits
    from attackaudit.sources.zoo import load_model

    x, y = digits("test")
    for bad, why in ((8, "until_decided must be larger than samples (8"), (True, "until_decided must be an integer")):
        with pytest.raises(ValueError) as exc:
            attackaudit.compare(load_model("digits-mlp-tiny"), x[:20], y[:20], samples=8, until_decided=bad,
                                out=tmp_path / "c")
        assert why in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "c").exists()


def above_alpha(fired: int, reps: int, level: float = 0.05) -> bool:
    """One-sided exact binomial test of "false-positive rate ≤ α" (as tests/test_calibration.py)."""
    return fired > 0 and sps.binom.sf(fired - 1, reps, ALPHA) < level


def test_the_stored_a_a_rate_across_looks_on_real_seed_noise():
    """benchmarks/noise/sequential.csv (``benchmarks/sequential.py --save``): the spending
    procedure's false claims (a direction, or a crossing, at any look of a seed twin against its
    original) pass the exact test against α; it finds the twin 20% farther as often as one look at
    the cap does, on fewer images."""
    t = pd.read_csv(STORED)
    assert {"spending", "linear spending", "every look at alpha", "one look at cap"} <= set(t["procedure"])
    spending = t[t["procedure"] == "spending"]
    assert {(16, 64), (16, 128)} <= set(zip(spending["first"], spending["cap"]))
    for r in t[t["procedure"].str.contains("spending") & (t["scenario"] == "A/A real seeds")].itertuples(index=False):
        assert r.evaluated >= 100 and not above_alpha(int(r.fired), int(r.evaluated)), r
    key = ["first", "cap", "models"]
    power = t[t["scenario"] == "far20"].set_index([*key, "procedure"])
    for first, cap, models in set(zip(spending["first"], spending["cap"], spending["models"])):
        seq, one = power.loc[(first, cap, models, "spending")], power.loc[(first, cap, models, "one look at cap")]
        assert seq["rate"] >= one["rate"] - 0.05 and seq["mean_images"] < one["mean_images"]


def test_a_later_look_runs_no_twin_and_carries_the_first_look_s_twin_findings(tmp_path):
    """torchattacks' C&W L2 reads masked-out logits as 0 (defect corpus torchattacks-cw-onehot-max):
    its shift twin names it on the first look's 8 images. A later look runs the base model only
    (``base_models_only``), so its own rows hold no twin and cannot name it: judged with the first
    look's ``twins_findings`` it still carries the finding, which judged alone it loses."""
    from attackaudit.fidelity.findings import findings
    from attackaudit.fidelity.sequential import judge_look, twins_findings, with_carried
    from attackaudit.results.looks import read_look
    from attackaudit.run.config import RunConfig
    from attackaudit.run.sequential import base_models_only

    common = ["--attacks", "torchattacks/CW/l2", "adv_lib/ddn/l2", "--budget", "1000", "--steps-scale", "0.5",
              "--workers", "1", "--quiet"]
    first, later = tmp_path / "first", tmp_path / "later"
    assert cli_main(["run", "--models", "digits-mlp-tiny", "digits-mlp-tiny~shift", "--samples", "8", *common,
                     "--out", str(first)]) == 0
    config = RunConfig(models=["digits-mlp-tiny", "digits-mlp-tiny~shift"], metamorphic=True, repeat=2)
    assert base_models_only(config) == {"models": ["digits-mlp-tiny"], "metamorphic": False, "repeat": 1}
    assert cli_main(["run", "--models", *base_models_only(config)["models"], "--samples", "16", *common,
                     "--out", str(later)]) == 0
    assert set(load_run(later)["twin"]) == {""}

    def shift_flagged(found: pd.DataFrame) -> set:
        return set(found.loc[found["flag"] == "shift_sensitivity", "implementation"])

    assert shift_flagged(findings(load_run(first)).flags) == {"torchattacks/CW"}
    alone = findings(load_run(later)).flags
    assert shift_flagged(alone) == set()
    assert shift_flagged(with_carried(alone, findings(load_run(first)).flags)) == {"torchattacks/CW"}

    alone_row = judge_look(read_look(later), ALPHA).set_index("family").loc["cw"]
    carried_row = judge_look(read_look(later), ALPHA, twins_findings(read_look(first))).set_index("family").loc["cw"]
    assert alone_row["flagged"] == 0 and "shift_sensitivity" not in alone_row["note"]
    assert carried_row["flagged"] == 1 and "torchattacks/CW (shift_sensitivity)" in carried_row["note"]
