"""The one base of attackaudit's own exceptions (torch-free, imports nothing).

Every error attackaudit raises on purpose derives from ``AttackauditError``: its message is one
line naming the culprit and the fix, and ``parameter`` names the flag, argument or input it
concerns (None when none does). The command line prints such an error as a usage error (one
line, exit 2); any other exception is attackaudit's own bug and is reported as an internal
error, never as the user's mistake (``attackaudit.cli``).

``InputError`` is a value the user gave that cannot be used; it is also a ``ValueError``, so the
notebook's callers and older code that catch ``ValueError`` keep catching it.
"""
from __future__ import annotations


class AttackauditError(Exception):
    """An error attackaudit raises on purpose: one line naming the culprit and the fix.

    ``ours``: True for the few raised on our own mistake (a built-in spec declared wrong), which
    the command line reports as an internal error although attackaudit raised it on purpose."""

    ours = False

    def __init__(self, message: str = "", parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class InputError(AttackauditError, ValueError):
    """A value the user gave (a flag, an argument, a file, a model) cannot be used."""
