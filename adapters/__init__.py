"""Adapters: one module per attack library, each exposing ``specs() -> list[AttackSpec]``.

A library that is missing or fails to import is listed as unavailable with the reason; it never
raises ``ImportError`` at the caller. Third-party specs come from the entry-point group
``attackaudit.adapters`` (a callable returning specs) or from ``--plugin FILE`` (a module
defining ``specs()``).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from .spec import KINDS, NORMS, AttackFn, AttackSpec

__all__ = ["AttackSpec", "AttackFn", "NORMS", "KINDS", "LibraryEntry", "BUILTIN_LIBRARIES",
           "load_library", "catalogue", "load_plugin_file", "PluginError"]

#: built-in adapter module -> the distribution whose version is recorded
BUILTIN_LIBRARIES = {
    "adv_lib": "adv-lib",
    "foolbox": "foolbox",
    "art": "adversarial-robustness-toolbox",
    "torchattacks": "torchattacks",
    "cleverhans": "cleverhans",
}


class PluginError(ValueError):
    """A plugin file or entry point could not be loaded."""


@dataclass
class LibraryEntry:
    library: str
    version: str
    available: bool
    reason: str = ""
    specs: list[AttackSpec] = field(default_factory=list)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load_library(library: str) -> LibraryEntry:
    """Import one built-in adapter and collect its specs; failures become ``available=False``."""
    if library not in BUILTIN_LIBRARIES:
        raise KeyError(library)
    version = _version(BUILTIN_LIBRARIES[library])
    try:
        module = importlib.import_module(f"attackaudit.adapters.{library}")
        specs = list(module.specs())
    except Exception as exc:  # a broken third-party install is data, not a crash
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return LibraryEntry(library, version, False, reason)
    return LibraryEntry(library, version, True, "", specs)


def _entries_from_specs(specs: Iterable[AttackSpec], version: str) -> list[LibraryEntry]:
    by_library: dict[str, LibraryEntry] = {}
    for spec in specs:
        if not isinstance(spec, AttackSpec):
            raise PluginError(f"plugin returned {type(spec).__name__}, expected AttackSpec")
        entry = by_library.setdefault(spec.library, LibraryEntry(spec.library, version, True))
        entry.specs.append(spec)
    return list(by_library.values())


def load_plugin_file(path: str | Path) -> list[LibraryEntry]:
    """Load ``specs()`` from a Python file; the module's ``__version__`` is the recorded version."""
    path = Path(path)
    if not path.is_file():
        raise PluginError(f"plugin file {path} does not exist; pass the path of a .py file defining specs()")
    name = f"attackaudit_plugin_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin file {path} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise PluginError(f"plugin file {path} failed to import: {type(exc).__name__}: {exc}") from None
    if not callable(getattr(module, "specs", None)):
        raise PluginError(f"plugin file {path} defines no specs() function")
    return _entries_from_specs(module.specs(), str(getattr(module, "__version__", "plugin")))


def _entry_point_entries() -> list[LibraryEntry]:
    entries: list[LibraryEntry] = []
    for ep in importlib.metadata.entry_points(group="attackaudit.adapters"):
        try:
            factory = ep.load()
            dist_version = ep.dist.version if ep.dist is not None else "plugin"
            entries.extend(_entries_from_specs(factory(), dist_version))
        except Exception as exc:
            entries.append(LibraryEntry(ep.name, "unknown", False, f"{type(exc).__name__}: {exc}".splitlines()[0]))
    return entries


def catalogue(libraries: Sequence[str] | None = None, plugins: Sequence[str | Path] = ()) -> list[LibraryEntry]:
    """Every library's entry: built-ins, entry-point plugins and plugin files.

    ``libraries`` filters by library name (built-in or plugin).
    """
    entries = [load_library(name) for name in BUILTIN_LIBRARIES if libraries is None or name in libraries]
    extra = _entry_point_entries()
    for path in plugins:
        extra.extend(load_plugin_file(path))
    entries.extend(e for e in extra if libraries is None or e.library in libraries)
    return entries
