"""``attackaudit.audit.env``: the parts of a release environment that mutation testing checks fast
(docs/testing.md): where environments are cached and when one is reused, a candidate's content
hash and version label, a release pip cannot find, the environment report line, and a run under
another interpreter (the child's protocol). The audits themselves, and a whole run under another
interpreter, are tests/test_audit*.py's.

Everything here is real: pip installs a tiny source tree with the index switched off, the
interpreter subprocesses are real, and the cache is a temporary directory.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import site
import sys
from pathlib import Path

import pytest

from attackaudit.audit import env as audit_env
from attackaudit.audit.env import (MARKER, AuditEnvError, Env, _install_release, _site_packages, _still_valid,
                                   base_site_packages, cache_root, content_hash, installed_version,
                                   is_current_interpreter, prepare_env, run_under)
from attackaudit.run.config import ConfigError, RunConfig

NO_INDEX = "--no-index --no-build-isolation"
PROBE = str(Path(__file__).parent / "plugins" / "probe.py")


# -- the cache ------------------------------------------------------------------------------------
def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTACKAUDIT_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "mine"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ATTACKAUDIT_CACHE", "~/envs-here")
    assert cache_root() == tmp_path / "home" / "envs-here"
    monkeypatch.delenv("ATTACKAUDIT_CACHE")
    assert cache_root() == tmp_path / "xdg" / "attackaudit"
    monkeypatch.setenv("XDG_CACHE_HOME", "~/xdg-cache")
    assert cache_root() == tmp_path / "home" / "xdg-cache" / "attackaudit"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert cache_root() == tmp_path / "home" / ".cache" / "attackaudit"


def test_the_base_layer_is_this_environments_site_packages():
    layer = base_site_packages()
    assert layer == [p for p in site.getsitepackages() if Path(p).is_dir()] and layer
    assert any(Path(importlib.metadata.distribution("torch").locate_file("torch")).is_relative_to(p) for p in layer)
    sp = _site_packages(Path("/e"))
    assert sp == Path(f"/e/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages")


def finished_env(envs: Path, name: str, consulted: dict | None, **meta) -> Path:
    final = envs / name
    (final / "bin").mkdir(parents=True)
    (final / "bin" / "python").symlink_to(sys.executable)
    record = {"version": "0.2.2", "specs": ["adv_lib/fmn/l2"], "added_requirements": ["x==1"], "warnings": ["w"],
              "resolved": [], "key": name[-8:], "unmet": [], "source": "", "content_hash": "",
              "consulted": consulted, "dist": "ignored", "library": "ignored", **meta}
    (final / MARKER).write_text(json.dumps(record))
    return final


def test_a_finished_environment_is_valid_while_its_resolution_holds(tmp_path):
    torch_version = importlib.metadata.version("torch")
    good = finished_env(tmp_path, "good", {"torch": torch_version})
    assert _still_valid(good)["consulted"] == {"torch": torch_version}
    assert _still_valid(finished_env(tmp_path, "moved", {"torch": "0.0.1"})) is None
    assert _still_valid(finished_env(tmp_path, "absent", {"no-such-dist-x": None})) is not None
    assert _still_valid(finished_env(tmp_path, "old", None)) is None  # an older layout
    no_unmet = finished_env(tmp_path, "no-unmet", {"torch": torch_version})
    meta = json.loads((no_unmet / MARKER).read_text())
    del meta["unmet"]
    (no_unmet / MARKER).write_text(json.dumps(meta))
    assert _still_valid(no_unmet) is None
    (good / "bin" / "python").unlink()
    assert _still_valid(good) is None  # no interpreter
    assert _still_valid(tmp_path / "nothing") is None  # no marker


def test_prepare_env_reuses_a_finished_environment(tmp_path):
    envs = tmp_path / "envs"
    torch_version = importlib.metadata.version("torch")
    prefix = f"adv-lib-0.2.2-{audit_env._base_tag()}"
    finished_env(envs, f"{prefix}-00000000", {"torch": "0.0.1"})  # stale: passed over
    final = finished_env(envs, f"{prefix}-abcd1234", {"torch": torch_version})
    found = prepare_env("adv-lib", "0.2.2", "adv_lib", cache=tmp_path)
    assert found.reused and found.path == str(final) and found.python == str(final / "bin" / "python")
    assert found.site_packages == str(_site_packages(final))
    assert (found.dist, found.library, found.version, found.key) == ("adv-lib", "adv_lib", "0.2.2", "abcd1234")
    assert found.specs == ["adv_lib/fmn/l2"] and found.added_requirements == ["x==1"] and found.warnings == ["w"]
    assert 0 <= found.prepare_s < 5
    assert (envs / f"{prefix}.lock").is_file()


def test_a_missing_candidate_is_one_line(tmp_path):
    with pytest.raises(AuditEnvError) as caught:
        prepare_env("adv-lib", "", "adv_lib", cache=tmp_path, source=tmp_path / "nope.whl")
    assert str(caught.value) == (f"release candidate {tmp_path / 'nope.whl'} does not exist (give a wheel, an sdist "
                                 "or a source tree)")


# -- a candidate's content hash and label ------------------------------------------------------------
def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_content_hash_of_a_file_and_of_a_tree(tmp_path):
    wheel = tmp_path / "x.whl"
    wheel.write_bytes(b"wheel bytes")
    import hashlib

    assert content_hash(wheel) == hashlib.sha256(b"wheel bytes").hexdigest()[:12]
    a = tree(tmp_path / "a", {"pkg/a.py": "A", "pkg/b.py": "B"})
    b = tree(tmp_path / "b", {"pkg/b.py": "B", "pkg/a.py": "A"})  # created in another order
    assert content_hash(a) == content_hash(b) and len(content_hash(a)) == 12
    tree(b, {"pkg/__pycache__/a.pyc": "x", ".git/HEAD": "x", "build/lib/a.py": "x", "dist/x.whl": "x",
             "pkg.egg-info/PKG-INFO": "x", ".pytest_cache/v": "x"})
    assert content_hash(a) == content_hash(b)  # build products and caches left out
    renamed = tree(tmp_path / "c", {"pkg/a.py": "A", "pkg/c.py": "B"})
    changed = tree(tmp_path / "d", {"pkg/a.py": "A", "pkg/b.py": "B!"})
    moved = tree(tmp_path / "e", {"pkg/a.py": "", "pkg/b.py": "AB"})  # the same bytes, split elsewhere
    assert len({content_hash(a), content_hash(renamed), content_hash(changed), content_hash(moved)}) == 4


def source_tree(root: Path, name: str = "tinydist") -> Path:
    return tree(root, {
        "pyproject.toml": ('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
                           f'[project]\nname = "{name}"\nversion = "0.1"\n'
                           '[tool.setuptools]\npackages = ["tinypkg"]\n'),
        "tinypkg/__init__.py": "VALUE = 1\n"})


@pytest.mark.slow
def test_a_candidate_is_installed_and_labelled_with_its_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTACKAUDIT_PIP_ARGS", NO_INDEX)
    src = source_tree(tmp_path / "src")
    sp = tmp_path / "sp"
    release, version = _install_release(sp, "tinydist", "0123456789ab", str(src))
    assert (release, version) == (f"tinydist@{src}", "0.1+c0123456789ab")
    (dist,) = importlib.metadata.distributions(path=[str(sp)])
    assert dist.version == "0.1+c0123456789ab" and dist.metadata["Name"] == "tinydist"
    assert (sp / "tinypkg" / "__init__.py").is_file()
    with pytest.raises(AuditEnvError) as caught:
        _install_release(tmp_path / "sp2", "otherdist", "0123456789ab", str(src))
    assert str(caught.value) == f"{src} does not build a otherdist distribution"


def test_a_release_pip_cannot_find_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTACKAUDIT_PIP_ARGS", "--no-index")
    with pytest.raises(AuditEnvError) as caught:
        _install_release(tmp_path / "sp", "no-such-dist-x", "9.9.9", "")
    assert str(caught.value).startswith("cannot install no-such-dist-x==9.9.9: no such release on the package index (")


# -- what the audit says about an environment -------------------------------------------------------
def test_the_environment_line():
    env = Env("adv-lib", "0.2.2", "adv_lib", "/c/envs/e", "/c/envs/e/bin/python", "/c/sp", False, 12.345)
    assert env.line() == ("environment adv-lib==0.2.2: created in 12.3 s (/c/envs/e; nothing to resolve beside the "
                          "release)")
    env.reused, env.source = True, "/src/adv_lib-0.2.2.whl"
    env.resolved = [{"name": "setuptools", "version": "81.0.0", "project_version": "84.2.1", "why": "pkg_resources"},
                    {"name": "mnist", "version": "0.2.2", "project_version": None, "why": "declared"}]
    env.unmet = [{"requirement": "torchvision==0.3.0", "project_version": "0.20.0", "why": "conflict"}]
    assert env.line() == ("environment candidate /src/adv_lib-0.2.2.whl (adv-lib 0.2.2): reused in 12.3 s "
                          "(/c/envs/e; shadowed setuptools 84.2.1 -> 81.0.0 (pkg_resources); added mnist 0.2.2 "
                          "(declared); pin not met: torchvision==0.3.0 (conflict); the project's torchvision 0.20.0 "
                          "is used)")


def test_installed_versions_and_the_kept_stack():
    assert installed_version("no-such-dist-x") == "none"
    assert installed_version("torch") == importlib.metadata.version("torch")
    stack = audit_env._stack()
    assert stack.startswith(f"torch {importlib.metadata.version('torch')}, ") and "numpy " in stack


@pytest.mark.slow
def test_inspect_reads_a_release_or_says_why_not(tmp_path):
    info = audit_env._inspect(sys.executable, "torchattacks", "torchattacks")
    assert info["version"] == importlib.metadata.version("torchattacks") and info["available"] and info["imports"]
    assert "torchattacks/APGD:ce/linf" in info["specs"] and "smoke_errors" not in info
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho starting\necho 'no such thing' >&2\nexit 1\n")
    broken.chmod(0o755)
    assert audit_env._inspect(str(broken), "x", "x") == {
        "version": None, "available": False, "reason": "the environment's interpreter failed (no such thing)",
        "specs": []}


# -- a run under another interpreter -----------------------------------------------------------------
def test_the_current_interpreter_is_named_by_its_path(tmp_path):
    assert is_current_interpreter(sys.executable)
    assert is_current_interpreter(os.path.relpath(sys.executable))
    link = tmp_path / "python"
    link.symlink_to(sys.executable)
    assert not is_current_interpreter(str(link))  # another environment sharing the binary


@pytest.mark.slow
def test_run_under_refuses_what_cannot_run(tmp_path):
    script = tmp_path / "python"
    script.write_text("")
    with pytest.raises(ConfigError) as caught:
        run_under(RunConfig(out=str(tmp_path / "run"), python=str(script)))
    assert str(caught.value) == f"python {script} is not an executable interpreter"
    # the child's usage error comes back as one line
    with pytest.raises(ConfigError) as caught:
        run_under(RunConfig(out=str(tmp_path / "run"), python=sys.executable, samples=0, libraries=["probe"],
                            plugins=[PROBE]))
    assert str(caught.value) == "--samples must be an integer ≥ 1, got 0"


def test_the_child_checks_it_runs_under_the_configs_interpreter(tmp_path):
    request, answer = tmp_path / "config.json", tmp_path / "summary.json"
    request.write_text(json.dumps({"out": str(tmp_path / "run"), "python": "/bin/sh"}))
    assert audit_env._child(str(request), str(answer)) == 2
    assert json.loads(answer.read_text()) == {"error": f"expected to run under /bin/sh, not {sys.executable}"}


def test_an_empty_error_of_the_run_is_named_by_its_class(tmp_path, monkeypatch):
    import attackaudit.run.runner as runner

    def fail(config):
        raise ValueError()

    monkeypatch.setattr(runner, "run", fail)
    request, answer = tmp_path / "config.json", tmp_path / "summary.json"
    request.write_text(json.dumps({"out": str(tmp_path / "run"), "python": sys.executable}))
    assert audit_env._child(str(request), str(answer)) == 2
    assert json.loads(answer.read_text()) == {"error": "ValueError"}


# -- building an environment: a candidate with one dependency the project lacks ------------------------
@pytest.fixture
def offline_candidate(tmp_path, monkeypatch):
    """A source tree of ``tinydist`` 0.1 (package ``tinypkg``) that requires ``tinydep``, whose
    wheel is in a local directory pip finds with the index off; (the tree, its expected version)."""
    import subprocess

    dep = tree(tmp_path / "dep", {
        "pyproject.toml": ('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
                           '[project]\nname = "tinydep"\nversion = "0.3"\n'
                           '[tool.setuptools]\npackages = ["tinydep"]\n'),
        "tinydep/__init__.py": "VALUE = 3\n"})
    wheels = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "-q", "-w", str(wheels), str(dep)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    src = tree(tmp_path / "src", {
        "pyproject.toml": ('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
                           '[project]\nname = "tinydist"\nversion = "0.1"\ndependencies = ["tinydep>=0.2"]\n'
                           '[tool.setuptools]\npackages = ["tinypkg"]\n'),
        "tinypkg/__init__.py": "import tinydep\nVALUE = tinydep.VALUE\n"})
    monkeypatch.setenv("ATTACKAUDIT_PIP_ARGS", f"{NO_INDEX} --find-links {wheels}")
    return src, f"0.1+c{content_hash(src)}"


def inspect_by_importing(calls: list):
    """An ``_inspect`` that asks the environment's own interpreter which version of the
    distribution it imports (``tinypkg`` has no adapter, so the real one would say "unavailable")."""
    import subprocess

    def inspect(python, dist, library, smoke=False):
        calls.append(python)
        code = f"import importlib.metadata as M, {library}; print(M.version({dist!r}))"
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
        return {"version": proc.stdout.strip(), "available": True, "reason": "", "specs": [f"{library}/a/l2"],
                "imports": True}
    return inspect


def test_a_candidate_environment_is_built_recorded_and_reused(tmp_path, offline_candidate, monkeypatch):
    src, version = offline_candidate
    calls = []
    monkeypatch.setattr(audit_env, "_inspect", inspect_by_importing(calls))
    env = prepare_env("tinydist", "", "tinypkg", cache=tmp_path / "cache", source=src)
    final = Path(env.path)
    assert final.parent == tmp_path / "cache" / "envs" and final.name.startswith("tinydist-c")
    assert (env.dist, env.library, env.version, env.reused) == ("tinydist", "tinypkg", version, False)
    assert env.python == str(final / "bin" / "python") and Path(env.python).exists()
    (inspected,) = calls  # under its own interpreter, in the directory it was built in before the rename
    assert Path(inspected).relative_to(final.parent).parts[1:] == ("bin", "python")
    assert env.site_packages == str(_site_packages(final)) and (Path(env.site_packages) / "tinydep").is_dir()
    assert (env.source, env.content_hash) == (str(src), content_hash(src))
    assert env.specs == ["tinypkg/a/l2"] and env.added_requirements == ["tinydep==0.3"] and env.warnings == []
    assert [(r["name"], r["version"], r["requirement"]) for r in env.resolved] == [("tinydep", "0.3", "tinydep>=0.2")]
    assert env.unmet == [] and len(env.key) == 8 and final.name.endswith(f"-{env.key}")
    meta = json.loads((final / MARKER).read_text())
    assert meta["version"] == version and meta["key"] == env.key and meta["consulted"] == {"tinydep": None}
    assert [d.name for d in (tmp_path / "cache" / "envs").iterdir() if d.is_dir()] == [final.name]  # no leftovers
    again = prepare_env("tinydist", "", "tinypkg", cache=tmp_path / "cache", source=src)
    assert again.reused and (again.path, again.key, again.version) == (env.path, env.key, version)
    assert again.added_requirements == ["tinydep==0.3"] and len(calls) == 1


@pytest.mark.slow
def test_an_implied_requirement_is_tried_once_then_the_release_is_refused_in_one_line(
        tmp_path, offline_candidate, monkeypatch):
    """A release whose import lacks ``pkg_resources`` gets ``setuptools<82`` (IMPLIED) once; when
    that does not cure it, preparation stops with one line instead of trying again forever."""
    src, version = offline_candidate
    calls = []

    def inspect(python, dist, library, smoke=False):
        calls.append(python)
        if len(calls) > 2:
            raise AssertionError("the same implied requirement was applied again")
        return {"version": version, "available": False, "specs": [],
                "reason": "ModuleNotFoundError: No module named 'pkg_resources'"}

    monkeypatch.setattr(audit_env, "_inspect", inspect)
    with pytest.raises(AuditEnvError) as caught:
        prepare_env("tinydist", "", "tinypkg", cache=tmp_path / "cache", source=src)
    assert len(calls) == 2
    message = str(caught.value)
    assert message.startswith(f"tinydist@{src} does not work here (Python ") and "\n" not in message
    assert ": ModuleNotFoundError: No module named 'pkg_resources'" in message
    assert "setuptools<82" in message  # the pin it could not meet here, named
    assert not [d for d in (tmp_path / "cache" / "envs").iterdir() if d.is_dir()]  # nothing left behind
