"""Adapters: one module per attack library, each exposing ``specs() -> list[AttackSpec]``.

A library that is missing or fails to import is listed as unavailable with the reason; it never
raises ``ImportError`` at the caller. Third-party specs come from the entry-point group
``attackaudit.adapters`` (a callable returning specs) or from ``--plugin FILE`` (a module
defining ``specs()``). Both are validated when loaded (``spec_problem``, a name of their own,
unique keys): a broken ``--plugin`` file raises ``PluginError`` (one line), a broken entry point
is listed as unavailable with the reason, as a library that fails to import is.

A plugin file's identity is its ``PluginSource``: the SHA-256 of the file's bytes and the
version it records, so an edited plugin (or an upgraded library it wraps) gives new job ids.

A worker does not rebuild the catalogue to run one spec: ``SpecSource`` names where that spec's
library is defined (a built-in adapter module, one entry point, or one ``--plugin`` file) and
``SpecSource.load`` imports just that.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from attackaudit.errors import AttackauditError, InputError

from .spec import KINDS, NORMS, AttackFn, AttackKind, AttackSpec, FixedEpsAttack, MinimalAttack, spec_problem

__all__ = ["AttackSpec", "AttackFn", "AttackKind", "MinimalAttack", "FixedEpsAttack", "NORMS", "KINDS",
           "LibraryEntry", "BUILTIN_LIBRARIES", "ENTRY_POINT_GROUP", "load_library", "catalogue",
           "load_plugin_file", "PluginError", "PluginSource", "SpecError", "SpecSource", "spec_problem"]

#: built-in adapter module -> the distribution whose version is recorded
BUILTIN_LIBRARIES = {
    "adv_lib": "adv-lib",
    "foolbox": "foolbox",
    "art": "adversarial-robustness-toolbox",
    "torchattacks": "torchattacks",
    "cleverhans": "cleverhans",
}

#: the entry-point group third-party adapters register their ``specs`` callable under
ENTRY_POINT_GROUP = "attackaudit.adapters"

#: separates a plugin file's path from its fingerprint in a pinned reference (``PluginSource.ref``)
_PIN = "#fingerprint="


class PluginError(InputError):
    """A plugin file or entry point could not be loaded (one line, naming the file)."""


class SpecError(AttackauditError, ValueError):
    """A built-in adapter declared a spec that cannot run as declared (one line, naming the spec):
    our bug, raised when the catalogue is built rather than listed as an unavailable library."""

    ours = True


@dataclass(frozen=True)
class PluginSource:
    """The code behind a ``--plugin`` file's specs.

    ``version`` is what results record as ``library_version``: the installed version of the
    distribution named by the module's ``__distribution__``, else its ``__version__``, else
    ``"plugin"``. ``fingerprint`` covers the file's bytes, that version and the plugin's own
    ``__version__``: it changes when the file is edited or the wrapped library upgraded.
    """

    path: str
    sha256: str
    version: str
    plugin_version: str = ""

    @property
    def fingerprint(self) -> str:
        blob = f"{self.sha256}\n{self.version}\n{self.plugin_version}".encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def ref(self) -> str:
        """``PATH#fingerprint=F``: loading it fails over to "unavailable" if the file changed."""
        return f"{self.path}{_PIN}{self.fingerprint}"


@dataclass
class LibraryEntry:
    library: str
    version: str
    available: bool
    reason: str = ""
    specs: list[AttackSpec] = field(default_factory=list)
    plugin: PluginSource | None = None  # set for the specs of a --plugin file


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load_library(library: str) -> LibraryEntry:
    """Import one built-in adapter and collect its specs; failures to import become
    ``available=False``. A spec that fails ``spec_problem`` (e.g. params that do not bind to its
    function) raises SpecError naming it: a misdeclared attack must not pass for an absent one."""
    if library not in BUILTIN_LIBRARIES:
        raise KeyError(library)
    version = _version(BUILTIN_LIBRARIES[library])
    try:
        module = importlib.import_module(f"attackaudit.adapters.{library}")
        specs = list(module.specs())
    except Exception as exc:  # a broken third-party install is data, not a crash
        return LibraryEntry(library, version, False, _one_line(exc))
    problem = next((p for p in map(spec_problem, specs) if p), "")
    if problem:
        raise SpecError(f"adapter attackaudit.adapters.{library}: {problem}")
    return LibraryEntry(library, version, True, "", specs)


