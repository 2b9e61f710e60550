"""Harness faults are ours: a worker that fails before its attack starts gives ``harness_error``
rows (never ``crash``, never a library's flag) with its own traceback in the job's log; when every
job fails so, ``compare`` and ``attackaudit run`` stop with one line naming the cause and the fix;
the next call runs those jobs again, and ``--retry crashed`` the library's crashes on request."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import attackaudit
from attackaudit import fidelity
from attackaudit.cli import build_parser
from attackaudit.fidelity.synthetic import job_rows, table
from attackaudit.reports import build
from attackaudit.run.faults import HarnessFault, fault_line, last_exception
from attackaudit.run.config import resolve
from attackaudit.sources.subset import digits
from attackaudit.sources.zoo import load_model

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = str(Path(__file__).parent / "plugins" / "misbehaving.py")

#: a data scientist's script: the zoo's tiny MLP under a class of its own, two libraries' PGD
SCRIPT = """\
import sys
import torch
from torch import nn
import attackaudit
from attackaudit.sources.subset import digits
from attackaudit.sources.zoo import load_model


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = load_model("digits-mlp-tiny")

    def forward(self, x):
        return self.inner(x)


def main():
    x, y = digits("test")
    try:
        r = attackaudit.compare(Net(), x, y, families="pgd", norms="linf", libraries=["adv_lib", "torchattacks"],
                                samples=4, budget=200, steps_scale=0.1, progress=False, workers=1, out=OUT)
    except Exception as exc:
        print(f"RAISED {type(exc).__name__}: {exc}")
        return
    print("STATUSES", sorted(set(r.rows["status"])))
"""


def _script(out: Path, guarded: bool) -> str:
    body = SCRIPT.replace("out=OUT", f"out={str(out)!r}")
    return body + ('if __name__ == "__main__":\n    main()\n' if guarded else "main()\n")


@pytest.mark.slow
def test_compare_from_standard_input_or_c_runs_like_a_notebook(tmp_path):
    """Workers are spawned without the caller's ``__main__`` (executors._main_left_behind): a
    script on standard input or ``-c`` has no file to re-run, and needs none (the model travels
    as a file, its class pickled by value). Before, both stopped on every job's harness_error."""
    for how, args, feed in (("stdin", ["-"], True), ("-c", ["-c"], False)):
        out = tmp_path / how
        script = "print('TOP LEVEL RAN')\n" + _script(out, guarded=False)
        fed = subprocess.run([sys.executable, *args, *([] if feed else [script])], input=script if feed else None,
                             capture_output=True, text=True, cwd=tmp_path, timeout=600)
        assert fed.returncode == 0, fed.stderr[-3000:]
        assert "RAISED" not in fed.stdout, fed.stdout
        assert "STATUSES ['ok']" in fed.stdout, fed.stdout + fed.stderr[-2000:]
        assert fed.stdout.count("TOP LEVEL RAN") == 1, fed.stdout  # no worker re-ran the caller's code
        rows = attackaudit.load_run(out)
        assert set(rows["status"]) == {"ok"} and rows["job_id"].nunique() == 2


def test_a_script_without_the_main_guard_is_not_re_run_by_the_workers(tmp_path):
    """A script without ``if __name__ == "__main__":`` once re-ran its top level (a user's
    training, ~60 s) in every worker before the bootstrapping error; now it runs once, and works."""
    out = tmp_path / "run"
    path = tmp_path / "train_and_audit.py"
    path.write_text("print('TOP LEVEL RAN')\n" + _script(out, guarded=False))
    ran = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.count("TOP LEVEL RAN") == 1 and "STATUSES ['ok']" in ran.stdout, ran.stdout + ran.stderr[-2000:]


