"""Release audit: real audits between PyPI releases of adv-lib on the digits zoo.

What adv-lib's releases changed (read from the released wheels and the V0.2.8 pull request,
jeromerony/adversarial-library#17):
- 0.2.6 added DeepFool (``adv_lib.attacks.df``), absent from 0.2.2;
- 0.2.6 replaced ``torch.optim.Adam`` in C&W by a hand-written Adam step whose sign is wrong for
  targeted attacks (gradient *ascent* on the loss), so targeted C&W stops early and finds nothing;
  0.2.8 fixed it (``-learning_rate`` always, the logit difference negated when targeted);
- between 0.2.2 and 0.2.6 FMN was only refactored (``torch.lerp``, an in-place ``addcdiv_``).

Old releases of other libraries test the resolution of each release's environment: ART 1.17.1
imports ``pkg_resources`` (gone from setuptools 82), so its overlay shadows the project's setuptools;
cleverhans 3.1.0's ``pytorch`` extra pins torchvision 0.3.0, a conflict with the project's torch stack.
Audits of long release ranges and large downloads run only with ``ATTACKAUDIT_LONG_AUDITS=1``.

Release environments are cached in the user's cache directory (``ATTACKAUDIT_CACHE`` if set), so
only the first run of these tests installs anything; the failure tests use a throwaway cache.

Offline: the releases these tests audit are downloaded once into a wheel directory
(``wheelhouse``, under the cache) and every audit installs from it with the index switched off
(``ATTACKAUDIT_PIP_ARGS=--no-index --find-links DIR``). Without the index and without those wheels
a test skips, saying so; the tests that truly need the index (``--bisect`` lists releases on it,
``test_release_not_on_the_index``) are marked ``needs_index`` and skip offline with that reason.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from attackaudit import cli, load_run
from attackaudit.audit.command import index_releases
from attackaudit.audit.env import _still_valid, base_site_packages, prepare_env

def _index_reachable() -> bool:
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "index", "versions",
                           "adv-lib"], capture_output=True, text=True, timeout=60)
    return proc.returncode == 0


INDEX_UP = _index_reachable()
needs_index = pytest.mark.skipif(not INDEX_UP, reason="needs the package index (pip index versions), which is "
                                                       "unreachable: offline")


def wheelhouse(*requirements: str) -> str:
    """A wheel directory holding ``requirements`` (downloaded once, without dependencies), as the
    ``ATTACKAUDIT_PIP_ARGS`` that install from it with the index off; skips when they are missing
    and the index is unreachable."""
    from attackaudit.audit.env import cache_root

    where = cache_root() / "wheels"
    where.mkdir(parents=True, exist_ok=True)
    for req in requirements:
        proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps",
                               "--no-index", "--find-links", str(where), "-q", "-d", str(where), req],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            continue  # already in the wheel directory
        if not INDEX_UP:
            pytest.skip(f"offline and {req} is not in the wheel directory {where} yet")
        proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps",
                               "--prefer-binary", "-q", "-d", str(where), req], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    return f"--no-index --find-links {where}"


@pytest.fixture(scope="module")
def offline_adv_lib():
    """Audits of adv-lib releases install from the wheel directory with the index off."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTACKAUDIT_PIP_ARGS", wheelhouse("adv-lib==0.2.2", "adv-lib==0.2.6"))
    yield
    mp.undo()


LONG = pytest.mark.skipif(os.environ.get("ATTACKAUDIT_LONG_AUDITS") != "1",
                          reason="long release audit: set ATTACKAUDIT_LONG_AUDITS=1")
GRID = ["--models", "digits-cnn", "--samples", "16", "--steps-scale", "0.2", "--quiet"]


