"""Release audit: real audits between PyPI releases of adv-lib on the digits zoo.

What adv-lib's releases changed (read from the released wheels and the V0.2.8 pull request,
jeromerony/adversarial-library#17):
- 0.2.6 added DeepFool (``adv_lib.attacks.df``), absent from 0.2.2;
- 0.2.6 replaced ``torch.optim.Adam`` in C&W by a hand-written Adam step whose sign is wrong for
  targeted attacks (gradient *ascent* on the loss), so targeted C&W stops early and finds nothing;
  0.2.8 fixed it (``-learning_rate`` always, the logit difference negated when targeted);
- between 0.2.2 and 0.2.6 FMN was only refactored (``torch.lerp``, an in-place ``addcdiv_``).

Release environments are cached in the user's cache directory (``ATTACKAUDIT_CACHE`` if set), so
only the first run of these tests installs anything; the failure test uses a throwaway cache.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from attackaudit import cli, load_run
from attackaudit.audit_env import prepare_env

GRID = ["--models", "digits-cnn", "--samples", "16", "--steps-scale", "0.2", "--quiet"]


def installed_state() -> tuple:
    """adv-lib's installed version and a fingerprint of every file of its installation."""
    dist = importlib.metadata.distribution("adv-lib")
    digest = hashlib.sha256()
    for f in sorted(dist.files or [], key=str):
        path = Path(dist.locate_file(f))
        if path.is_file():
            digest.update(str(f).encode() + path.read_bytes())
    site_packages = Path(dist.locate_file(""))
    return dist.version, digest.hexdigest(), sorted(p.name for p in site_packages.iterdir())


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
def cw_audits(tmp_path_factory, before):
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
def df_added(tmp_path_factory, before):
    """0.2.2 -> 0.2.6, untargeted DeepFool and FMN in L2: DeepFool is new, FMN only refactored."""
    out = tmp_path_factory.mktemp("audit") / "df"
    code, stdout, stderr = audit(["adv-lib==0.2.2", "adv-lib==0.2.6", "--families", "deepfool", "fmn",
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
    assert {k: v for k, v in m_old["config"].items() if k != "python"} == \
           {k: v for k, v in m_new["config"].items() if k != "python"}


def test_deepfool_added_in_0_2_6_is_new_and_fmn_refactor_unchanged(df_added):
    out, _ = df_added
    v = verdicts(out)
    assert v[("adv_lib/df", "l2")]["verdict"] == "new"
    assert v[("adv_lib/df", "l2")]["version_before"] == ""
    assert v[("adv_lib/fmn", "l2")]["verdict"] == "unchanged", v[("adv_lib/fmn", "l2")]["line"]
    rows = load_run(out / "adv_lib-0.2.2")
    assert set(rows["attack"]) == {"fmn"} and set(rows["library_version"]) == {"0.2.2"}
    assert not (rows["status"] == "crash").any()


def test_installed_environment_untouched_and_envs_reused(cw_fix, df_added, before):
    assert installed_state() == before
    for version in ("0.2.2", "0.2.6"):
        start = time.perf_counter()
        env = prepare_env("adv-lib", version, "adv_lib")
        assert env.reused and time.perf_counter() - start < 1.0
        assert Path(env.python).is_file()


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
