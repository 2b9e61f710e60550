"""The docs name only what exists: README.md, every page of docs/ (architecture.md and the pages the
README links: cli, notebook, reports, statistics, measurement, plugins, models-and-data,
release-audits, ...), fidelity/README.md and benchmarks/README.md (both also pages of the site that
``make docs`` builds; links between pages are checked by that build, tests/test_docs_build.py).

What is checked, drawn from the text (no list to keep in step by hand):
- every path rooted at a folder of the repository (``harness/run/job.py``, ``fidelity/``) exists;
- every dotted ``attackaudit.x.y`` names a module file of the package (pyproject.toml's
  ``package-dir``), and a trailing non-module part (``attackaudit.load_run``) is an attribute of
  that module once imported;
- a path followed by a name (``harness/run/config.py`` ``resolve``, ``RunConfig.budget``) names
  something the file defines at top level (a class's attribute for a dotted name);
- a bare ``name.py`` on a line that names repository folders is a file directly in one of them
  (a table row `harness/run/` … `config.py`); on another line, in docs/architecture.md it is an
  error (write the path), in fidelity/README.md and benchmarks/README.md it is a file of that folder
  (its table of modules or scripts) or some file of the repository, in README.md and the other
  docs/ pages the user's own file (``my_attacks.py``: not checked).
"""
from __future__ import annotations

