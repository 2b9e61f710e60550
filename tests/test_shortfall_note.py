"""The note on a strong family that falls short everywhere names a traced defect, not "settings",
when the defect corpus explains every implementation (issue 37 item 5)."""
import pandas as pd

from attackaudit.fidelity.strength import shortfall_note

BEST = pd.Series({"best_in_norm_impl": "adv_lib/ddn", "best_in_norm": 0.99})


def strength(rows: list[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame([{"family": "fmn", "norm": "l2", "implementation": i, "library_version": v,
                          "optimality": 0.1, "expected": 0.976, "family_shortfall": True} for i, v in rows])


def test_every_implementation_traced_names_the_defects():
    note = shortfall_note("fmn", "l2", strength([("adv_lib/fmn", "0.2.8"), ("foolbox/L2FMNAttack", "3.3.4")]), BEST)
    assert "not the run's settings" in note and "adv-lib-fmn-l2-blocked-gradient" in note
    assert "known_defects.json" in note and "use adv_lib/ddn" in note


def test_one_untraced_implementation_keeps_settings_open():
    # a foolbox release outside the traced range: its shortfall is not explained by the corpus
    note = shortfall_note("fmn", "l2", strength([("adv_lib/fmn", "0.2.8"), ("foolbox/L2FMNAttack", "9.9.9")]), BEST)
    assert "the run's settings (steps, budget) or a flaw they share" in note and "not the run's settings" not in note


def test_no_shortfall_no_note():
    s = strength([("adv_lib/fmn", "0.2.8")]).assign(family_shortfall=False)
    assert shortfall_note("fmn", "l2", s, BEST) == ""
