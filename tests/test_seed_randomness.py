"""Randomness a plugin does not declare is named, and a deterministic plugin is not counted as
randomised (issue 51, item 9), on a real run: tests/plugins/random_start.py's two walks on the
digits MLP with ``--metamorphic``. ``start`` draws its random start from torch's global generator
(its rows record ``rng_used``) and does not declare ``randomised``; ``steady`` is the same walk from
the input. Both get a seed twin (every plugin does). Before, the report said "2 randomised
implementations ran again with another seed" and nothing about ``start``'s undeclared randomness.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from attackaudit.cli import main as cli_main

PLUGIN = str(Path(__file__).parent / "plugins" / "random_start.py")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("random-start")
    assert cli_main(["run", "--plugin", PLUGIN, "--libraries", "random_start", "--models", "digits-mlp",
                     "--samples", "16", "--metamorphic", "--out", str(out), "--quiet"]) == 0
    assert cli_main(["report", str(out)]) == 0
    return out


def test_the_manifest_records_what_each_spec_declares(run: Path):
    import json

    specs = json.loads((run / "manifest.json").read_text())["specs"]
    assert {s["implementation"]: s["randomised"] for s in specs.values()} == {
        "random_start/start": False, "random_start/steady": False}


def test_undeclared_randomness_is_named_and_a_deterministic_plugin_is_not_randomised(run: Path):
    from attackaudit.reports.run_files import load_runs
    from attackaudit.reports.seed_twins import seed_twin_sentence, seed_twin_table
    from attackaudit.reports.tables import build

    table, manifests, _ = load_runs([run])
    frame = build(table, manifests, [run]).seed_twins.set_index("implementation")
    start, steady = frame.loc["random_start/start"], frame.loc["random_start/steady"]
    assert start["n_differ"] > 0 and start["rng_used"] and start["declared"] == False  # noqa: E712
    assert steady["n_differ"] == 0 and not steady["rng_used"] and steady["declared"] == False  # noqa: E712
    sentence = seed_twin_sentence(frame.reset_index())
    assert sentence.startswith("2 implementations ran again with another seed on digits-mlp~seed: 1 randomised")
    assert "; 1 deterministic (" in sentence and "randomised implementations" not in sentence
    assert (f"Undeclared randomness: random_start/start l2 differs from its seed twin on {start['n_differ']} of 16 "
            f"images, by up to {start['largest_relative_difference']:.0%} (its call moved a global random state: "
            "rng_used); its spec does not declare randomised=True") in sentence
    assert "random_start/steady" not in sentence
    # where the reader meets it: the report's seed-twin section, in both formats
    md, page = (run / "report.md").read_text(), (run / "report.html").read_text()
    assert "Undeclared randomness: random_start/start l2" in md and "Undeclared randomness: random_start/start l2" in page
    # a run made before the manifest recorded declarations says nothing it cannot know
    older = seed_twin_table(table, build(table, manifests, [run]).flags)
    assert older["declared"].isna().all() and "Undeclared" not in seed_twin_sentence(older)
