"""Which distributions a release's overlay needs beside the release, and which pins go unmet.

Part of the release audit (``harness/audit/env.py`` builds the overlays). Every requirement the
release declares (markers evaluated here, its ``pytorch`` extra included: the adapters drive the
libraries' PyTorch side), and recursively theirs, is checked against the overlay and then the
project's installed distributions; one the project does not satisfy is installed into the overlay
(the newest release matching it, wheels preferred), shadowing the project's copy there only.

A pin that cannot be met is tried, not refused: a requirement on ``KEPT`` (the project's torch,
torchvision and numpy: every compiled package of the project is built against them), one that
no release installs on this Python, or one whose install does not import beside the kept stack
(``Resolver.drop``) leaves the project's copy in use and becomes an ``unmet`` record; the release
is then run with it, and the audit stops only when the release does not import or none of its
attacks runs (``audit_env``). Requirements the metadata cannot tell (``IMPLIED``: a release
importing ``pkg_resources`` while declaring plain ``setuptools``) are added when the release's
import fails with their signature.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from attackaudit.errors import InputError

try:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name
except ImportError:  # pragma: no cover - pip always vendors packaging
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.utils import canonicalize_name

class AuditEnvError(InputError):
    """A release's environment could not be prepared: one line naming the release and why."""



def unmet_phrase(record: dict) -> str:
    """``pin not met: scikit-learn<1.2.0 (why); the project's scikit-learn 1.7.2 is used``."""
    use = (f"the project's {Requirement(record['requirement'].split(' ')[0]).name} {record['project_version']} is used"
           if record.get("project_version") else "the project has none")
    return f"pin not met: {record['requirement']} ({record['why']}); {use}"


def resolution_phrase(record: dict) -> str:
    """``shadowed setuptools 84.2.1 -> 81.0.0 (why)`` or ``added mnist 0.2.2 (why)``."""
    if record.get("project_version"):
        return f"shadowed {record['name']} {record['project_version']} -> {record['version']} ({record['why']})"
    return f"added {record['name']} {record['version']} ({record['why']})"



def pip(args: list[str]) -> subprocess.CompletedProcess:
    """The running interpreter's pip, writing only into ``--target`` (the base is never modified);
    ``$ATTACKAUDIT_PIP_ARGS`` (e.g. ``--no-index --find-links DIR``) joins every install."""
    extra = shlex.split(os.environ.get("ATTACKAUDIT_PIP_ARGS", "")) if args[:1] == ["install"] else []
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args, *extra],
                          capture_output=True, text=True)


def pip_error(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:") and "ignored" not in ln]
    return (errors[-1] if errors else (lines[-1] if lines else "no output")).removeprefix("ERROR: ")


def not_found(cause: str) -> bool:
    return "No matching distribution" in cause or "Could not find a version" in cause



#: the project's compiled stack, never replaced in an overlay (see the module docstring)
KEPT = ("torch", "torchvision", "numpy")
#: extras of a release the audit needs: the adapters drive the libraries' PyTorch side
EXTRAS = ("pytorch",)
#: (signature in the release's import error, requirement that cures it, why): what metadata cannot say
IMPLIED = [(re.compile(r"No module named 'pkg_resources'"), "setuptools<82",
            "the release imports pkg_resources, which setuptools 82 and later no longer ship")]


def project_version(name: str) -> str | None:
    """The version of ``name`` in the running (project) environment, None if absent."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def requirements_of(dist: importlib.metadata.Distribution, extras=()) -> list[Requirement]:
    """``dist``'s declared requirements whose markers hold here, with those of ``extras`` it provides."""
    provided = {canonicalize_name(e) for e in dist.metadata.get_all("Provides-Extra") or []}
    wanted = [""] + [e for e in extras if canonicalize_name(e) in provided]
    out = []
    for text in dist.requires or []:
        try:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in wanted):
                out.append(req)
        except Exception:  # a malformed line in some installed package's metadata: not ours to judge
            continue
    return out


def shown(req: Requirement) -> str:
    """``torchvision==0.3.0 (its pytorch extra)``: a requirement as a user reads it."""
    text = f"{req.name}{req.specifier}"
    extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)", str(req.marker or ""))
    return f"{text} (its {extra.group(1)} extra)" if extra else text


