"""A failure on the decision boundary is explained where the reader meets it (issue 51, item 10).

The case from a real run: foolbox returned, for one image, a point that was adversarial in its batch
(``returned_adversarial`` True at foolbox's distance) but not on its own at the end-of-job re-check
(a tie at the boundary is never a success: harness/measure/success.py), which dropped that best
(``best_dropped`` 1): ``best_distance`` is inf. ``attackaudit explain`` printed "inf vs d* 0.6354
(failed)" without saying why. The rows are hand-built (fidelity.synthetic) and reported by the
real ``explain``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from attackaudit.fidelity.synthetic import job_rows, table
from attackaudit.reports.answer import boundary_text
from test_reports import store_run


def _run(tmp_path: Path) -> Path:
    n = 12
    base = np.random.default_rng(3).uniform(0.2, 0.8, n)
    fool = job_rows("m", "foolbox/L2DeepFoolAttack", "l2", base * 1.02, family="deepfool", library_version="3.3.4")
    fool.loc[4, ["best_distance", "best_dropped", "returned_distance", "returned_adversarial"]] = [
        np.inf, 1, base[4] * 1.02, True]
    art = job_rows("m", "art/DeepFool", "l2", base, family="deepfool", library_version="1.17")
    return store_run(tmp_path / "run", table(fool, art))


def test_explain_says_why_a_boundary_point_failed(tmp_path: Path):
    from attackaudit.reports.explain import explain

    run = _run(tmp_path)
    lines = explain(run, "foolbox/L2DeepFoolAttack", "l2")
    hit = [line for line in lines if "image 4:" in line]
    assert len(hit) == 1, lines
    returned = np.random.default_rng(3).uniform(0.2, 0.8, 12)[4] * 1.02
    assert "∞ vs d* " in hit[0] and (
        "(failed: the end-of-job re-check dropped its kept best (1 dropped), not adversarial on its own (a point on "
        "the decision boundary: a tie is never a success), and nothing else it found was; the library's returned "
        f"point, at {returned:.4g}, was judged adversarial in its batch; d* by art/DeepFool)") in hit[0], hit[0]
    # an ordinary failure (nothing dropped) keeps its short word
    assert boundary_text({"best_dropped": 0, "distance": np.inf}) == ""
    assert boundary_text({"best_dropped": 1, "distance": 0.5}) == ""            # a later best stood


def test_the_flag_rows_say_it_too(tmp_path: Path):
    """Where foolbox is flagged (a crash on another image), its rows in the report's evidence name
    the boundary point beside "failed, others broke it"."""
    from attackaudit.reports.answer import flag_evidence_rows
    from attackaudit.reports.run_files import load_runs
    from attackaudit.reports.tables import build

    run = _run(tmp_path)
    table, manifests, _ = load_runs([run])
    crashed = (table["implementation"] == "foolbox/L2DeepFoolAttack") & (table["sample"] == 0)
    table.loc[crashed, ["status", "error"]] = ["crash", "RuntimeError: x"]
    rows, _ = flag_evidence_rows(build(table, manifests, [run]), limit=12)[("foolbox/L2DeepFoolAttack", "3.3.4", "l2")]
    why = dict(zip(rows["sample"], rows["why"]))
    assert why[4] == "failed, others broke it (its kept best was a boundary point, dropped at the re-check)", why
    assert "boundary" not in why[0]


def test_a_dropped_best_without_a_returned_adversarial_says_so_too():
    text = boundary_text({"best_dropped": 2, "distance": np.inf, "returned_adversarial": False,
                          "returned_distance": np.inf})
    assert text.startswith(": the end-of-job re-check dropped its kept best (2 dropped), not adversarial on its own")
    assert text.endswith("nothing else it found was") and "returned point" not in text
