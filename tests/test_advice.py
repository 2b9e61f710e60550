"""Advice as a value (fidelity/advice.py, issue 52 item 3): fidelity says what a rerun should change,
each view words it. The command line's words are today's ("rerun with --samples 52"), the API's are
what the flag pattern of reports/wording.py made of them ("samples=52"), so the two paths agree."""
from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings, strategies as st

from attackaudit.fidelity.advice import ADVISED, SAMPLES_N, Advice, advice_of, advice_sentence, in_view
from attackaudit.fidelity.sample_size import decision_text
from attackaudit.reports.wording import CLI_TO_API, _FLAG, _api, report_advice, speak, speak_document

PROFILE = os.environ.get("ATTACKAUDIT_HYPOTHESIS", "dev")
EXAMPLES = 30 if PROFILE == "ci" else 200


def test_each_view_words_the_advice():
    a = Advice("samples", 52, "planned for 80% power")
    assert a.phrase("cli") == "--samples 52" and a.phrase("api") == "samples=52"
    assert str(a) == a.sentence() == "rerun with --samples 52 (planned for 80% power)"
    assert a.sentence("api") == "rerun with samples=52 (planned for 80% power)"
    assert SAMPLES_N.phrase() == "--samples N" and SAMPLES_N.phrase("api") == "samples=N"
    with pytest.raises(ValueError, match="view must be one of cli, api"):
        a.phrase("html")
    with pytest.raises(ValueError, match="no advice on 'budget'"):
        Advice("budget", 10)


def test_the_flag_is_the_parameter_tables():
    """An advised parameter's flag, made from its name, is the one the command line has."""
    for name in ADVISED:
        assert CLI_TO_API[Advice(name, 1).flag] == name


def test_advised_prose_is_todays_string_and_keeps_its_values():
    a, b = Advice("samples", 5), Advice("samples", 52, "planned for 80% power")
    d = advice_sentence(b)
    assert d == "rerun with --samples 52 (planned for 80% power)" and d.advice == (b,)
    assert advice_of([d, "plain", a, advice_sentence(a)]) == (b, a)
    assert json.dumps({"s": d}) == json.dumps({"s": str(d)})  # report.json: today's string
    text = f"inconclusive: x; {d}. y vs x: rerun with {a.phrase()}."
    # each phrase whole: "--samples 5" is not the start of "--samples 52"
    assert in_view(text, "api", [a, b]) == ("inconclusive: x; rerun with samples=52 (planned for 80% power). y vs x: "
                                            "rerun with samples=5.")
    assert in_view(d, "api") == "rerun with samples=52 (planned for 80% power)"  # its own value
    assert in_view(text, "cli", [a]) == text and in_view("--samples 52", "api") == "--samples 52"  # no value held


def test_the_decision_is_advice():
    d = decision_text(96.0, None)
    assert d == "rerun with --samples 96 (planned for 80% power)"
    assert d.advice == (Advice("samples", 96, "planned for 80% power"),)
    assert not advice_of([decision_text(96.0, 50), decision_text(float("inf"), None)])  # no rerun decides those


@settings(max_examples=EXAMPLES, deadline=None, derandomize=PROFILE == "ci")
@given(value=st.integers(1, 10 ** 6), other=st.integers(1, 10 ** 6),
       before=st.sampled_from(["", "inconclusive: a; ", "rerun: ", "x ("]),
       after=st.sampled_from(["", ".", ";", ")", " (planned for 80% power). b", "</td>", "\""]))
def test_values_and_the_flag_pattern_word_advice_alike(value, other, before, after):
    """The API's words for advice come from its values; they are what the flag pattern, which
    words free prose, made of the same text."""
    advice = (Advice("samples", value), Advice("samples", other))
    text = f"{before}rerun with {advice[0].phrase()}{after}; {advice[1].phrase()}{after}"
    assert in_view(text, "api", advice) == _FLAG.sub(_api, text)
    assert speak(text, "api", advice) == _FLAG.sub(_api, text)


def test_a_report_of_rows_words_its_advice():
    """report_advice gathers the advice of fidelity's rows (the members' decisions, the images a
    row needs), which speak_document words."""
    import pandas as pd

    rec = pd.DataFrame({"summary": ["inconclusive: a, b; rerun with --samples 73 (planned for 80% power)"],
                        "images_to_decide": [73.0],
                        "trust_set": [[{"decision": ""}, {"decision": decision_text(103.0, None)}]]})
    held = report_advice(rec)
    assert held == (SAMPLES_N, Advice("samples", 103, "planned for 80% power"), Advice("samples", 73))
    doc = "<p>rerun: --samples 103</p><style>:root{--samples 73}</style><p>--samples 73; (rerun with --samples N)</p>"
    assert speak_document(doc, "api", held) == ("<p>rerun: samples=103</p><style>:root{--samples 73}</style>"
                                                "<p>samples=73; (rerun with samples=N)</p>")
    assert in_view(doc, "api", held).count("--samples") == 0  # the values alone word it all


def test_a_yardstick_s_advice_is_kept_as_a_value_on_its_row():
    """An only implementation whose yardstick is undecided is advised to rerun with the images the
    yardstick needs: the row keeps that advice (``yardstick_verdicts.ADVICE``), so the API's words
    come from the value, not from the flag pattern, and report.json keeps its sentences only."""
    import pandas as pd

    from attackaudit.fidelity.yardstick_verdicts import ADVICE, annotate

    rec = pd.DataFrame({"family": ["pgd"], "norm": ["l2"], "implementation": ["lib/pgd"], "library_version": ["1"],
                        "verdict": ["only implementation"], "trusted": [True], "summary": ["only implementation: lib/pgd"],
                        "note": [""], "images_to_decide": [float("nan")], "samples_to_separate": [float("nan")],
                        "trust_set": [[{"implementation": "lib/pgd", "library_version": "1"}]]})
    stand = pd.DataFrame([{"implementation": "lib/pgd", "library_version": "1", "norm": "l2", "yardstick": "exact",
                           "status": "undecided", "samples_needed": 61.0, "ratio": 1.3, "expected_ratio": 1.1,
                           "bound_ratio": 1.25, "who": "sound pgd", "n": 16, "beyond": 9}])
    out = annotate(rec, stand)
    assert out.at[0, "verdict"] == "inconclusive" and "rerun with --samples 61" in out.at[0, "summary"]
    assert out.at[0, ADVICE] == (Advice("samples", 61),)
    held = report_advice(out)
    assert Advice("samples", 61) in held
    worded = in_view(out.at[0, "summary"], "api", held)
    assert "rerun with samples=61" in worded and "--samples" not in worded
