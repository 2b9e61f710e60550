"""Harness faults: a job whose worker failed before its attack started is ours, never the library's.

A worker process can die before it runs anything of the library: it cannot start (a worker is
spawned without the caller's ``__main__``, ``executors._main_left_behind``; the first two ``FIXES``
read tracebacks of runs that predate that, or of a spawn outside it), it cannot import the spec's module, unpickle or load the model, or read the data. Such a job
gets ``status = harness_error`` (``harness/results/schema.py``) with the worker's own traceback in
``logs/<job_id>.log``, and runs again on the next call of the same run. ``fault_line`` reads a
traceback into one line, the cause and (where it is known) the fix; ``HarnessFault`` is raised
when every job of a call failed so, since then nothing ran at all and a report would say nothing.
"""
from __future__ import annotations

import re
from attackaudit.errors import AttackauditError

#: (pattern in the traceback, the fix), the first that matches wins
FIXES: tuple[tuple[str, str], ...] = (
    # a script without the guard re-runs its own top level in the worker, which starts workers again
    (r"bootstrapping phase",
     'put the call under `if __name__ == "__main__":` (workers re-import your script)'),
    # spawn re-runs the parent's __main__ file in every worker: `python - < script.py` has none
    (r"_fixup_main_from_path[\s\S]*(?:FileNotFoundError|No such file)|No such file or directory: '[^']*<stdin>'",
     "run this code from a file or a notebook: workers re-import __main__"),
    (r"No module named '([^']+)'",
     "the module '{0}' must import in the worker processes too: install it there, or put its folder on "
     "PYTHONPATH"),
    (r"Can't get attribute '([^']+)' on <module '__main__'",
     "define the model's class {0} in a module the workers can import, or in a notebook"),
)


class HarnessFault(AttackauditError, RuntimeError):
    """Every job of a call failed before its attack started, the same way; the message is one line
    (the cause, the fix, where the traceback is)."""


def last_exception(traceback_text: str) -> str:
    """The traceback's final ``Type: message`` line (the one that says what went wrong; a message
    that starts on the next lines is joined to it, up to its first sentence), or ''."""
    lines = [ln.strip() for ln in traceback_text.strip().splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Fault)\b:?", lines[i]):
            text = lines[i]
            if text.endswith(":"):  # a multi-line message (multiprocessing's RuntimeError)
                text = f"{text} {' '.join(lines[i + 1:i + 3])}"
                text = text.split(". ")[0].rstrip(".")
            return text[:300]
    return lines[-1][:300] if lines else ""


def fix_for(traceback_text: str) -> str:
    """The known fix for a traceback, or '' when none is known."""
    for pattern, fix in FIXES:
        found = re.search(pattern, traceback_text)
        if found:
            return fix.format(*found.groups())
    return ""


def fault_line(what: str, traceback_text: str) -> str:
    """``what`` (e.g. "worker died before its job started (exit code 1)"), the traceback's last
    exception and the fix, as one line."""
    cause = last_exception(traceback_text)
    fix = fix_for(traceback_text)
    return what + (f": {cause}" if cause else "") + (f"; {fix}" if fix else "")


def all_alike(results: list[dict]) -> str:
    """When every result of ``results`` (``{"status", "error"}``, one per job run in a call) is a
    ``harness_error``, the most common error line; else ''."""
    if not results or any(r.get("status") != "harness_error" for r in results):
        return ""
    errors = [str(r.get("error", "")) for r in results]
    return max(dict.fromkeys(errors), key=errors.count)
