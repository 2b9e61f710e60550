"""A table's twin columns (``base_model``, ``twin``) always name the model its ``model`` column
names (issue 52: a model reassigned alone left them naming the old one, and fresh clones failed on
it). ``harness/results/schema.py`` ``with_models`` is the one way to rename a table's models; every
place that renames them goes through it, checked here on the real functions (hand-made rows, a run
directory whose models were given names, the yardstick benchmark's seed twins), and a source check
keeps any other reassignment of a ``model`` column to tables that carry no twin columns."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity.synthetic import job_rows, table, table_from_arrays
from attackaudit.results.schema import SEED, SHIFT, SPLIT, Twin, parse_model_name, with_models
from attackaudit.results.store import jobs_dir, load_run, write_manifest

ROOT = Path(__file__).resolve().parents[1]


def stale(rows: pd.DataFrame) -> list[str]:
    """The models of ``rows`` whose twin columns name another model than the ``model`` column."""
    return sorted({str(m) for m, b, k in zip(rows["model"], rows["base_model"], rows["twin"])
                   if Twin(str(b), str(k)).name != str(m)})


def test_stale_sees_a_model_reassigned_alone():
    rows = job_rows("m~shift", "lib/a", "l2", [1.0, 2.0])
    assert not stale(rows)
    assert stale(rows.assign(model="n")) == ["n"]  # the mistake this file guards against is seen


def test_with_models_writes_the_model_and_its_twin_columns_together():
    rows = job_rows("m~shift", "lib/a", "l2", [1.0, 2.0, 3.0])
    renamed = with_models(rows, ["n", Twin("n", SPLIT), "p~seed"])
    assert list(renamed["model"]) == ["n", "n~split", "p~seed"]
    assert list(renamed["base_model"]) == ["n", "n", "p"] and list(renamed["twin"]) == ["", SPLIT, SEED]
    assert list(renamed.columns) == list(rows.columns) and not stale(renamed)


def test_hand_made_rows_carry_the_twin_columns_of_the_models_they_get():
    d = np.ones((3, 4))
    t = table_from_arrays({"lib/a": d, "lib/b": d}, ["m", "m~split", "m~shift"])
    assert not stale(t)
    assert set(zip(t["model"], t["twin"])) == {("m", ""), ("m~split", SPLIT), ("m~shift", SHIFT)}
    assert set(t["base_model"]) == {"m"}


def test_a_run_whose_models_have_names_reads_back_with_fresh_twin_columns(tmp_path):
    rows = table(job_rows("/models/net.pt", "lib/a", "l2", [1.0, 2.0]),
                 job_rows("/models/net.pt~shift", "lib/a", "l2", [1.0, 2.0]))
    jobs_dir(tmp_path).mkdir(parents=True)
    rows.to_parquet(jobs_dir(tmp_path) / "a.parquet")
    write_manifest(tmp_path, {"model_names": {"/models/net.pt": "mynet"}})
    loaded = load_run(tmp_path)
    assert sorted(set(loaded["model"])) == ["mynet", "mynet~shift"] and not stale(loaded)
    assert set(loaded["base_model"]) == {"mynet"}


def test_the_yardstick_benchmark_seed_twin_stands_in_for_its_model_with_no_twin_left():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import yardstick as bench
    t = table(job_rows("m", "lib/a", "l2", [1.0, 2.0]), job_rows("m~seed", "lib/a", "l2", [1.5, 2.5]),
              job_rows("m", "lib/b", "l2", [1.0, 2.0]), job_rows("m~shift", "lib/a", "l2", [1.0, 2.0]))
    (_, real), (_, other_seed) = bench.seeds(t)
    assert set(real["model"]) == {"m"} and not stale(real)
    assert set(other_seed["model"]) == {"m"} and set(other_seed["twin"]) == {""} and not stale(other_seed)
    mine = other_seed[other_seed["implementation"] == "lib/a"]
    assert list(mine["best_distance"]) == [1.5, 2.5]  # the seed twin's rows, in place of seed 0's


#: "folder/module.py:function" → why it may reassign a ``model`` column: the table it changes has
#: no twin columns. Any other reassignment fails (use ``schema.with_models``); an entry no longer
#: found fails too, so the list only shrinks
NOT_ROW_TABLES = {
    "fidelity/flags.py:_drop_twin_repeats": "findings (JOB_KEY, flag, evidence): a seed twin's moved to its model",
    "fidelity/yardstick.py:envelope_log_ratios": "per-image log ratios, given their model",
    "reports/text.py:pair_rows": "the alignment's pairs as printed ('*' shown as 'all models')",
    "reports/text.py:flag_rows": "the flags as printed ('*' shown as 'all models')",
    "benchmarks/yardstick.py:load_exact": "exact minima, their model named by the file",
    "benchmarks/defect_corpus.py:case_exact": "exact minima, their model named by the file",
    "benchmarks/real_noise.py:swap_seeds": "the noise corpus's own table (no base_model: its own base and twin "
                                           "columns), its model and twin swapped together",
}
FOLDERS = ("fidelity", "reports", "harness", "benchmarks")


def _sets_model(node: ast.AST) -> bool:
    """``x.assign(model=...)`` (unless it writes ``base_model`` and ``twin`` with it), ``x["model"] =
    ...`` or ``x.loc[..., "model"] = ...``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "assign":
        written = {k.arg for k in node.keywords}
        return "model" in written and not {"base_model", "twin"} <= written
    if isinstance(node, (ast.Assign, ast.AugAssign)):
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
            if isinstance(target, ast.Subscript):
                keys = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
                if any(isinstance(k, ast.Constant) and k.value == "model" for k in keys):
                    return True
    return False


