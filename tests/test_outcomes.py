"""Outcomes as values (issue 52): an attack call's status, detail and invalid reason travel as an
``Outcome``, rows carry ``invalid_reason``, and rows written before that column get it once, when
loaded, from their error's phrase."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from attackaudit.results.schema import INVALID_REASONS, OUT_OF_BOX, ROW_COLUMNS, with_invalid_reason
from attackaudit.run.outcome import OK, Outcome, output_check


@pytest.mark.parametrize("adv, reason", [
    ([1.0], "not_tensor"), (torch.zeros(2, 3), "shape"), (torch.zeros(2, 4, dtype=torch.int64), "dtype"),
    (torch.full((2, 4), float("nan")), "not_finite"), (torch.full((2, 4), 2.0), OUT_OF_BOX)])
def test_each_broken_output_has_its_reason_and_the_phrase_old_rows_are_read_by(adv, reason):
    outcome = output_check(adv, torch.zeros(2, 4))
    assert (outcome.status, outcome.invalid_reason) == ("invalid", reason)
    assert INVALID_REASONS[reason] in outcome.detail and outcome.line == f"invalid: {outcome.detail}"


def test_a_proper_batch_is_ok_and_a_crash_reads_as_its_cause():
    assert output_check(torch.zeros(2, 4), torch.zeros(2, 4)) == OK and OK.line == ""
    assert Outcome("crash", "RuntimeError: boom").line == "RuntimeError: boom"
    assert Outcome("unsupported", "no targeted mode").line == "unsupported: no targeted mode"


def test_rows_written_before_the_column_get_their_reason_on_loading():
    old = pd.DataFrame({"status": ["ok", "invalid", "invalid", "invalid", "crash"],
                        "error": ["", "returned values in [-0.1, 1.2], outside the [0, 1] box",
                                  "returned shape (1,), expected (2,)", "something else", "ValueError: x"]})
    assert with_invalid_reason(old)["invalid_reason"].tolist() == ["", OUT_OF_BOX, "shape", "other", ""]
    new = old.assign(invalid_reason=["", "", "", "", ""])
    assert with_invalid_reason(new) is new  # a row that has the column is never read again
    assert "invalid_reason" in ROW_COLUMNS