import ast
import importlib
import re
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: every page of docs/ (a new page is checked without being listed here), and the READMEs
DOCS = ("README.md", "fidelity/README.md", "benchmarks/README.md",
        *sorted(f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")))
#: the READMEs of a folder: a bare ``name.py`` in one is a file of that folder (or of the repository)
FOLDER_READMES = {"fidelity/README.md": "fidelity", "benchmarks/README.md": "benchmarks"}
#: the folders a repository path starts with; anything else (runs/, models/, ~/...) is the user's
REPO_FOLDERS = ("harness", "adapters", "fidelity", "reports", "tests", "benchmarks", "docs", "examples")
#: source folder of each dotted package, as pyproject.toml's package-dir maps them
PACKAGE_DIRS = {"attackaudit.adapters": "adapters", "attackaudit.fidelity": "fidelity",
                "attackaudit.reports": "reports", "attackaudit": "harness"}

PATH_RE = re.compile(r"(?<![\w/.~$-])(?:%s)/[\w./-]*" % "|".join(REPO_FOLDERS))
DOTTED_RE = re.compile(r"(?<![\w.])attackaudit(?:\.[A-Za-z_]\w*)+")
#: `path/file.py` `name`: a file and a name it defines
PAIR_RE = re.compile(r"`((?:%s)/[\w./-]+\.py)`\s+`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)`" % "|".join(REPO_FOLDERS))
BARE_RE = re.compile(r"(?<![\w/.~-])([A-Za-z_]\w*\.py)\b")


def doc_paths(text: str) -> set[str]:
    """Repository paths named in ``text``, without a sentence's trailing dot."""
    return {m.group(0).rstrip(".") for m in PATH_RE.finditer(text)}


def module_file(dotted: str) -> Path | None:
    """The source file of module ``dotted`` (a package's ``__init__.py``), or None."""
    for package, folder in PACKAGE_DIRS.items():  # longest package first: adapters before harness
        if dotted == package or dotted.startswith(package + "."):
            base = ROOT / folder
            rest = dotted[len(package) + 1:]
            if rest:
                base = base.joinpath(*rest.split("."))
                if base.with_suffix(".py").is_file():
                    return base.with_suffix(".py")
            return base / "__init__.py" if (base / "__init__.py").is_file() else None
    return None


def dotted_problem(dotted: str) -> str:
    """Why ``dotted`` (``attackaudit.x.y``) names nothing, or ""."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module_file(module) is not None:
            rest = parts[cut:]
            if not rest:
                return ""
            obj = importlib.import_module(module)
            for name in rest:
                if not hasattr(obj, name):
                    return f"{dotted}: {module} has no attribute {'.'.join(rest)}"
                obj = getattr(obj, name)
            return ""
    return f"{dotted}: no module file for it under {', '.join(PACKAGE_DIRS.values())}"


@lru_cache(maxsize=None)
def top_level_names(path: Path) -> dict[str, set[str]]:
    """Names ``path`` defines at top level (imports excluded) → the names each class defines in
    its body (empty for functions and constants)."""
    names: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = set()
        elif isinstance(node, ast.ClassDef):
            names[node.name] = {n for item in node.body for n in _defined(item)}
        else:
            names.update({n: set() for n in _defined(node)})
    return names


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []  # an import is not where a name lives: `job.py` `ROW_COLUMNS` is a drift


def pair_problem(path: str, name: str) -> str:
    """Why ``path`` does not define ``name`` (``Class.attribute`` allowed), or ""."""
    file = ROOT / path
    if not file.is_file():
        return ""  # reported as a missing path
    head, _, attribute = name.partition(".")
    names = top_level_names(file)
    if head not in names:
        return f"`{path}` `{name}`: {path} defines no {head}"
    if attribute and attribute not in names[head]:
        return f"`{path}` `{name}`: {head} in {path} defines no {attribute}"
    return ""


def bare_problem(doc: str, name: str, folders: list[str]) -> str:
    """Why a bare ``name.py`` in ``doc`` is wrong, or "". ``folders``: the repository folders its
    line names (a table row `harness/run/` … `config.py`): the file must be directly in one."""
    own = FOLDER_READMES.get(doc)
    if folders:
        if own:  # its own modules, beside a folder named for context
            folders = [*folders, f"{own}/"]
        if any((ROOT / folder / name).is_file() for folder in folders):
            return ""
        return f"{name}: not in {', '.join(folders)}"
    if doc == "docs/architecture.md":
        return f"{name}: write its path from the repository root"
    if own:
        if (ROOT / own / name).is_file():
            return ""
        if any(any((ROOT / folder).rglob(name)) for folder in REPO_FOLDERS):
            return ""
        return f"{name}: no such file in {own}/ or the repository"
    return ""  # README.md and the user's pages name the user's own files bare (my_attacks.py)


def doc_problems(doc: str, text: str) -> list[str]:
    """Every name in ``text`` (the content of ``doc``) that does not exist, one line each."""
    problems = []
    for path in sorted(doc_paths(text)):
        target = ROOT / path
        if not (target.is_dir() if path.endswith("/") else target.exists()):
            problems.append(f"{path}: no such {'folder' if path.endswith('/') else 'path'}")
    problems += [p for d in sorted({m.group(0) for m in DOTTED_RE.finditer(text)}) if (p := dotted_problem(d))]
    problems += [p for m in PAIR_RE.finditer(text) if (p := pair_problem(m.group(1), m.group(2)))]
    for line in text.splitlines():
        folders = sorted(p for p in doc_paths(line) if p.endswith("/"))
        problems += [p for n in sorted(set(BARE_RE.findall(line))) if (p := bare_problem(doc, n, folders))]
    return problems


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_and_module_a_doc_names_exists(doc: str) -> None:
    text = (ROOT / doc).read_text()
    assert doc_paths(text) or doc in FOLDER_READMES, f"{doc} names no repository path: the extractor is broken"
    assert doc_problems(doc, text) == []


@pytest.mark.parametrize("planted, expected", [
    ("see `harness/run/planner.py`.", "harness/run/planner.py: no such path"),
    ("in `harness/runs/`", "harness/runs/: no such folder"),
    ("`attackaudit.measure.trackers`", "attackaudit.measure.trackers: attackaudit.measure has no attribute trackers"),
    ("`attackaudit.nowhere.tracker`", "attackaudit.nowhere.tracker: attackaudit has no attribute nowhere.tracker"),
    ("`harness/run/job.py` `ROW_COLUMNS`", "`harness/run/job.py` `ROW_COLUMNS`: harness/run/job.py defines no ROW_COLUMNS"),
    ("`harness/run/config.py` `RunConfig.budgets`",
     "`harness/run/config.py` `RunConfig.budgets`: RunConfig in harness/run/config.py defines no budgets"),
    ("trust lives in `models.py`", "models.py: write its path from the repository root"),
])
def test_a_planted_wrong_name_fails(planted: str, expected: str) -> None:
    """Each check can fail: a wrong name planted into the real architecture doc is reported."""
    text = (ROOT / "docs/architecture.md").read_text() + "\n" + planted + "\n"
    assert doc_problems("docs/architecture.md", text) == [expected]


def test_fidelity_readme_bare_names_resolve_in_fidelity() -> None:
    assert bare_problem("fidelity/README.md", "stats.py", []) == ""
    assert bare_problem("fidelity/README.md", "milp.py", []) == "milp.py: no such file in fidelity/ or the repository"
    assert bare_problem("benchmarks/README.md", "overhead.py", []) == ""
    assert bare_problem("benchmarks/README.md", "speed.py", []) == "speed.py: no such file in benchmarks/ or the repository"


def test_every_docs_page_and_both_site_readmes_are_checked() -> None:
    """The pages the README links and the site's nav lists are all in DOCS, so a new page cannot
    escape the check."""
    assert {"docs/architecture.md", "docs/cli.md", "docs/measurement.md", "docs/statistics.md", "docs/plugins.md",
            "docs/release-audits.md", "docs/api.md"} <= set(DOCS)
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", (ROOT / "README.md").read_text()))
    assert linked and linked <= set(DOCS)
    assert set(FOLDER_READMES) <= set(DOCS)


def test_the_plugin_page_spells_the_attackspec_signature() -> None:
    """docs/plugins.md writes ``AttackSpec(...)`` out for plugin authors: every field, in order,
    with its default, as the dataclass has them (a removed or renamed field is caught here)."""
    import dataclasses

    from attackaudit.adapters import AttackSpec

    text = (ROOT / "docs/plugins.md").read_text()
    written = re.search(r"`AttackSpec\(([^`]*)\)`", text)
    assert written, "docs/plugins.md no longer writes out AttackSpec(...)"
    args = [a.strip() for a in " ".join(written.group(1).split()).split(",")]
    documented = [(a.partition("=")[0], ast.literal_eval(a.partition("=")[2]) if "=" in a else None) for a in args]
    actual = [(f.name, None if f.default is dataclasses.MISSING else f.default) for f in dataclasses.fields(AttackSpec)]
    assert documented == actual


def test_a_bare_name_is_looked_up_in_the_folders_its_line_names() -> None:
    assert doc_problems("docs/architecture.md", "| `harness/run/` | `config.py`, `job.py` |") == []
    assert doc_problems("docs/architecture.md", "| `harness/run/` | `tracker.py` |") == ["tracker.py: not in harness/run/"]


def test_path_extraction_stops_at_prose() -> None:
    text = "(`harness/run/job.py`), harness/measure/. and runs/demo/x.py and ~/docs/x and $OUT/tests/y"
    assert doc_paths(text) == {"harness/run/job.py", "harness/measure/"}