def installed_state() -> tuple:
    """adv-lib's installed version, a fingerprint of every file of its installation, and one of the
    whole project environment (every site-packages entry, every distribution's RECORD, every .pth)."""
    dist = importlib.metadata.distribution("adv-lib")
    digest = hashlib.sha256()
    for f in sorted(dist.files or [], key=str):
        path = Path(dist.locate_file(f))
        if path.is_file():
            digest.update(str(f).encode() + path.read_bytes())
    project = hashlib.sha256()
    for sp in base_site_packages():
        for entry in sorted(Path(sp).iterdir()):
            project.update(entry.name.encode())
            record = entry / "RECORD"
            if record.is_file():
                project.update(record.read_bytes())
            elif entry.suffix == ".pth":
                project.update(entry.read_bytes())
    return dist.version, digest.hexdigest(), project.hexdigest()


def audit(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["audit", *args])
    return code, out.getvalue(), err.getvalue()


def verdicts(out: Path) -> dict[tuple[str, str], dict]:
    doc = json.loads((out / "audit.json").read_text())
    return {(r["implementation"], r["norm"]): r for r in doc["implementations"]}


@pytest.fixture(scope="module")
def before():
    return installed_state()


@pytest.fixture(scope="module")
def cw_audits(tmp_path_factory, before, offline_adv_lib):
    """Targeted C&W L∞: 0.2.2 -> 0.2.6 (the bug) then 0.2.6 -> 0.2.8 (the fix), in one audit
    directory, so the second audit resumes the 0.2.6 run of the first."""
    out = tmp_path_factory.mktemp("audit") / "cw"
    grid = ["--targeted", "--families", "cw", "--norms", "linf", *GRID, "--out", str(out)]
    code, broke, stderr = audit(["adv-lib==0.2.2", "adv-lib==0.2.6", *grid])
    assert code == 0, stderr
    bug = json.loads((out / "audit.json").read_text())
    code, fixed, stderr = audit(["adv-lib==0.2.6", "adv-lib==0.2.8", *grid])
    assert code == 0, stderr
    assert "adv_lib 0.2.6: 1 jobs: 1 ok, 0 crashed, 0 timed out, 0 invalid (0 run now, 1 already done)" in fixed
    return out, bug, broke, fixed


@pytest.fixture(scope="module")
def cw_fix(cw_audits):
    out, _, _, stdout = cw_audits
    return out, stdout


@pytest.fixture(scope="module")
def df_added(tmp_path_factory, before, offline_adv_lib):
    """0.2.2 .. 0.2.8 bisected, untargeted DeepFool and FMN in L2: DeepFool is new in 0.2.6, FMN
    only refactored. The bisection runs 0.2.6 too, so its verdicts against 0.2.2 are in the evidence."""
    if not INDEX_UP:
        pytest.skip("--bisect lists the releases on the package index, which is unreachable: offline")
    out = tmp_path_factory.mktemp("audit") / "df"
    code, stdout, stderr = audit(["adv-lib==0.2.2", "adv-lib==0.2.8", "--bisect", "--families", "deepfool", "fmn",
                                  "--norms", "l2", *GRID, "--out", str(out)])
    assert code == 0, stderr
    return out, stdout


def test_targeted_cw_fix_of_0_2_8_is_improved(cw_fix):
    out, stdout = cw_fix
    v = verdicts(out)
    assert set(v) == {("adv_lib/carlini_wagner_linf", "linf")}
    r = v[("adv_lib/carlini_wagner_linf", "linf")]
    assert r["verdict"] == "improved", r["line"]
    assert (r["version_before"], r["version_after"]) == ("0.2.6", "0.2.8")
    assert r["paired_test"]["n_better"] > r["paired_test"]["n_worse"] == 0
    assert r["paired_test"]["p_value"] < 0.01
    assert r["optimality_after"] > r["optimality_before"]
    assert "adv_lib/carlini_wagner_linf [linf] 0.2.6 -> 0.2.8: improved" in stdout
    assert (out / "audit.md").is_file() and (out / "audit.html").is_file() and (out / "diff.csv").is_file()


