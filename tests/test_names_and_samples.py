"""Names as a new user types them, and more samples than the data has (issue 51, items 6 and 7).

Family, attack and norm names match in any case (``PGD`` is ``pgd``, ``Linf`` is ``linf``), a
model name with a typo is answered with the nearest zoo names as a family's is, and filters that
match no attack say which library lacks which norm. ``--samples`` and ``compare(samples=...)``
follow one rule: more than the data has attacks all of it, with a note, and the run records the
number attacked (``harness/sources/subset.py`` ``samples_note``)."""
from __future__ import annotations

import json

import pytest
import torch

import attackaudit
from attackaudit.cli import main as cli_main
from attackaudit.run.config import ConfigError, resolve
from attackaudit.run.runner import plan
from attackaudit.sources.subset import digits
from attackaudit.sources.zoo import load_model


def planned(**flags):
    return plan(resolve(None, {"out": "unused", **flags}))


def test_family_attack_and_norm_names_match_in_any_case():
    lower = planned(families=["pgd"], norms=["linf"], libraries=["adv_lib"])
    upper = planned(families=["PGD"], norms=["Linf"], libraries=["adv_lib"])
    assert lower.jobs and [j.job_id for j in upper.jobs] == [j.job_id for j in lower.jobs]
    assert resolve(None, {"out": "x", "norms": ["L2", "LINF"]}).norms == ["l2", "linf"]
    assert [j.job_id for j in planned(attacks=["ADV_LIB/FMN/L2"]).jobs] == \
        [j.job_id for j in planned(attacks=["adv_lib/fmn/l2"]).jobs]


def test_a_misspelt_family_or_model_names_the_nearest():
    with pytest.raises(ConfigError, match=r"--families 'PGDD' names no attack \(nearest: pgd"):
        planned(families=["PGDD"], libraries=["adv_lib"])
    with pytest.raises(ConfigError, match=r"^unknown model 'digits-mpl' \(nearest: digits-mlp\b.*`attackaudit models`"):
        resolve(None, {"out": "x", "models": ["digits-mpl"]})


def test_filters_that_match_no_attack_say_which_library_lacks_which_norm():
    with pytest.raises(ConfigError) as err:
        planned(libraries=["cleverhans"], norms=["l1"])
    assert "match no attack: cleverhans has no l1 attack (it has: l2, linf)" in str(err.value)
    with pytest.raises(ConfigError) as err:
        planned(libraries=["adv_lib", "cleverhans"], families=["cw"], norms=["l1"])
    message = str(err.value)
    assert "adv_lib has no l1 attack of --families cw (it has: l2, linf)" in message
    assert "cleverhans has no l1 attack of --families cw (it has: l2)" in message
    assert len(message.splitlines()) == 1


def test_more_samples_than_the_data_attacks_all_of_it_with_a_note_on_the_command_line(tmp_path, capsys):
    x, y = digits("test")
    data = tmp_path / "six.pt"
    torch.save({"inputs": x[:6], "labels": y[:6]}, data)
    out = tmp_path / "run"
    code = cli_main(["run", "--dataset", f"tensors:{data}", "--samples", "50", "--models", "digits-mlp-tiny",
                     "--attacks", "adv_lib/fmn/linf", "--budget", "50", "--steps-scale", "0.1", "--workers", "1",
                     "--quiet", "--out", str(out)])
    assert code == 0
    err = capsys.readouterr().err
    assert ("note: --samples 50 is more than the 6 images the dataset has: all 6 are attacked, and the run records "
            "--samples 6") in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["samples"] == 6
    assert len(attackaudit.load_run(out)) == 6
    # the same grid asked with --samples 6 is the same run: it resumes, nothing is refused
    assert cli_main(["run", "--dataset", f"tensors:{data}", "--samples", "6", "--models", "digits-mlp-tiny",
                     "--attacks", "adv_lib/fmn/linf", "--budget", "50", "--steps-scale", "0.1", "--workers", "1",
                     "--quiet", "--out", str(out)]) == 0
    assert "0 run now" in capsys.readouterr().err


def test_compare_follows_the_same_rule(tmp_path):
    x, y = digits("test")
    result = attackaudit.compare(load_model("digits-mlp-tiny"), x[:5], y[:5], attacks="adv_lib/fmn/linf",
                                 samples=1000, budget=50, steps_scale=0.1, workers=0, progress=False,
                                 out=tmp_path / "r")
    assert ("samples=1000 is more than the 5 images the dataset has: all 5 are attacked, and the run records "
            "samples=5") in result.notes
    assert len(result.rows) == 5
