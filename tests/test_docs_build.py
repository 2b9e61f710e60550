"""The documentation site (mkdocs.yml: the docs/ pages and the API reference generated from the
docstrings by mkdocstrings) builds as `make docs` builds it, `--strict`: no warning, no broken link
between pages, no cross-reference that resolves to nothing, every `::: object` of docs/api.md
rendered. Skipped where mkdocs is not installed (`make install` installs requirements-docs.txt).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs tools are not installed (pip install -r requirements-docs.txt)")
pytest.importorskip("mkdocstrings", reason="the docs tools are not installed (pip install -r requirements-docs.txt)")

ROOT = Path(__file__).resolve().parents[1]

#: mkdocs' own build, run in a child process as the `mkdocs build` command runs it; the log lines
#: go to stdout as "LEVEL - message". Arguments: mkdocs.yml, the site folder, [another docs folder]
BUILD = """
import logging, sys
from mkdocs.commands.build import build
from mkdocs.config import load_config

logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s - %(message)s")
overrides = {"docs_dir": sys.argv[3]} if len(sys.argv) > 3 else {}
config = load_config(sys.argv[1], site_dir=sys.argv[2], strict=True, **overrides)
config.plugins.on_startup(command="build", dirty=False)
try:
    build(config)
finally:
    config.plugins.on_shutdown()
"""


def mkdocs_build(site: Path, docs: Path | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-c", BUILD, str(ROOT / "mkdocs.yml"), str(site), *([str(docs)] if docs else [])]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True)


def warnings(result: subprocess.CompletedProcess) -> list[str]:
    """The build's WARNING and ERROR lines, from either stream."""
    return [line for line in (result.stdout + result.stderr).splitlines() if re.match(r"(WARNING|ERROR)\b", line)]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("docs") / "site"
    result = mkdocs_build(site)
    assert warnings(result) == [], result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    nav = re.findall(r"^\s+- [^:]+: ([\w-]+)\.md$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert {"index", "api", "cli", "measurement", "statistics", "plugins", "release-audits"} <= set(nav)
    for page in nav:
        built = site / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.is_file(), f"{page}.md was not built"


def test_every_api_entry_is_rendered_from_its_docstring(site: Path) -> None:
    """Each `::: attackaudit.x` of docs/api.md became a section with its docstring's first line."""
    html = (site / "api" / "index.html").read_text()
    entries = re.findall(r"^::: ([\w.]+)$", (ROOT / "docs" / "api.md").read_text(), re.M)
    assert len(entries) >= 10 and ":::" not in html
    for entry in entries:
        assert f'id="{entry}"' in html, f"{entry} has no section in the API reference"
    for phrase in ("Run every matching attack implementation on", "One implementation of one attack",
                   "All per-sample rows of a run", "called once per batch, returns its smallest adversarials"):
        assert phrase in html


def test_a_broken_link_or_reference_fails_the_build(tmp_path: Path) -> None:
    """The check can fail: a link to a page that does not exist and a cross-reference to an object
    that does not exist, planted into a copy of docs/, are each reported, and the build aborts."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("hooks", "__pycache__"))
    with (docs / "statistics.md").open("a") as page:
        page.write("\nSee [the glossary](glossary.md) and [`Result`][attackaudit.api.Results].\n")
    result = mkdocs_build(tmp_path / "site", docs)
    found = warnings(result)
    assert result.returncode != 0
    assert any("glossary.md" in line for line in found), found
    assert any("attackaudit.api.Results" in line for line in found), found
