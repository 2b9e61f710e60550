"""`make mutants`: mutmut on one area of the package at a time, and the score of each file.

mutmut 3 names a mutant after its file's path (``harness/measure/tracker.py`` would be
``harness.measure.tracker``) and switches it on only where the running module's ``__module__``
has that name; the tests import ``attackaudit.measure.tracker``. So each area runs in its own
work directory, ``mutants/<area>/``, that holds the package laid out as installed (pyproject.toml's
``package-dir``: ``harness/`` as ``attackaudit/``, ``fidelity/`` as ``attackaudit/fidelity/``, ...),
the tests and a pyproject.toml made from the repository's ``[tool.mutmut]`` and the area's table
``[tool.mutmut.areas.<area>]`` (``only_mutate``, ``do_not_mutate``, ``tests``). mutmut copies that
tree into ``mutants/<area>/mutants/`` and puts it first on ``sys.path``; PYTHONPATH points there
too, so tests that start a child process run the mutant in the child as well.

Usage (from the repository root; `make mutants` runs every area):
    python tests/run_mutants.py [--area NAME ...] [--max-children N] [--time-limit S] [--score-only]
    python tests/run_mutants.py --area NAME --check MUTANT -- tests/test_x.py -k name   # one mutant, by hand

Results are kept in ``mutants/<area>/`` (a rerun tests only new or changed functions). The score
of a file is (killed + timed out) / (mutants - equivalent ones): a mutant no test reaches counts
as not killed. The equivalent mutants are the ones docs/testing.md names under "Equivalent
mutants".
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "mutants"
#: mutmut's exit codes per mutant, grouped as the score counts them (mutmut/stats.py)
KILLED = {1, 3}
TIMEOUT = {24, -24, 152, 255, 36}
SURVIVED = {0}
NO_TESTS = {5, 33}
DOCS = ROOT / "docs" / "testing.md"


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def areas(project: dict) -> dict[str, dict]:
    """``[tool.mutmut.areas]``: area name → {only_mutate, do_not_mutate, tests}."""
    return project["tool"]["mutmut"]["areas"]


def ensure_mutmut(project: dict) -> None:
    """Install the mutmut pinned in the ``dev`` extra when it is not importable."""
    if importlib.util.find_spec("mutmut") is not None:
        return
    pins = [p for p in project["project"]["optional-dependencies"]["dev"] if p.startswith("mutmut")]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *pins], check=True)


def lay_out_package(work: Path, project: dict) -> None:
    """``work/attackaudit``: each source folder copied where ``package-dir`` installs it (file times
    kept, so mutmut tests again only the functions that changed)."""
    package = work / "attackaudit"
    if package.exists():
        shutil.rmtree(package)
    dirs = project["tool"]["setuptools"]["package-dir"]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name, folder in sorted(dirs.items(), key=lambda item: item[0].count(".")):  # the parent first
        target = work / Path(*name.split("."))
        shutil.copytree(ROOT / folder, target, ignore=ignore, dirs_exist_ok=True)
    for name, folder in dirs.items():  # a sub-package's source folder is not part of the parent's
        nested = work / Path(*name.split("."))
        stray = package / folder
        if stray.exists() and stray != nested:
            shutil.rmtree(stray)


def toml_value(value: object) -> str:
    """A TOML literal for the str, bool, number and list values of ``[tool.mutmut]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML literal for {value!r}")