def test_a_model_the_workers_cannot_unpickle_is_a_harness_error_with_the_fix(tmp_path, monkeypatch):
    """The model's class lives in a module the parent imported and the workers cannot (it is gone):
    each worker starts, fails to load the model, and the call stops with the module named."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "vanishing_net.py").write_text(textwrap.dedent("""\
        from torch import nn
        from attackaudit.sources.zoo import load_model

        class VanishingNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = load_model("digits-mlp-tiny")

            def forward(self, x):
                return self.inner(x)
        """))
    monkeypatch.syspath_prepend(str(package))
    import vanishing_net

    model = vanishing_net.VanishingNet()
    (package / "vanishing_net.py").unlink()  # cloudpickle names an importable class: the workers must import it
    x, y = digits("test")
    out = tmp_path / "run"
    with pytest.raises(HarnessFault) as err:
        attackaudit.compare(model, x, y, families="pgd", norms="linf", libraries="adv_lib", samples=4, budget=100,
                            steps_scale=0.1, progress=False, workers=1, out=out)
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("every job failed before its attack started: ")
    assert "the module 'vanishing_net' must import in the worker processes too" in message
    rows = attackaudit.load_run(out)
    assert set(rows["status"]) == {"harness_error"}
    log = next((out / "logs").glob("*.log")).read_text()
    assert "ModuleNotFoundError: No module named 'vanishing_net'" in log and "Traceback" in log


def test_harness_errors_are_never_a_library_flag_nor_a_result():
    rng = np.random.default_rng(0)
    d = rng.uniform(0.05, 0.3, 12)
    rows = table(job_rows("m", "a/pgd", "linf", d, family="pgd"),
                 job_rows("m", "b/pgd", "linf", d * 1.1, family="pgd"),
                 job_rows("m", "c/pgd", "linf", np.full(12, np.inf), family="pgd", status="harness_error",
                          error="worker died before its job started (exit code 1): FileNotFoundError: x"),
                 job_rows("m", "d/pgd", "linf", np.full(12, np.inf), family="pgd", status="crash", error="boom"))
    flags = fidelity.flags(rows)
    assert "c/pgd" not in set(flags["implementation"])       # no crash, no silent failure, nothing
    assert {("d/pgd", "crash")} <= set(zip(flags["implementation"], flags["flag"]))  # a library's crash is one
    board = fidelity.leaderboard(rows)
    assert "c/pgd" not in set(board["implementation"]) and "d/pgd" in set(board["implementation"])
    data = build(rows)  # the report says once that a job did not run, and never lists it as a crash
    assert [n for n in data.notes if n.startswith("1 job(s) did not run: their worker failed before the attack")]
    assert "c/pgd" not in set(data.crashes["implementation"]) and "d/pgd" in set(data.crashes["implementation"])


def test_retry_crashed_reruns_the_library_crashes_on_request(tmp_path):
    x, y = digits("test")
    model = load_model("digits-mlp-tiny")
    grid = dict(libraries="misbehaving", plugins=[PLUGIN], attacks=["misbehaving/raise", "misbehaving/fgsm"],
                samples=2, progress=False, workers=0, out=tmp_path / "r")

    def run_now(**extra) -> str:
        attackaudit.compare(model, x, y, **grid, **extra)
        return json.loads((tmp_path / "r" / "notebook.json").read_text())["summary"]

    assert "(2 run now, 0 already done)" in run_now()
    assert "(0 run now, 2 already done)" in run_now()              # a crash is a result: kept
    assert "(1 run now, 1 already done)" in run_now(retry="crashed")  # ... until asked again
    rows = attackaudit.load_run(tmp_path / "r")
    assert dict(rows.groupby("attack")["status"].first()) == {"fgsm": "ok", "raise": "crash"}
    # the command line's spelling reaches the same config field
    args = build_parser().parse_args(["run", "--out", str(tmp_path / "c"), "--retry", "crashed"])
    assert args.retry == "crashed" and resolve(None, {"out": args.out, "retry": args.retry}).retry == "crashed"
    with pytest.raises(ValueError, match="retry must be None or 'crashed', got 'all'"):
        attackaudit.compare(model, x, y, **{**grid, "out": tmp_path / "bad"}, retry="all")


def test_fault_lines_name_the_cause_and_the_fix():
    stdin = ("Traceback (most recent call last):\n  File \"spawn.py\", line 297, in _fixup_main_from_path\n"
             "FileNotFoundError: [Errno 2] No such file or directory: '/home/u/<stdin>'\n")
    assert fault_line("worker died (exit code 1)", stdin) == (
        "worker died (exit code 1): FileNotFoundError: [Errno 2] No such file or directory: '/home/u/<stdin>'; "
        "run this code from a file or a notebook: workers re-import __main__")
    guard = ("Traceback (most recent call last):\n  File \"spawn.py\", in _fixup_main_from_path\n"
             "RuntimeError: \n        An attempt has been made to start a new process before the\n"
             "        current process has finished its bootstrapping phase.\n\n        This probably means\n")
    assert last_exception(guard) == ("RuntimeError: An attempt has been made to start a new process before the "
                                     "current process has finished its bootstrapping phase")
    assert fault_line("w", guard).endswith('put the call under `if __name__ == "__main__":` (workers re-import '
                                           "your script)")
    assert fault_line("w", "ValueError: something else\n") == "w: ValueError: something else"  # no fix invented