def model_reassignments(source: str, module: str) -> set[str]:
    """"module:function" of each reassignment of a ``model`` column in ``source``."""
    found = set()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    for func in ast.walk(ast.parse(source, module)):
        if isinstance(func, kinds):  # a nested function's lines are its own
            inner = {id(n) for f in ast.walk(func) if f is not func and isinstance(f, kinds) for n in ast.walk(f)}
            if any(_sets_model(n) for n in ast.walk(func) if id(n) not in inner):
                found.add(f"{module}:{func.name}")
    return found


def test_no_model_column_is_reassigned_without_its_twin_columns():
    found = {hit for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))
             for hit in model_reassignments(p.read_text(), p.relative_to(ROOT).as_posix())}
    assert found - set(NOT_ROW_TABLES) == set(), "rename models with schema.with_models"
    assert set(NOT_ROW_TABLES) - found == set(), "no longer found: delete from NOT_ROW_TABLES"
    # the check itself sees each way of writing it
    planted = ("def f(t):\n    return t.assign(model='x')\n\ndef g(t):\n    t['model'] = 'x'\n\n"
               "def h(t):\n    t.loc[t.a, 'model'] = 'x'\n\ndef k(t):\n    return with_models(t, ['x'])\n\n"
               "def n(t):\n    return t.assign(model='x', base_model='x', twin='')\n")
    assert model_reassignments(planted, "m.py") == {"m.py:f", "m.py:g", "m.py:h"}


#: "folder/module.py:function" → why it may read a model name's ``~KIND``: a boundary where names
#: come in. Everything past them carries a ``Twin`` (``RunConfig.twins``, ``Job.twin``) or reads the
#: ``base_model`` and ``twin`` columns. An entry no longer found fails too, so the list only shrinks
NAME_READERS = {
    "harness/results/schema.py:parse_model_name": "the reader itself",
    "harness/results/schema.py:name": "the writer (Twin.name), which reads nothing",
    "harness/results/schema.py:with_twin_columns": "rows written before the twin columns, and tables made by hand",
    "harness/results/schema.py:with_models": "a table renamed by names (tests, benchmarks' hand tables)",
    "harness/run/config.py:twins": "the run's models: the command line, a TOML file, compare()",
    "harness/cli/exact.py:main": "attackaudit exact --model",
}
#: "folder/module.py:function" → why it calls ``with_twin_columns``: where a table enters a layer
TABLE_DOORS = {
    "harness/results/store.py:load_run": "a run directory read (rows written before the twin columns)",
    "fidelity/_table.py:prepare": "fidelity's door: a table given to the analysis (from disk or by hand)",
    "fidelity/_table.py:without_twins": "a table not yet prepared",
    "fidelity/synthetic.py:job_rows": "tables made by hand (tests, benchmarks)",
    "reports/tables.py:build": "the report's door",
    "benchmarks/real_noise.py:load": "the stored noise corpus",
    "benchmarks/yardstick.py:seeds": "the stored runs",
    "benchmarks/yardstick.py:images": "the stored runs",
}


def _functions_calling(source: str, module: str, names: set[str]) -> set[str]:
    """"module:function" of each function (the innermost) that names one of ``names`` or splits,
    partitions or searches a string by the twin separator "~"."""
    found = set()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)

    def reads(n: ast.AST) -> bool:
        if isinstance(n, ast.Name) and n.id in names or isinstance(n, ast.Attribute) and n.attr in names:
            return True
        return (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr in {"split", "rsplit", "partition", "rpartition", "contains", "endswith"}
                and any(isinstance(a, ast.Constant) and a.value == "~" for a in n.args))

    for func in ast.walk(ast.parse(source, module)):
        if isinstance(func, kinds):
            inner = {id(n) for f in ast.walk(func) if f is not func and isinstance(f, kinds) for n in ast.walk(f)}
            if any(reads(n) for n in ast.walk(func) if id(n) not in inner):
                found.add(f"{module}:{func.name}")
    return found


def _found(names: set[str]) -> set[str]:
    return {hit for folder in FOLDERS + ("adapters",) for p in sorted((ROOT / folder).rglob("*.py"))
            for hit in _functions_calling(p.read_text(), p.relative_to(ROOT).as_posix(), names)}


def test_a_model_name_is_read_only_where_names_come_in():
    """Issue 52: the "~" is read at the boundaries (``NAME_READERS``), never again by a later layer."""
    found = _found({"parse_model_name", "TWIN_SEP"})
    assert found - set(NAME_READERS) == set(), "take a Twin (RunConfig.twins, Job.twin) or the twin columns"
    assert set(NAME_READERS) - found == set(), "no longer found: delete from NAME_READERS"
    planted = ("def f(m):\n    return parse_model_name(m)\n\ndef g(m):\n    return m.split('~')[0]\n\n"
               "def h(t):\n    return t['model'].str.contains('~')\n\ndef k(m):\n    return m.split('/')\n")
    assert _functions_calling(planted, "m.py", {"parse_model_name"}) == {"m.py:f", "m.py:g", "m.py:h"}


def test_tables_get_their_twin_columns_at_the_doors():
    found = _found({"with_twin_columns"})
    assert found - set(TABLE_DOORS) == set(), "read the base_model and twin columns of a loaded or prepared table"
    assert set(TABLE_DOORS) - found == set(), "no longer found: delete from TABLE_DOORS"
