"""Release candidates (``attackaudit audit LIB==V LIB@PATH``) and offline audits.

The suite builds a wheel from a copy of the installed torchattacks with one planted behavioural
change, PGD's step halved (``adv + 0.5 * alpha * sign(grad)``), and audits it against the
installed release with the package index switched off (``ATTACKAUDIT_PIP_ARGS=--no-index``):
PGD L∞ must come out ``regressed``, the attacks in other files ``unchanged``, and every report
must name the candidate by its version and content hash.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attackaudit import cli, load_run
from attackaudit.audit.env import content_hash

PGD_LINE = "adv_images = adv_images.detach() + self.alpha * grad.sign()"
GRID = ["--families", "pgd", "fgm", "--models", "digits-cnn", "--samples", "24", "--steps-scale", "0.05",
        "--quiet"]


def audit(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["audit", *args])
    return code, out.getvalue(), err.getvalue()


def build_candidate(tmp: Path) -> Path:
    """A wheel of the installed torchattacks with PGD's step halved; its path."""
    pytest.importorskip("torchattacks")
    dist = importlib.metadata.distribution("torchattacks")
    package = Path(dist.locate_file("torchattacks"))
    tree = tmp / "torchattacks-src"
    shutil.copytree(package, tree / "torchattacks", ignore=shutil.ignore_patterns("__pycache__"))
    pgd = tree / "torchattacks" / "attacks" / "pgd.py"
    text = pgd.read_text()
    assert text.count(PGD_LINE) == 1, "the installed torchattacks' PGD step is not where the test plants the change"
    pgd.write_text(text.replace(PGD_LINE, PGD_LINE.replace("self.alpha", "0.5 * self.alpha")))
    requires = ", ".join(f'"{r}"' for r in dist.requires or [])
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "torchattacks"\nversion = "{dist.version}"\ndependencies = [{requires}]\n'
        '[tool.setuptools.packages.find]\ninclude = ["torchattacks*"]\n')
    wheels = tmp / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "-q", "-w", str(wheels), str(tree)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = wheels.glob("torchattacks-*.whl")
    return wheel


@pytest.fixture(scope="module")
def candidate_audit(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("candidate")
    wheel = build_candidate(tmp)
    out = tmp / "audit"
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTACKAUDIT_CACHE", str(tmp / "cache"))  # a fresh overlay, built with the index off
    mp.setenv("ATTACKAUDIT_PIP_ARGS", "--no-index")
    try:
        installed = importlib.metadata.version("torchattacks")
        code, stdout, stderr = audit([f"torchattacks=={installed}", f"torchattacks@{wheel}", *GRID, "--out", str(out)])
    finally:
        mp.undo()
    assert code == 0, stderr
    return wheel, out, stdout, json.loads((out / "audit.json").read_text())


def test_planted_halved_pgd_step_is_regressed_others_unchanged(candidate_audit):
    _, _, stdout, doc = candidate_audit
    verdicts = {(r["implementation"], r["norm"]): r for r in doc["implementations"]}
    pgd = verdicts.pop(("torchattacks/PGD", "linf"))
    assert pgd["verdict"] == "regressed", pgd["line"]
    assert pgd["paired_test"]["n_worse"] > pgd["paired_test"]["n_better"]
    assert verdicts, "the audit compared no other attack"
    assert {r["verdict"] for r in verdicts.values()} == {"unchanged"}, [r["line"] for r in verdicts.values()]


def test_candidate_is_named_by_version_and_content_hash(candidate_audit):
    wheel, out, stdout, doc = candidate_audit
    installed = importlib.metadata.version("torchattacks")
    digest = content_hash(wheel)
    name = f"{installed}+c{digest}"
    assert doc["after"]["version"] == name and doc["before"]["version"] == installed
    assert doc["after"]["candidate"] == {"source": str(wheel.resolve()), "content_hash": digest}
    assert set(load_run(out / f"torchattacks-{name}")["library_version"]) == {name}
    for report in ("audit.md", "audit.html"):
        assert name in (out / report).read_text()
    assert any(name in line for line in doc["environments"])
    assert f"{installed} -> {name}: regressed" in stdout


def test_content_hash_of_a_source_tree_ignores_build_products(tmp_path):
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "a.py").write_text("x = 1\n")
    first = content_hash(tree)
    (tree / "pkg" / "__pycache__").mkdir()
    (tree / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    (tree / "build").mkdir()
    assert content_hash(tree) == first
    (tree / "pkg" / "a.py").write_text("x = 2\n")
    assert content_hash(tree) != first


def test_missing_candidate_is_one_line_exit_2(tmp_path):
    code, _, stderr = audit(["torchattacks@" + str(tmp_path / "nope.whl"), "--out", str(tmp_path / "out")])
    assert code == 2 and "does not exist" in stderr and len(stderr.strip().splitlines()) == 1