def test_targeted_cw_bug_of_0_2_6_is_regressed(cw_audits):
    _, doc, stdout, _ = cw_audits
    assert doc["counts"] == {"regressed": 1}
    r = doc["implementations"][0]
    assert (r["implementation"], r["norm"], r["verdict"]) == ("adv_lib/carlini_wagner_linf", "linf", "regressed")
    assert (r["version_before"], r["version_after"]) == ("0.2.2", "0.2.6")
    assert r["paired_test"]["n_worse"] > r["paired_test"]["n_better"] == 0
    assert r["optimality_after"] < r["optimality_before"]
    assert "adv_lib/carlini_wagner_linf [linf] 0.2.2 -> 0.2.6: regressed" in stdout


def test_strict_exits_1_on_the_regression(cw_audits, tmp_path):
    """``--strict``: the 0.2.2 -> 0.2.6 audit of ``cw_audits`` (exit 0 there, without the flag) again
    in a copy of its directory: both runs resume with nothing left to attack, the verdict is
    regressed, so the audit exits 1."""
    out = tmp_path / "cw"
    shutil.copytree(cw_audits[0], out)
    code, stdout, stderr = audit(["adv-lib==0.2.2", "adv-lib==0.2.6", "--strict", "--targeted", "--families", "cw",
                                  "--norms", "linf", *GRID, "--out", str(out)])
    assert code == 1, stderr
    assert json.loads((out / "audit.json").read_text())["counts"] == {"regressed": 1}
    assert stdout.count("1 jobs: 1 ok, 0 crashed, 0 timed out, 0 invalid (0 run now, 1 already done)") == 2, stdout


def test_each_release_ran_under_its_own_environment(cw_fix):
    out, _ = cw_fix
    doc = json.loads((out / "audit.json").read_text())
    old, new = out / "adv_lib-0.2.6", out / "adv_lib-0.2.8"
    # the versions in the rows are read by the workers: they prove which release attacked
    assert set(load_run(old)["library_version"]) == {"0.2.6"}
    assert set(load_run(new)["library_version"]) == {importlib.metadata.version("adv-lib")} == {"0.2.8"}
    m_old, m_new = (json.loads((d / "manifest.json").read_text()) for d in (old, new))
    assert m_old["library_versions"] == {"adv_lib": "0.2.6"}
    assert m_old["config"]["python"] == doc["before"]["environment"]["python"] != sys.executable
    assert doc["after"]["installed"] and m_new["config"]["python"] == ""
    assert m_old["subset_hash"] == m_new["subset_hash"] == doc["grid"]["subset_hash"]
    # adv-lib 0.2.6 asks for nothing the project lacks: its overlay holds the release alone
    assert doc["before"]["environment"]["resolved"] == []
    assert doc["environments"] == ["0.2.6: the release alone; the project's environment satisfies all its requirements",
                                   "0.2.8: the installed release, in the project's environment"]
    assert {k: v for k, v in m_old["config"].items() if k != "python"} == \
           {k: v for k, v in m_new["config"].items() if k != "python"}


@pytest.mark.slow
def test_deepfool_added_in_0_2_6_is_new_and_fmn_refactor_unchanged(df_added):
    out, _ = df_added
    assert verdicts(out)[("adv_lib/df", "l2")]["verdict"] == "new"  # 0.2.2 -> 0.2.8
    tested = {t["version"]: t for t in json.loads((out / "audit.json").read_text())["bisect"]["tested"]}
    at_0_2_6 = {(r["implementation"], r["norm"]): r for r in tested["0.2.6"]["implementations"]}
    assert at_0_2_6[("adv_lib/df", "l2")]["verdict"] == "new"
    assert at_0_2_6[("adv_lib/fmn", "l2")]["verdict"] == "unchanged", at_0_2_6[("adv_lib/fmn", "l2")]
    rows = load_run(out / "adv_lib-0.2.2")
    assert set(rows["attack"]) == {"fmn"} and set(rows["library_version"]) == {"0.2.2"}
    assert not (rows["status"] == "crash").any()