def area_pyproject(project: dict, area: dict) -> str:
    """The work directory's pyproject.toml: ``[tool.mutmut]`` with the area's files and tests, and
    the repository's pytest options."""
    mutmut = {k: v for k, v in project["tool"]["mutmut"].items() if k != "areas"}
    mutmut["only_mutate"] = list(area["only_mutate"])
    mutmut["do_not_mutate"] = list(area.get("do_not_mutate", []))
    mutmut["pytest_add_cli_args_test_selection"] = list(area["tests"])
    lines = ["[tool.mutmut]"] + [f"{k} = {toml_value(v)}" for k, v in mutmut.items()]
    lines += ["", "[tool.pytest.ini_options]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in project["tool"]["pytest"]["ini_options"].items()]
    return "\n".join(lines) + "\n"


def prepare(name: str, project: dict) -> Path:
    """``mutants/<name>/``, ready for ``mutmut run``."""
    work = WORK / name
    work.mkdir(parents=True, exist_ok=True)
    lay_out_package(work, project)
    tests = work / "tests"
    if tests.exists():
        shutil.rmtree(tests)
    shutil.copytree(ROOT / "tests", tests, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    for extra in project["tool"]["mutmut"].get("also_copy", []):  # what the tests read besides the package
        link = work / extra.rstrip("/")
        if not link.is_symlink():
            link.symlink_to(ROOT / extra.rstrip("/"))
    (work / "pyproject.toml").write_text(area_pyproject(project, areas(project)[name]))
    return work


def run_area(work: Path, max_children: int, time_limit: float, names: list[str] = ()) -> tuple[int, float]:
    """``mutmut run`` in ``work`` (only the mutants ``names``, tested again, when given), stopped
    (SIGINT, then SIGKILL) after ``time_limit`` seconds; (its exit code, seconds taken)."""
    # made before mutmut starts: a sys.path entry that did not exist at start-up stays cached as
    # "nothing here", and every import would fall through to the installed, unmutated package
    (work / "mutants").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(work / "mutants")}
    mutmut = Path(sys.executable).with_name("mutmut")
    command = ["timeout", "-s", "INT", "-k", "60", str(int(time_limit)),
               str(mutmut), "run", "--max-children", str(max_children), *names]
    start = time.monotonic()
    code = subprocess.run(command, cwd=work, env=env).returncode
    return code, time.monotonic() - start


def generate(work: Path) -> None:
    """Write the area's mutated tree into ``work/mutants/`` with mutmut's own generator (no test
    runs), for ``check``."""
    code = ("import os, mutmut.__main__ as m\n"
            "from mutmut.mutation.trampoline import set_mutant_under_test\n"
            "set_mutant_under_test('mutant_generation')\n"
            "os.makedirs('mutants', exist_ok=True)\n"
            "m.copy_src_dir(); m.copy_also_copy_files(); m.setup_source_paths(); m.create_mutants(1)\n")
    subprocess.run([sys.executable, "-c", code], cwd=work, check=True, stdout=subprocess.DEVNULL)


def check(work: Path, mutant: str, pytest_args: list[str]) -> int:
    """Run ``pytest pytest_args`` in ``work`` with ``mutant`` switched on (``MUTANT_UNDER_TEST``),
    as mutmut runs a test against it; pytest's exit code (0: the mutant survived these tests)."""
    name = mutant if mutant.startswith("attackaudit.") else f"attackaudit.{mutant}"
    env = {**os.environ, "PYTHONPATH": str(work / "mutants"), "MUTANT_UNDER_TEST": name}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                           "--hypothesis-seed=0", *pytest_args], cwd=work / "mutants", env=env).returncode