def _one_line(exc: BaseException) -> str:
    lines = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _validated_entries(specs: object, version: str, origin: str,
                       plugin: PluginSource | None = None) -> list[LibraryEntry]:
    """Group ``specs`` by library after checking each; raises PluginError naming ``origin``."""
    if isinstance(specs, (str, bytes)) or not isinstance(specs, Iterable):
        raise PluginError(f"{origin}: specs() returned {type(specs).__name__}, expected a list of AttackSpec")
    by_library: dict[str, LibraryEntry] = {}
    keys: set[str] = set()
    for spec in specs:
        if not isinstance(spec, AttackSpec):
            raise PluginError(f"{origin}: specs() returned a {type(spec).__name__}, expected AttackSpec")
        problem = spec_problem(spec)
        if problem:
            raise PluginError(f"{origin}: {problem}")
        if spec.library in BUILTIN_LIBRARIES:
            raise PluginError(f"{origin}: library name {spec.library!r} is a built-in library's; "
                              "give the plugin's specs a library name of their own")
        if spec.key in keys:
            raise PluginError(f"{origin}: two specs have the key {spec.key}; give one a variant= to tell them apart")
        keys.add(spec.key)
        entry = by_library.setdefault(spec.library, LibraryEntry(spec.library, version, True, plugin=plugin))
        entry.specs.append(spec)
    if not by_library:
        raise PluginError(f"{origin}: specs() returned no AttackSpec")
    return list(by_library.values())


def _split_pin(path: str | Path) -> tuple[Path, str]:
    text = str(path)
    if _PIN in text:
        text, _, fingerprint = text.rpartition(_PIN)
        return Path(text), fingerprint
    return Path(text), ""


def _recorded_version(module: object, origin: str) -> tuple[str, str]:
    """(library_version, the plugin's own __version__) of a loaded plugin module."""
    own = str(getattr(module, "__version__", "") or "")
    distribution = getattr(module, "__distribution__", None)
    if distribution:
        try:
            return importlib.metadata.version(str(distribution)), own
        except importlib.metadata.PackageNotFoundError:
            raise PluginError(f"{origin}: __distribution__ = {distribution!r} is not installed; "
                              "install it or correct the name") from None
    return own or "plugin", own


def load_plugin_file(path: str | Path) -> list[LibraryEntry]:
    """Load and validate ``specs()`` from a Python file; raises PluginError (one line).

    ``path`` may be pinned as ``PluginSource.ref``; if the file no longer has that fingerprint
    (edited while a run was going), its libraries are returned unavailable, with the reason.
    """
    path, pinned = _split_pin(path)
    origin = f"plugin file {path}"
    if not path.is_file():
        raise PluginError(f"{origin} does not exist; pass the path of a .py file defining specs()")
    source = path.read_bytes()
    name = f"attackaudit_plugin_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise PluginError(f"{origin} is not an importable Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise PluginError(f"{origin} failed to import: {_one_line(exc)}") from None
    if not callable(getattr(module, "specs", None)):
        raise PluginError(f"{origin} defines no specs() function")
    version, own = _recorded_version(module, origin)
    plugin = PluginSource(str(path.resolve()), hashlib.sha256(source).hexdigest(), version, own)
    try:
        specs = list(module.specs())
    except Exception as exc:  # ImportError of the wrapped library included: the user's to fix
        raise PluginError(f"{origin}: specs() raised {_one_line(exc)}") from None
    entries = _validated_entries(specs, version, origin, plugin)
    if pinned and pinned != plugin.fingerprint:
        reason = (f"{origin} changed since the run was planned (fingerprint {pinned}, now "
                  f"{plugin.fingerprint}); rerun the command")
        return [LibraryEntry(e.library, version, False, reason, plugin=plugin) for e in entries]
    return entries