def _untouched_and_reused(before, versions):
    assert installed_state() == before
    for version in versions:
        start = time.perf_counter()
        env = prepare_env("adv-lib", version, "adv_lib")
        assert env.reused and time.perf_counter() - start < 1.0
        assert Path(env.python).is_file()


def test_installed_environment_untouched_and_envs_reused(cw_fix, before):
    _untouched_and_reused(before, ("0.2.2", "0.2.6"))


@pytest.mark.slow
def test_installed_environment_untouched_and_envs_reused_after_a_bisect(cw_fix, df_added, before):
    _untouched_and_reused(before, ("0.2.2", "0.2.6"))


@needs_index
def test_release_not_on_the_index_is_one_line_exit_2(tmp_path, monkeypatch, before):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATTACKAUDIT_CACHE", str(cache))
    code, stdout, stderr = audit(["adv-lib==99.0.0", "--models", "digits-cnn", "--out", str(tmp_path / "out")])
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "adv-lib==99.0.0" in lines[0] and lines[0].startswith("attackaudit: error:"), stderr
    assert not (tmp_path / "out").exists()
    assert [p.name for p in (cache / "envs").iterdir() if not p.name.endswith(".lock")] == []
    assert installed_state() == before


@pytest.mark.parametrize("args, message", [
    (["foolbox==3.3.3", "adv-lib==0.2.6"], "two libraries"),
    (["adv-lib==0.2.6", "adv-lib==0.2.6"], "two different versions"),
    (["adv-lib=0.2.6"], "LIB==VERSION"),
    (["nosuchlib==1.0"], "unknown library"),
])
def test_bad_release_arguments(tmp_path, args, message):
    code, _, stderr = audit([*args, "--out", str(tmp_path / "out")])
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1