def equivalent_mutants(path: Path = DOCS) -> set[str]:
    """The mutant names docs/testing.md lists under its "Equivalent mutants" heading (written there
    without the ``attackaudit.`` prefix, which the docs' own test would read as a module path)."""
    if not path.is_file():
        return set()
    text = path.read_text()
    match = re.search(r"^## Equivalent mutants\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    names = re.findall(r"`(?:attackaudit\.)?([\w.]+\.x[^`\s]*__mutmut_\d+)`", match.group(1)) if match else []
    return {f"attackaudit.{name}" for name in names}


def results(work: Path) -> dict[str, dict[str, int | None]]:
    """Module path (``attackaudit/measure/tracker.py``) → mutant name → mutmut's exit code."""
    found = {}
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        rel = meta.relative_to(work / "mutants").as_posix().removesuffix(".meta")
        found[rel] = json.loads(meta.read_text())["exit_code_by_key"]
    return found


def score(codes: dict[str, int | None], equivalent: set[str]) -> dict[str, float | int]:
    """The counts of one file's mutants, its score over the tested mutants that are not equivalent,
    and its raw score over all tested ones (None: no mutant counted)."""
    counted = {k: c for k, c in codes.items() if k not in equivalent}
    tally = Counter("killed" if c in KILLED else "timeout" if c in TIMEOUT else "survived" if c in SURVIVED
                    else "no tests" if c in NO_TESTS else "not run" if c is None else "other"
                    for c in counted.values())
    ran = len(counted) - tally["not run"]
    tested = ran + sum(1 for k, c in codes.items() if k in equivalent and c is not None)
    killed = tally["killed"] + tally["timeout"]
    return {"mutants": len(codes), "equivalent": len(codes) - len(counted), **tally,
            "score": killed / ran if ran else None, "raw": killed / tested if tested else None}


def report(name: str, work: Path, equivalent: set[str]) -> list[str]:
    """Print one area's table (a line per file, then the area's total); return its survivors."""
    table = results(work)
    columns = ["mutants", "equivalent", "killed", "timeout", "survived", "no tests", "not run", "other"]
    print(f"\narea {name}")
    print(f"  {'file':46s} " + " ".join(f"{c:>10s}" for c in columns) + "      score  raw score")
    for path, codes in [*table.items(), ("total", {k: c for codes in table.values() for k, c in codes.items()})]:
        s = score(codes, equivalent)
        shown = " ".join("    -  " if s[k] is None else f"{100 * s[k]:5.1f}%" for k in ("score", "raw"))
        print(f"  {path:46s} " + " ".join(f"{s.get(c, 0):>10d}" for c in columns) + f"     {shown}")
    merged = {k: c for codes in table.values() for k, c in codes.items()}
    return sorted(k for k, c in merged.items() if k not in equivalent and not_killed(c))


def mutant_names(work: Path, area: dict) -> list[str]:
    """Every mutant mutmut makes of the area's files in ``work`` (its own generator, without
    running anything), so that a sample can be drawn before the first run."""
    from mutmut.mutation.file_mutation import mutate_file_contents
    from mutmut.utils.format_utils import get_mutant_name

    names = []
    for path in sorted((work / "attackaudit").rglob("*.py")):
        rel = path.relative_to(work)
        if any(fnmatch.fnmatch(str(rel), p) for p in area["only_mutate"]) and not any(
                fnmatch.fnmatch(str(rel), p) for p in area.get("do_not_mutate", [])):
            names += [get_mutant_name(rel, n) for n in mutate_file_contents(str(rel), path.read_text()).mutant_names]
    return names


def sampled(name: str, share: float) -> bool:
    """Whether mutant ``name`` is in the deterministic ``share`` of mutants (a hash of its name)."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) < share * 16 ** 8


def not_killed(code: int | None) -> bool:
    """Whether a tested mutant's exit code says no test failed on it (survived, or no test reached it)."""
    return code is not None and code not in KILLED and code not in TIMEOUT


def main(argv: list[str] | None = None) -> int:
    project = pyproject()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--area", action="append", choices=sorted(areas(project)),
                        help="an area of [tool.mutmut.areas] (repeatable; default: all)")
    parser.add_argument("--max-children", type=int, default=1, help="mutants tested at once (default 1)")
    parser.add_argument("--time-limit", type=float, default=1200.0,
                        help="seconds one area's run may take before it is stopped (default 1200; a rerun resumes)")
    parser.add_argument("--score-only", action="store_true", help="print the kept results, run nothing")
    parser.add_argument("--survivors", action="store_true", help="also list the mutants no test killed")
    parser.add_argument("--sample", type=float, default=1.0,
                        help="test only this share of the mutants not tested yet, chosen by a hash of their "
                             "names (the same ones on every machine; the rest stay 'not run')")
    parser.add_argument("--retest", action="store_true",
                        help="with --sample: test the whole sample, tested before or not (after the area's tests "
                             "list changed, mutmut forgets its kept verdicts while this script still reads them)")
    parser.add_argument("--rerun-survivors", action="store_true",
                        help="test again only the mutants no test killed (after adding tests; mutmut keeps their "
                             "verdicts otherwise)")
    parser.add_argument("--check", metavar="MUTANT",
                        help="run the pytest arguments after -- with this one mutant switched on (the area's "
                             "mutated tree is generated first): exit 0 if it survived them, 1 if a test "
                             "failed, 2 if pytest could not run them")
    args, pytest_args = parser.parse_known_args(argv)
    pytest_args = [a for a in pytest_args if a != "--"]
    if args.check:
        if not args.area or len(args.area) != 1:
            parser.error("--check needs exactly one --area (the one whose files the mutant is in)")
        ensure_mutmut(project)
        work = prepare(args.area[0], project)
        generate(work)
        code = check(work, args.check, pytest_args or ["tests"])
        if code not in (0, 1):  # 5: no test collected, 2-4: pytest could not run them
            print(f"{args.check}: pytest exited {code}, which says nothing about the mutant")
            return 2
        print(f"{args.check}: {'survived' if code == 0 else 'killed'} (pytest exit {code})")
        return code
    if not args.score_only:
        ensure_mutmut(project)
    equivalent = equivalent_mutants()
    for name in args.area or sorted(areas(project)):
        work = WORK / name
        if not args.score_only:
            work = prepare(name, project)
            done = {k: c for codes in results(work).values() for k, c in codes.items()}
            names = [k for k, c in done.items() if not_killed(c) and k not in equivalent] if args.rerun_survivors else []
            if args.sample < 1:
                names += [k for k in mutant_names(work, areas(project)[name])
                          if (args.retest or done.get(k) is None) and sampled(k, args.sample)]
            if (args.rerun_survivors or args.sample < 1) and not names:
                print(f"area {name}: no mutant to test")
                continue
            code, seconds = run_area(work, args.max_children, args.time_limit, names)
            print(f"area {name}: mutmut exited {code} after {seconds / 60:.1f} min")
        survivors = report(name, work, equivalent)
        if args.survivors:
            print("\n".join(f"    not killed: {s}" for s in survivors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