def top_level(dist: importlib.metadata.Distribution) -> list[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return [t for t in text.split() if t.isidentifier()]
    names = set()
    for f in dist.files or []:
        head = f.parts[0]
        if head.endswith((".dist-info", ".data", ".pth")) or head in ("bin", "..", "__pycache__"):
            continue
        names.add(head.removesuffix(".py"))
    return sorted(n for n in names if n.isidentifier())


class Resolver:
    """Installs into the overlay ``sp`` what the release needs and the project lacks (see the
    module docstring); ``records`` says what and why, ``unmet`` which pins the overlay could not
    meet (the project's copy is used instead: ``requirement``, ``required_by``,
    ``project_version``, ``why``), ``consulted`` every project version a requirement was checked
    against (the cache key)."""

    def __init__(self, sp: Path, release: str):
        self.sp, self.release = sp, release
        self.records: list[dict] = []
        self.unmet: list[dict] = []
        self.consulted: dict[str, str | None] = {}
        self.warnings: list[str] = []

    def overlay(self) -> dict[str, importlib.metadata.Distribution]:
        return {canonicalize_name(d.metadata["Name"]): d for d in importlib.metadata.distributions(path=[str(self.sp)])}

    def run(self, needs: list[tuple[Requirement, str, str | None]]) -> None:
        """Resolve ``needs`` ((requirement, who requires it, why if not the project's version)),
        then the requirements of what that installs, until nothing is missing."""
        while needs:
            batch: dict[str, dict] = {}
            overlay = self.overlay()
            for req, by, why in needs:
                name = canonicalize_name(req.name)
                if name in overlay:
                    here = overlay[name].version
                    if not req.specifier.contains(here, prereleases=True):
                        self._unmet(shown(req), [by], here, f"its environment already holds {name} {here} for "
                                                            "another requirement; no single one satisfies both")
                    continue
                have = project_version(name)
                self.consulted[name] = have
                if have is not None and req.specifier.contains(have, prereleases=True):
                    continue
                if name in KEPT:
                    self._unmet(shown(req), [by], have, f"it conflicts with the project's {name} "
                                f"{have or '(not installed)'}, which an audit keeps (as {', '.join(KEPT)})")
                    continue
                entry = batch.setdefault(name, {"specifier": SpecifierSet(), "by": [], "extras": set(), "why": [],
                                                "have": have})
                entry["specifier"] &= req.specifier
                entry["by"].append(by)
                entry["extras"] |= req.extras
                entry["why"].append(why or (f"{by} requires {shown(req)}; the project "
                                            + ("lacks it" if have is None else f"has {have}")))
            if not batch:
                return
            installed = self._install(batch)
            overlay, needs = self.overlay(), []
            for name, e in batch.items():
                if name not in installed:
                    continue
                got = overlay[name]
                self._check_project_users(name, got.version, e["by"][0])
                self.records.append({"name": name, "version": got.version, "requirement": f"{name}{e['specifier']}",
                                     "required_by": sorted(set(e["by"])), "project_version": e["have"],
                                     "why": "; ".join(dict.fromkeys(e["why"]))})
                needs += [(r, f"{name}=={got.version}", None) for r in requirements_of(got, sorted(e["extras"]))]

    def _install(self, batch: dict[str, dict]) -> set[str]:
        """Install ``batch`` into the overlay; the names installed (the others are unmet pins)."""
        args = {name: f"{name}{e['specifier']}" for name, e in batch.items()}
        proc = pip(["install", "--no-deps", "--prefer-binary", "--target", str(self.sp), *args.values()])
        if proc.returncode == 0:
            return set(args)
        installed = set()
        for name, arg in args.items():  # one at a time: the others still go in
            one = pip(["install", "--no-deps", "--prefer-binary", "--target", str(self.sp), arg])
            if one.returncode == 0:
                installed.add(name)
                continue
            cause = pip_error(one.stdout + "\n" + one.stderr)
            if not_found(cause):
                cause = f"no release of {name} matching it installs on Python {platform.python_version()} ({cause})"
            self._unmet(arg, batch[name]["by"], batch[name]["have"], f"it cannot be installed: {cause}")
        return installed

    def _unmet(self, requirement: str, by: list[str], have: str | None, why: str) -> None:
        self.unmet.append({"requirement": requirement, "required_by": sorted(set(by)), "project_version": have,
                           "why": why})

    def drop(self, rec: dict, why: str) -> None:
        """Remove a resolved distribution from the overlay (it does not work here): the project's
        copy, if any, is used instead, and its pin becomes an unmet record."""
        dist = self.overlay().get(rec["name"])
        for f in (dist.files or []) if dist is not None else []:
            path = Path(dist.locate_file(f))
            if path.is_file() or path.is_symlink():
                path.unlink()
        for leftover in self.sp.glob(f"{rec['name'].replace('-', '_')}*"):
            shutil.rmtree(leftover, ignore_errors=True)
        self.records.remove(rec)
        self.warnings = [w for w in self.warnings if not w.endswith(f" has {rec['name']} {rec['version']}")]
        self._unmet(rec["requirement"], rec["required_by"], rec["project_version"],
                    f"it resolves to {rec['name']} {rec['version']}, which {why}")

    def _check_project_users(self, name: str, version: str, by: str) -> None:
        """A shadowed ``name`` must still satisfy the kept stack; other project packages that ask
        for another version are named in the warnings (the import check is the arbiter there)."""
        for d in importlib.metadata.distributions():
            for r in requirements_of(d):
                if canonicalize_name(r.name) != name or r.specifier.contains(version, prereleases=True):
                    continue
                user = canonicalize_name(d.metadata["Name"])
                self.warnings.append(f"the project's {user} {d.version} asks for {r}; the environment of "
                                     f"{self.release} has {name} {version}")

    def failing(self, python: str) -> tuple[dict, str] | None:
        """The first resolved distribution that does not import under ``python``, and why."""
        overlay = self.overlay()
        for rec in self.records:
            modules = top_level(overlay[rec["name"]])
            proc = subprocess.run([python, "-c", "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)",
                                   *modules], capture_output=True, text=True)
            if proc.returncode != 0:
                lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
                return rec, (lines[-1] if lines else f"exit code {proc.returncode}")
        return None