def test_audit_json_is_strict_json(cw_fix):
    out, _ = cw_fix
    doc = json.loads((out / "audit.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    r = doc["implementations"][0]
    for key in ("optimality_before", "optimality_after", "asr_before", "asr_after", "flags_appeared",
                "flags_disappeared", "line"):
        assert key in r
    assert pd.read_csv(out / "diff.csv")["verdict"].tolist() == ["improved"]


# -- bisect ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_bisect_finds_the_release_that_added_deepfool(df_added):
    out, stdout = df_added
    doc = json.loads((out / "audit.json").read_text())
    b = doc["bisect"]
    assert b["releases"] == ["0.2.2", "0.2.6", "0.2.8"]
    change = {(c["implementation"], c["norm"]): c for c in b["changes"]}[("adv_lib/df", "l2")]
    assert (change["verdict"], change["first_release"], change["last_release_before"]) == ("new", "0.2.6", "0.2.2")
    assert "adv_lib/df [l2]: new first in adv-lib 0.2.6 (last release before it: 0.2.2)" in stdout
    tested = {t["version"]: t for t in b["tested"]}
    assert set(tested) == {"0.2.2", "0.2.6", "0.2.8"}
    df_06 = {(r["implementation"], r["norm"]): r for r in tested["0.2.6"]["implementations"]}[("adv_lib/df", "l2")]
    assert df_06["verdict"] == "new" and 0 < df_06["optimality"] <= 1 and 0 < df_06["asr"] <= 1
    assert ("adv_lib/df", "l2") not in {(r["implementation"], r["norm"]) for r in tested["0.2.2"]["implementations"]
                                        if r["asr"] is not None}
    assert tested["0.2.6"]["environment"]["resolved"] == [] and tested["0.2.8"]["installed"]
    md = (out / "audit.md").read_text()
    assert "## Bisect over 3 releases of adv-lib" in md and "| 0.2.6 | adv_lib/df | l2 |" in md
    assert "Bisect over 3 releases" in (out / "audit.html").read_text()


@needs_index
def test_index_releases_lists_the_range_in_order():
    assert index_releases("adv-lib", "0.2.2", "0.2.8") == ["0.2.2", "0.2.6", "0.2.8"]
    assert index_releases("adv-lib", "0.2.6", "0.2.8") == ["0.2.6", "0.2.8"]
    with pytest.raises(ValueError, match="not on the package index"):
        index_releases("adv-lib", "0.2.3", "0.2.8")


@needs_index
@pytest.mark.parametrize("args, message", [
    (["adv-lib==0.2.6", "--bisect"], "--bisect needs two releases"),
    (["adv-lib==0.2.3", "adv-lib==0.2.8", "--bisect"], "adv-lib==0.2.3 is not on the package index"),
])
def test_bisect_bad_input_is_one_line_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.setenv("ATTACKAUDIT_CACHE", str(tmp_path / "cache"))
    code, _, stderr = audit([*args, "--models", "digits-cnn", "--out", str(tmp_path / "out")])
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache" / "envs").exists()


# -- releases that need other requirements than the project's -------------------------------------
ART_GRID = ["--attacks", "art/FastGradientMethod/linf", "--models", "digits-cnn", "--samples", "8", "--quiet"]


@pytest.fixture(scope="module")
def art_1_17(tmp_path_factory, before):
    """ART 1.17.1 (imports pkg_resources) against the installed ART, FGM L∞ only."""
    out = tmp_path_factory.mktemp("audit") / "art"
    start = time.perf_counter()
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTACKAUDIT_PIP_ARGS", wheelhouse("adversarial-robustness-toolbox==1.17.1", "setuptools<82"))
    try:
        code, stdout, stderr = audit(["adversarial-robustness-toolbox==1.17.1", *ART_GRID, "--out", str(out)])
    finally:
        mp.undo()
    assert code == 0, stderr
    return out, stdout, time.perf_counter() - start


@pytest.mark.slow
def test_release_needing_an_older_setuptools_gets_it_in_its_overlay_only(art_1_17, before):
    out, stdout, _ = art_1_17
    doc = json.loads((out / "audit.json").read_text())
    env = doc["before"]["environment"]
    assert doc["before"]["version"] == "1.17.1" and doc["after"]["installed"]
    project_setuptools = importlib.metadata.version("setuptools")
    assert int(project_setuptools.split(".")[0]) >= 82  # the project's own has no pkg_resources
    (rec,) = env["resolved"]
    assert rec["name"] == "setuptools" and rec["project_version"] == project_setuptools
    assert int(rec["version"].split(".")[0]) < 82 and "pkg_resources" in rec["why"]
    assert f"shadowed setuptools {project_setuptools} -> {rec['version']}" in stdout
    assert f"1.17.1: shadowed setuptools {project_setuptools} -> {rec['version']}" in (out / "audit.md").read_text()
    # pkg_resources exists in the overlay, not in the project
    probe = "import pkg_resources, setuptools; print(setuptools.__version__)"
    inside = subprocess.run([env["python"], "-c", probe], capture_output=True, text=True)
    assert inside.returncode == 0 and inside.stdout.strip() == rec["version"], inside.stderr
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode != 0
    assert set(load_run(out / "art-1.17.1")["library_version"]) == {"1.17.1"}
    assert not (load_run(out / "art-1.17.1")["status"] == "crash").any()
    assert installed_state() == before


@pytest.mark.slow
def test_cache_key_covers_the_resolution(art_1_17, tmp_path):
    out, _, _ = art_1_17
    env = json.loads((out / "audit.json").read_text())["before"]["environment"]
    assert Path(env["path"]).name.endswith(env["key"])
    assert _still_valid(Path(env["path"]))["consulted"]["setuptools"] == importlib.metadata.version("setuptools")
    # the same overlay, resolved against another setuptools, is not reused
    copy = tmp_path / "copy"
    shutil.copytree(env["path"], copy, symlinks=True)
    marker = copy / "attackaudit-env.json"
    meta = json.loads(marker.read_text())
    marker.write_text(json.dumps({**meta, "consulted": {**meta["consulted"], "setuptools": "75.0.0"}}))
    assert _still_valid(copy) is None


@pytest.mark.slow
@needs_index
def test_pin_conflicting_with_torchvision_is_tried_and_named(tmp_path, before, monkeypatch):
    """cleverhans 3.1.0's pytorch extra pins torchvision==0.3.0: the overlay keeps the project's
    torchvision, names the unmet pin, and the release runs (its PyTorch attacks live in
    cleverhans.future.torch, which the adapter bridges)."""
    # from the index: the module's adv-lib wheel directory (offline_adv_lib) must not be the only source
    monkeypatch.delenv("ATTACKAUDIT_PIP_ARGS", raising=False)
    out = tmp_path / "out"
    code, stdout, stderr = audit(["cleverhans==3.1.0", "cleverhans==4.0.0", "--families", "fgm", "--norms", "linf",
                                  "--models", "digits-cnn", "--samples", "8", "--quiet", "--out", str(out)])
    assert code == 0, stderr
    doc = json.loads((out / "audit.json").read_text())
    (unmet,) = doc["before"]["environment"]["unmet"]
    assert unmet["requirement"].startswith("torchvision==0.3.0") and \
        unmet["project_version"] == importlib.metadata.version("torchvision")
    assert "pin not met: torchvision==0.3.0" in doc["environments"][0]
    assert "pin not met: torchvision==0.3.0" in (out / "audit.md").read_text()
    rows = load_run(out / "cleverhans-3.1.0")
    assert set(rows["library_version"]) == {"3.1.0"} and set(rows["status"]) == {"ok"}
    assert installed_state() == before


@LONG
def test_requirement_that_cannot_live_beside_numpy_is_tried_with_the_projects_copy(tmp_path, before):
    """ART 1.14.0 (AttackBench's pin) asks for scikit-learn<1.2.0, whose only wheel for this Python
    (1.1.3) is built for NumPy 1.x: the project's scikit-learn is used, the pin is named, and the
    release runs; in L2, where it takes no per-sample ε arrays, the adapter groups samples by ε."""
    out = tmp_path / "out"
    code, stdout, stderr = audit(["adversarial-robustness-toolbox==1.14.0", "--attacks", "art/FastGradientMethod/l2",
                                  "--models", "digits-cnn", "--samples", "8", "--quiet", "--out", str(out)])
    assert code == 0, stderr
    doc = json.loads((out / "audit.json").read_text())
    (unmet,) = doc["before"]["environment"]["unmet"]
    assert unmet["requirement"].startswith("scikit-learn") and "<1.2.0" in unmet["requirement"]
    assert "does not import beside" in unmet["why"]
    rows = load_run(out / "art-1.14.0")
    assert set(rows["status"]) == {"ok"}, rows["error"].unique()
    assert installed_state() == before


@LONG
@pytest.mark.parametrize("releases, grid", [
    (["torchattacks==3.4.0", "torchattacks==3.5.1"], ["--families", "pgd", "cw", "--norms", "linf", "l2"]),
    (["foolbox==3.3.3", "foolbox==3.3.4"], ["--families", "pgd", "fmn", "--norms", "l2"]),
    (["adversarial-robustness-toolbox==1.17.1", "adversarial-robustness-toolbox==1.20.1"],
     ["--families", "pgd", "--norms", "l1"]),
])
def test_long_bisects_of_old_releases(tmp_path, releases, grid, before):
    code, stdout, stderr = audit([*releases, "--bisect", *grid, "--models", "digits-cnn", "--samples", "8",
                                  "--steps-scale", "0.2", "--quiet", "--out", str(tmp_path / "out")])
    assert code == 0, stderr
    doc = json.loads((tmp_path / "out" / "audit.json").read_text())
    tested = [t["version"] for t in doc["bisect"]["tested"]]
    assert tested[0] == releases[0].split("==")[1] and tested[-1] == releases[1].split("==")[1]
    for change in doc["bisect"]["changes"]:
        assert change["first_release"] in tested and change["last_release_before"] in tested
    assert installed_state() == before
