"""Leaderboard and recommendation."""
import numpy as np

from attackaudit.fidelity import flags, leaderboard, recommend
from attackaudit.fidelity.synthetic import job_rows, table

INF = np.inf
D = np.random.default_rng(5).uniform(0.1, 0.6, 30)
D[:3] = 0.0


def grid(*extra):
    jobs = []
    for m in ("m1", "m2"):
        jobs += [job_rows(m, "adv_lib/apgd", "l2", D, family="apgd", forwards=200, backwards=200),
                 job_rows(m, "foolbox/APGD", "l2", D, family="apgd", forwards=600, backwards=300),
                 job_rows(m, "art/APGD", "l2", D * 1.5, family="apgd"),
                 job_rows(m, "adv_lib/fmn", "linf", D, family="fmn"),
                 job_rows(m + "~shift", "adv_lib/apgd", "l2", D * 1.01, family="apgd")]
    return table(*jobs, *extra)


def test_leaderboard_rows_and_columns():
    board = leaderboard(grid())
    assert len(board) == 4  # 3 l2 implementations + 1 linf; twins are no rows or columns
    assert {"opt_m1", "opt_m2"} <= set(board.columns) and not any("~" in c for c in board.columns)
    l2 = board[board.norm == "l2"]
    assert l2["rank"].tolist() == [1, 2, 3]
    # equal optimality: fewer forwards first
    assert l2.implementation.tolist() == ["adv_lib/apgd", "foolbox/APGD", "art/APGD"]
    top = l2.iloc[0]
    assert top.optimality == 1.0 and top.opt_m1 == 1.0 and top.n_models == 2
    assert top.forwards == 200 and top.backwards == 200
    for col in ("optimality_attackbench", "asr_at_ref", "median_distance", "wall_s", "library_version"):
        assert col in board.columns
    assert not board[["optimality", "optimality_attackbench", "asr_at_ref"]].isna().any().any()


def test_recommend_prefers_unflagged_then_cheaper():
    t = grid()
    rec = recommend(t, flags(t)).set_index(["family", "norm"])
    row = rec.loc[("apgd", "l2")]
    assert row.implementation == "adv_lib/apgd" and row.trusted and row.runner_up == "foolbox/APGD"
    assert row.queries == 400 and row.candidates == 3
    # art/APGD is 1.5× as far on every image: optimality_gap, a weakness (tested out of the set, not flagged out)
    assert row.flagged == 0 and [m["implementation"] for m in row.trust_set] == ["adv_lib/apgd", "foolbox/APGD"]
    assert any(w.startswith("art/APGD: different from and worse") for w in row.weak)


def test_recommend_skips_flagged_best():
    t = grid()
    t.loc[t.implementation == "adv_lib/apgd", "refused"] = 3
    rec = recommend(t, flags(t)).set_index(["family", "norm"])
    assert rec.loc[("apgd", "l2"), "implementation"] == "foolbox/APGD"
    assert rec.loc[("apgd", "l2"), "trusted"]


def test_recommend_when_everything_is_flagged():
    t = table(job_rows("m", "a/x", "l2", D, family="f", refused=1))
    rec = recommend(t, flags(t))
    assert rec.iloc[0].implementation == "a/x" and not rec.iloc[0].trusted
    assert "budget_overrun" in rec.iloc[0].note


def test_recommend_without_flags_and_empty():
    t = grid()
    assert recommend(t, None).set_index(["family", "norm"]).loc[("apgd", "l2"), "implementation"] == "adv_lib/apgd"
    assert recommend(table(job_rows("m~shift", "a/x", "l2", D)), None).empty
    assert leaderboard(table(job_rows("m~shift", "a/x", "l2", D))).empty
