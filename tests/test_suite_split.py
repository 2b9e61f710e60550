"""`make test` leaves the tests marked ``slow`` out (issue 49 item 5: at most 8 minutes), and CI runs
them after it: no test is dropped from CI, and no area is left to the opt-in run alone."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _is_slow_mark(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "slow" and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark")


def slow_and_quick(path: Path) -> tuple[set[str], set[str]]:
    """(tests with a slow mark on the function or on one of its parameter sets, tests without one)
    of one test file, by name."""
    slow, quick = set(), set()
    for node in ast.parse(path.read_text()).body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        marked = any(_is_slow_mark(n) for d in node.decorator_list for n in ast.walk(d))
        whole = any(_is_slow_mark(d) for d in node.decorator_list)
        (slow if marked else quick).add(node.name)
        if marked and not whole:  # some parameter sets only: the others stay in make test
            quick.add(node.name)
    return slow, quick


def make_recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert match, f"no {target} target in the Makefile"
    return match.group(1)


def test_make_test_leaves_the_slow_tests_out_and_make_test_slow_runs_them():
    assert '-m "not slow"' in make_recipe("test")
    assert "-m slow" in make_recipe("test-slow")


def test_ci_runs_make_test_then_the_slow_tests():
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert commands.index("make test") < commands.index("make test-slow")


def test_every_file_with_slow_tests_keeps_quick_ones_and_the_slow_set_stays_small():
    files = sorted((ROOT / "tests").glob("test_*.py"))
    split = {p.name: slow_and_quick(p) for p in files}
    with_slow = {name: s for name, s in split.items() if s[0]}
    assert with_slow, "no slow test found: the parser lost the marks"
    for name, (slow, quick) in with_slow.items():
        assert quick, f"{name}: every test is slow, so make test checks nothing of it"
    total = sum(len(s) + len(q) for s, q in split.values())
    assert sum(len(s) for s, _ in split.values()) <= 0.02 * total


def test_the_parser_sees_a_whole_test_and_a_parameter_set_marked(tmp_path):
    f = tmp_path / "test_x.py"
    f.write_text("import pytest\n\n@pytest.mark.slow\ndef test_a():\n    pass\n\n"
                 "@pytest.mark.parametrize('n', [1, pytest.param(3, marks=pytest.mark.slow)])\n"
                 "def test_b(n):\n    pass\n\ndef test_c():\n    pass\n")
    assert slow_and_quick(f) == ({"test_a", "test_b"}, {"test_b", "test_c"})
