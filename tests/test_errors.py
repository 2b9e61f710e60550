"""One base exception (issue 52): every error attackaudit raises on purpose is an AttackauditError
and reads as a usage error (one line, exit 2); anything else is our bug and reads as an internal
error (one line naming it attackaudit's fault and where the traceback is, exit 70)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from attackaudit import cli
from attackaudit.errors import AttackauditError, InputError

ROOT = Path(__file__).resolve().parents[1]


def test_every_exception_class_of_the_package_has_the_one_base():
    import importlib

    found = []
    for folder, package in (("harness", "attackaudit"), ("adapters", "attackaudit.adapters"),
                            ("fidelity", "attackaudit.fidelity"), ("reports", "attackaudit.reports")):
        for path in (ROOT / folder).rglob("*.py"):
            for name in re.findall(r"(?m)^class (\w+)\((?:[\w.]*(?:Error|Exception|Fault)[\w.]*)", path.read_text()):
                rel = path.relative_to(ROOT / folder).with_suffix("")
                module = ".".join([package, *[p for p in rel.parts if p != "__init__"]])
                found.append(getattr(importlib.import_module(module), name))
    assert len(found) >= 13
    assert [c.__name__ for c in found if not issubclass(c, AttackauditError)] == []


def test_input_errors_stay_value_errors_and_name_their_parameter():
    error = InputError("--samples must be positive, got 0", "samples")
    assert isinstance(error, ValueError) and error.parameter == "samples"


def test_the_commands_own_checks_name_their_parameter():
    from attackaudit.cli.report import report_formats
    from attackaudit.fidelity.eps_use import parse_eps

    for call, parameter in ((lambda: report_formats(["pdf"]), "format"), (lambda: parse_eps(["l3=0.1"]), "eps")):
        with pytest.raises(InputError) as caught:
            call()
        assert caught.value.parameter == parameter and "\n" not in str(caught.value)


def _command_raising(monkeypatch, exc: BaseException) -> None:
    def boom(args):
        raise exc
    monkeypatch.setattr(cli.models, "cmd_models", boom)


def test_an_attackaudit_error_is_a_one_line_usage_error(monkeypatch, capsys):
    _command_raising(monkeypatch, InputError("--thing 3: give 1 or 2", "thing"))
    assert cli.main(["models"]) == cli.EXIT_USAGE
    assert capsys.readouterr().err == "attackaudit: error: --thing 3: give 1 or 2\n"


@pytest.mark.parametrize("exc", [ValueError("bad shape"), KeyError("model"), FileNotFoundError("x.pt")])
def test_any_other_exception_is_an_internal_error_never_the_users(monkeypatch, capsys, exc):
    _command_raising(monkeypatch, exc)
    assert cli.main(["models"]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "internal error, attackaudit's fault" in err
    log = Path(re.search(r"the traceback is in (\S+):", err).group(1))
    assert type(exc).__name__ in log.read_text() and "Traceback" in log.read_text()
    log.unlink()


def test_an_error_attackaudit_raises_on_its_own_mistake_is_internal(monkeypatch, capsys):
    from attackaudit.adapters import SpecError

    _command_raising(monkeypatch, SpecError("adv_lib/apgd: declared norm l3"))
    assert cli.main(["models"]) == cli.EXIT_INTERNAL
    assert "internal error" in capsys.readouterr().err
