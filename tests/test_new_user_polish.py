"""The smaller frictions a new user met (issue 51, item 11): what ``make install`` does and
weighs (README), every twin named by ``run --help``, counts that agree with their nouns ("1
model"), and a ξ written at the precision of its interval ("0.999 (0.998–1.000)", never "0.999
(1.00–1.00)"). ``print(result)`` and the notebook page's signature: tests/test_model_name.py and
tests/test_defaults_documented.py."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from attackaudit.cli import build_parser
from attackaudit.fidelity.synthetic import job_rows, table
from attackaudit.reports import build
from attackaudit.reports.answer_html import _ci
from attackaudit.reports.first_screen import ScreenRow
from attackaudit.reports.formats import counted, f_ci
from attackaudit.reports.text import ran_line
from attackaudit.results.schema import TWIN_KINDS

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_says_what_make_install_installs_and_weighs():
    readme = " ".join((ROOT / "README.md").read_text().split())
    chromium = (ROOT / ".ci" / "chromium.sh").read_text()
    assert "apt-get install" in chromium and 'id -u)" = 0' in chromium  # what the README must say
    assert "installs Chromium" in readme and "as root it calls `apt-get install chromium`" in readme
    size = re.search(r"The venv is about (\d+(?:\.\d+)?) GB", readme)
    assert size and 5 <= float(size.group(1)) <= 8


def test_run_help_names_every_twin():
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    text = " ".join(sub.choices["run"].format_help().split())
    for kind in TWIN_KINDS:
        assert f"~{kind}" in text, kind


def test_counts_agree_with_their_nouns():
    assert (counted(1, "model"), counted(2, "model"), counted(0, "job")) == ("1 model", "2 models", "0 jobs")
    d = np.random.default_rng(0).uniform(0.05, 0.3, 8)
    data = build(table(job_rows("m", "a/pgd", "linf", d, family="pgd")))
    line = ran_line(data)
    assert "1 implementation × 1 model (m)" in line and "1 job," in line and "1 models" not in line, line


def test_xi_and_its_interval_are_written_at_one_precision():
    assert f_ci(0.998, 1.0) == "0.998–1.000" and f_ci(float("nan"), 1.0) == "" and f_ci(None, 1) == ""
    assert ScreenRow.ci_text.fget(SimpleNamespace(ci=(0.998, 1.0))) == "(0.998–1.000)"
    assert _ci((0.998, 1.0)) == "0.998–1.000"


def test_a_strength_flag_on_one_model_says_one_model():
    """``below_expected_strength`` said "over 1 models" on a one-model run."""
    from attackaudit import fidelity

    d = np.random.default_rng(1).uniform(0.05, 0.3, 16)
    rows = table(job_rows("m", "art/ProjectedGradientDescent", "linf", d, family="pgd", kind="fixed"),
                 job_rows("m", "adv_lib/pgd_linf", "linf", d * 3, family="pgd", kind="fixed"))
    flags = fidelity.flags(rows)
    evidence = flags.loc[flags["flag"] == "below_expected_strength", "evidence"]
    assert len(evidence) and all("over 1 model," in e and "1 models" not in e for e in evidence), list(evidence)