def _entry_point_entries(name: str | None = None) -> list[LibraryEntry]:
    """Entry-point plugins (only the one called ``name`` when given), validated as plugin files
    are; a broken one is listed unavailable."""
    entries: list[LibraryEntry] = []
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    for ep in found if name is None else found.select(name=name):
        version = ep.dist.version if ep.dist is not None else "plugin"
        try:
            factory = ep.load()
            if not callable(factory):
                raise PluginError(f"entry point {ep.name} ({ep.value}) is not callable")
            try:
                specs = list(factory())
            except Exception as exc:
                raise PluginError(f"entry point {ep.name}: {ep.value}() raised {_one_line(exc)}") from None
            entries.extend(_validated_entries(specs, version, f"entry point {ep.name} ({ep.value})"))
        except Exception as exc:
            reason = str(exc) if isinstance(exc, PluginError) else _one_line(exc)
            entries.append(LibraryEntry(ep.name, version, False, reason))
    return entries


def catalogue(libraries: Sequence[str] | None = None, plugins: Sequence[str | Path] = ()) -> list[LibraryEntry]:
    """Every library's entry: built-ins, entry-point plugins and plugin files.

    ``libraries`` filters built-in and entry-point libraries by name; the files in ``plugins``
    were asked for by name already and are always kept. A plugin file that cannot be loaded, or
    whose library name another entry already uses, raises PluginError.
    """
    extra = _entry_point_entries()
    owners = {e.library: f"entry point {e.library}" for e in extra}
    for path in plugins:
        loaded = load_plugin_file(path)
        for e in loaded:
            if e.library in owners:
                raise PluginError(f"plugin file {_split_pin(path)[0]}: library name {e.library!r} is already "
                                  f"used by {owners[e.library]}; give the plugin's specs a library name of their own")
            owners[e.library] = f"plugin file {_split_pin(path)[0]}"
        extra.extend(loaded)
    # built-ins last: importing them takes seconds, and a broken plugin file is reported before
    entries = [load_library(name) for name in BUILTIN_LIBRARIES if libraries is None or name in libraries]
    entries.extend(e for e in extra if libraries is None or e.library in libraries or e.plugin is not None)
    return entries


@dataclass(frozen=True)
class SpecSource:
    """Where the specs of one library are defined, so a worker imports just that.

    ``plugin_file`` set: that ``--plugin`` file (pinned as ``PluginSource.ref``: an edited file
    loads as unavailable); else ``library`` is a built-in adapter (``attackaudit.adapters.<library>``)
    or the name of one entry point of ``ENTRY_POINT_GROUP``.
    """

    library: str
    plugin_file: str = ""

    @property
    def factory(self) -> str:
        """What ``load`` imports and calls, for messages: ``module:specs`` or ``plugin file PATH``."""
        if self.plugin_file:
            return f"plugin file {_split_pin(self.plugin_file)[0]}"
        if self.library in BUILTIN_LIBRARIES:
            return f"attackaudit.adapters.{self.library}:specs"
        return f"entry point {self.library}"

    def load(self) -> list[LibraryEntry]:
        """The entries this source defines (a plugin file may define several libraries); raises
        PluginError for a plugin file that no longer loads, SpecError for a misdeclared built-in."""
        if self.plugin_file:
            return load_plugin_file(self.plugin_file)
        if self.library in BUILTIN_LIBRARIES:
            return [load_library(self.library)]
        return _entry_point_entries(self.library)

    def find(self, key: str, entries: Sequence[LibraryEntry] | None = None) -> tuple[AttackSpec | None, str, str]:
        """(the spec with ``AttackSpec.key`` ``key``, its library version, "") or (None, version,
        the one-line reason it cannot be had); ``entries``: what ``load`` returned, if at hand."""
        entries = self.load() if entries is None else entries
        for entry in entries:
            if entry.library != self.library:
                continue
            if not entry.available:
                return None, entry.version, f"library {self.library} unavailable: {entry.reason}"
            for spec in entry.specs:
                if spec.key == key:
                    return spec, entry.version, ""
        version = next((e.version for e in entries if e.library == self.library), "")
        return None, version, f"attack {key} is not in the catalogue ({self.factory} does not define it)"
