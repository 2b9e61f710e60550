"""Two candidates of one package in one environment cache (issue 51, item 12).

``attackaudit audit LIB@PATH`` builds an environment per candidate and caches it; an edited tree
must get its own environment, never the one built from another tree of the same package and
version. The cache key (``harness/audit/env.py`` ``prepare_env``: ``<dist>-c<content hash>-...``)
carries the candidate's content hash for that. Everything is real: two source trees copied from
the installed, pure-Python torchattacks (one edited), pip with the index off, the real
inspection (attackaudit's torchattacks adapter reads each candidate's catalogue) and each
environment's own interpreter. Without the content hash in the key the second candidate reuses
the first one's environment, and this test fails (checked by hand when it was written).
"""
from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from pathlib import Path

import pytest

from attackaudit.audit.env import content_hash, prepare_env

pytest.importorskip("torchattacks")
DIST = "torchattacks"
VERSION = importlib.metadata.version(DIST)


def candidate_tree(root: Path, marker: str | None) -> Path:
    """A source tree of torchattacks, copied from the installed package; ``marker`` edits it."""
    import torchattacks

    shutil.copytree(Path(torchattacks.__file__).parent, root / "torchattacks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{DIST}"\nversion = "{VERSION}"\n'
        '[tool.setuptools.packages.find]\ninclude = ["torchattacks*"]\n')
    if marker is not None:
        with open(root / "torchattacks" / "__init__.py", "a") as fh:
            fh.write(f"\nCANDIDATE_MARKER = {marker!r}\n")
    return root


def marker_in(python: str) -> str:
    """What ``torchattacks.CANDIDATE_MARKER`` is under an environment's own interpreter."""
    code = "import torchattacks; print(getattr(torchattacks, 'CANDIDATE_MARKER', 'none'))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_two_candidate_trees_of_one_package_get_two_environments(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTACKAUDIT_PIP_ARGS", "--no-index --no-build-isolation")
    cache = tmp_path / "cache"
    first = candidate_tree(tmp_path / "first", None)
    edited = candidate_tree(tmp_path / "edited", "edited tree")
    assert content_hash(first) != content_hash(edited)

    env_a = prepare_env(DIST, "", DIST, cache=cache, source=first)
    env_b = prepare_env(DIST, "", DIST, cache=cache, source=edited)
    assert not env_a.reused and not env_b.reused, "the edited tree reused the first tree's environment"
    assert env_a.path != env_b.path
    assert (env_a.content_hash, env_b.content_hash) == (content_hash(first), content_hash(edited))
    assert env_a.version == f"{VERSION}+c{content_hash(first)}"
    assert env_b.version == f"{VERSION}+c{content_hash(edited)}"
    assert env_a.specs and env_a.specs == env_b.specs  # the real adapter read both catalogues
    assert marker_in(env_a.python) == "none" and marker_in(env_b.python) == "edited tree"

    # each tree, asked again, gets its own environment back
    again_a = prepare_env(DIST, "", DIST, cache=cache, source=first)
    again_b = prepare_env(DIST, "", DIST, cache=cache, source=edited)
    assert again_a.reused and again_a.path == env_a.path
    assert again_b.reused and again_b.path == env_b.path
