"""Per-release environments for ``attackaudit audit``, and running a grid under one.

An environment pins one release of one attack library on top of the project's own environment:
``python -m venv --without-pip`` (its interpreter is the base Python's), a ``.pth`` file in its
site-packages that calls ``site.addsitedir`` on the running environment's site-packages (so
torch, numpy, the other libraries and attackaudit itself, an editable install included, come from
there), then ``pip install --no-deps --target <its site-packages> DIST==VERSION``. Its own
site-packages come first on ``sys.path``, so the pinned release shadows the installed one; the
installed environment is never written to.

What else goes into the overlay is resolved from metadata (``resolve``): every requirement the
release declares (markers evaluated here, its ``pytorch`` extra included: the adapters drive the
libraries' PyTorch side), and recursively theirs, is checked against the overlay and then the
project's installed distributions; one the project does not satisfy is installed into the overlay
(the newest release matching it, wheels preferred), shadowing the project's copy there only. Two
kinds of requirement stop the audit with one line (``AuditEnvError``): one on ``KEPT`` (the
project's torch, torchvision and numpy: every compiled package of the project is built against
them, so swapping them would audit a different numeric stack, not the release), and one that no
release installs on this Python or that does not import beside the kept stack. Requirements the
metadata cannot tell (``IMPLIED``: a release importing ``pkg_resources`` while declaring plain
``setuptools``) are added when the release's import fails with their signature.

Why not the alternatives: ``venv --system-site-packages`` run from a venv's interpreter layers
on the *base* Python (pyenv's), not on the project venv, so torch is missing there; and running
only the job workers under the pinned interpreter (``multiprocessing`` ``set_executable``) does
not pin anything, because a spawned child replaces its ``sys.path`` with the parent's and so
imports the installed release again. Hence ``run_under``: the whole run (catalogue, plan,
manifest, workers) executes under the environment's interpreter, and ``library_version`` in the
rows, read by the workers, is the pinned release's.

Environments live in ``$ATTACKAUDIT_CACHE/envs`` (else ``$XDG_CACHE_HOME/attackaudit/envs``,
else ``~/.cache/attackaudit/envs``), one directory ``<dist>-<version>-<base>-<resolution>`` per
release, where ``<base>`` names the base environment they are layered on and ``<resolution>``
hashes what was resolved (the overlay's distributions and the project versions every requirement
was checked against); one is reused only while those project versions are unchanged. They are built in a temporary
directory under a file lock and renamed into place when they work, so a failed or interrupted
preparation leaves nothing behind, and a finished one is reused.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name
except ImportError:  # pragma: no cover - pip always vendors packaging
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.utils import canonicalize_name

MARKER = "attackaudit-env.json"
_PTH = "_attackaudit_base.pth"


class AuditEnvError(ValueError):
    """A release's environment could not be prepared: one line naming the release and why."""


def cache_root() -> Path:
    """Where attackaudit caches environments: ``$ATTACKAUDIT_CACHE``, else the user's cache dir."""
    if os.environ.get("ATTACKAUDIT_CACHE"):
        return Path(os.environ["ATTACKAUDIT_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "attackaudit"


def base_site_packages() -> list[str]:
    """The running environment's site-packages, the layer every release environment sits on."""
    return [p for p in site.getsitepackages() if Path(p).is_dir()]


def _base_tag() -> str:
    blob = json.dumps([sys.prefix, base_site_packages(), platform.python_version()]).encode()
    return hashlib.sha256(blob).hexdigest()[:8]


@dataclass
class Env:
    """A prepared release environment. ``resolved``: one record per distribution the overlay
    installed beside the release (``name``, ``version``, ``requirement``, ``required_by``,
    ``project_version`` (None: the project lacks it), ``why``)."""

    dist: str
    version: str
    library: str
    path: str
    python: str
    site_packages: str
    reused: bool
    prepare_s: float
    specs: list[str] = field(default_factory=list)
    added_requirements: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    resolved: list[dict] = field(default_factory=list)
    key: str = ""

    def line(self) -> str:
        how = "reused" if self.reused else "created"
        extra = f"; {'; '.join(resolution_phrase(r) for r in self.resolved)}" if self.resolved else \
            "; nothing to resolve beside the release"
        return f"environment {self.dist}=={self.version}: {how} in {self.prepare_s:.1f} s ({self.path}{extra})"


def resolution_phrase(record: dict) -> str:
    """``shadowed setuptools 84.2.1 -> 81.0.0 (why)`` or ``added mnist 0.2.2 (why)``."""
    if record.get("project_version"):
        return f"shadowed {record['name']} {record['project_version']} -> {record['version']} ({record['why']})"
    return f"added {record['name']} {record['version']} ({record['why']})"


def _site_packages(env_dir: Path) -> Path:
    return env_dir / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    # the running interpreter's pip, writing only into --target: the base is never modified
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
                          capture_output=True, text=True)


def _pip_error(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:") and "ignored" not in ln]
    return (errors[-1] if errors else (lines[-1] if lines else "no output")).removeprefix("ERROR: ")


def _not_found(cause: str) -> bool:
    return "No matching distribution" in cause or "Could not find a version" in cause


# -- resolution ---------------------------------------------------------------------------------
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


def _top_level(dist: importlib.metadata.Distribution) -> list[str]:
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


def _who(release: str, by: str) -> str:
    return f"{release}" if by == release else f"{release}: its requirement {by}"


class _Resolver:
    """Installs into the overlay ``sp`` what the release needs and the project lacks (see the
    module docstring); ``records`` says what and why, ``consulted`` every project version a
    requirement was checked against (the cache key)."""

    def __init__(self, sp: Path, release: str):
        self.sp, self.release = sp, release
        self.records: list[dict] = []
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
                        raise AuditEnvError(f"{_who(self.release, by)} requires {shown(req)}, but its environment already holds "
                                            f"{name} {here} for another requirement; no single {name} satisfies both")
                    continue
                have = project_version(name)
                self.consulted[name] = have
                if have is not None and req.specifier.contains(have, prereleases=True):
                    continue
                if name in KEPT:
                    raise AuditEnvError(f"{_who(self.release, by)} requires {shown(req)}, which conflicts with the project's "
                                        f"{name} {have or '(not installed)'} (an audit keeps the project's "
                                        f"{', '.join(KEPT)})")
                entry = batch.setdefault(name, {"specifier": SpecifierSet(), "by": [], "extras": set(), "why": [],
                                                "have": have})
                entry["specifier"] &= req.specifier
                entry["by"].append(by)
                entry["extras"] |= req.extras
                entry["why"].append(why or (f"{by} requires {shown(req)}; the project "
                                            + ("lacks it" if have is None else f"has {have}")))
            if not batch:
                return
            self._install(batch)
            overlay, needs = self.overlay(), []
            for name, e in batch.items():
                got = overlay[name]
                self._check_project_users(name, got.version, e["by"][0])
                self.records.append({"name": name, "version": got.version, "requirement": f"{name}{e['specifier']}",
                                     "required_by": sorted(set(e["by"])), "project_version": e["have"],
                                     "why": "; ".join(dict.fromkeys(e["why"]))})
                needs += [(r, f"{name}=={got.version}", None) for r in requirements_of(got, sorted(e["extras"]))]

    def _install(self, batch: dict[str, dict]) -> None:
        args = {name: f"{name}{e['specifier']}" for name, e in batch.items()}
        proc = _pip(["install", "--no-deps", "--prefer-binary", "--target", str(self.sp), *args.values()])
        if proc.returncode == 0:
            return
        for name, arg in args.items():  # name the requirement that cannot be installed
            one = _pip(["install", "--no-deps", "--prefer-binary", "--target", str(self.sp), arg])
            if one.returncode != 0:
                cause = _pip_error(one.stdout + "\n" + one.stderr)
                if _not_found(cause):
                    cause = f"no release of {name} matching it installs on Python {platform.python_version()} ({cause})"
                raise AuditEnvError(f"{self.release}: cannot install its requirement {arg} "
                                    f"(from {', '.join(batch[name]['by'])}): {cause}")
        raise AuditEnvError(f"{self.release}: cannot install its requirements {', '.join(args.values())}: "
                            f"{_pip_error(proc.stdout + chr(10) + proc.stderr)}")

    def _check_project_users(self, name: str, version: str, by: str) -> None:
        """A shadowed ``name`` must still satisfy the kept stack; other project packages that ask
        for another version are named in the warnings (the import check is the arbiter there)."""
        for d in importlib.metadata.distributions():
            for r in requirements_of(d):
                if canonicalize_name(r.name) != name or r.specifier.contains(version, prereleases=True):
                    continue
                user = canonicalize_name(d.metadata["Name"])
                if user in KEPT:
                    raise AuditEnvError(f"{self.release}: {by} needs {name} {version}, which conflicts with the "
                                        f"project's {user} {d.version} (it requires {r}; an audit keeps the "
                                        f"project's {', '.join(KEPT)})")
                self.warnings.append(f"the project's {user} {d.version} asks for {r}; the environment of "
                                     f"{self.release} has {name} {version}")

    def failing(self, python: str) -> tuple[dict, str] | None:
        """The first resolved distribution that does not import under ``python``, and why."""
        overlay = self.overlay()
        for rec in self.records:
            modules = _top_level(overlay[rec["name"]])
            proc = subprocess.run([python, "-c", "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)",
                                   *modules], capture_output=True, text=True)
            if proc.returncode != 0:
                lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
                return rec, (lines[-1] if lines else f"exit code {proc.returncode}")
        return None


_INSPECT = r"""
import importlib, importlib.metadata as M, json, sys
dist, library = sys.argv[1], sys.argv[2]
out = {"version": None, "available": False, "reason": "", "specs": []}
try:
    out["version"] = M.version(dist)
    try:
        importlib.import_module(library)
    except Exception as exc:
        out["reason"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise SystemExit(print("ATTACKAUDIT-ENV " + json.dumps(out)))
    out["imports"] = True
    from attackaudit.adapters import load_library
    entry = load_library(library)
    out.update(available=entry.available, reason=entry.reason, specs=[s.key for s in entry.specs])
except Exception as exc:
    out["reason"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
print("ATTACKAUDIT-ENV " + json.dumps(out))
"""


def _inspect(python: str, dist: str, library: str) -> dict:
    proc = subprocess.run([python, "-c", _INSPECT, dist, library], capture_output=True, text=True)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("ATTACKAUDIT-ENV "):
            return json.loads(line.removeprefix("ATTACKAUDIT-ENV "))
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"version": None, "available": False, "reason": f"the environment's interpreter failed ({tail})",
            "specs": []}


def installed_version(dist: str) -> str:
    return project_version(dist) or "none"


def _stack() -> str:
    return ", ".join(f"{k} {project_version(k)}" for k in KEPT if project_version(k))


def _build(tmp: Path, dist: str, version: str, library: str) -> tuple[list[str], _Resolver]:
    """Create the environment in ``tmp``; (specs, its resolution) or AuditEnvError."""
    release = f"{dist}=={version}"
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(tmp)
    sp = _site_packages(tmp)
    sp.mkdir(parents=True, exist_ok=True)
    (sp / _PTH).write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in base_site_packages()))
    proc = _pip(["install", "--no-deps", "--target", str(sp), release])
    if proc.returncode != 0:
        cause = _pip_error(proc.stdout + "\n" + proc.stderr)
        if _not_found(cause):
            cause = f"no such release on the package index ({cause})"
        raise AuditEnvError(f"cannot install {release}: {cause}")
    resolver = _Resolver(sp, release)
    resolver.run([(r, release, None) for r in requirements_of(resolver.overlay()[canonicalize_name(dist)], EXTRAS)])
    python, applied = str(tmp / "bin" / "python"), set()
    while True:
        info = _inspect(python, dist, library)
        cure = next(((req, why) for sig, req, why in IMPLIED
                     if sig.search(info["reason"] or "") and req not in applied), None)
        if info["available"] or cure is None:
            break
        applied.add(cure[0])
        resolver.run([(Requirement(cure[0]), release, cure[1])])
    if info["version"] != version:
        raise AuditEnvError(f"{release}: the environment resolves {dist} {info['version']}, not {version} "
                            f"(the pinned release does not shadow the installed one)")
    if not info["available"] and info.get("imports"):
        raise AuditEnvError(f"{release} imports, but attackaudit's {library} adapter fails on it "
                            f"({info['reason']}); the adapter must detect this release's API")
    if not info["available"]:
        culprit = resolver.failing(python)
        if culprit is not None:
            rec, why = culprit
            raise AuditEnvError(f"{release}: its requirement {rec['requirement']} resolves to {rec['name']} "
                                f"{rec['version']} (the newest that installs on Python {platform.python_version()}), "
                                f"which does not import beside the project's {_stack()}: {why}")
        raise AuditEnvError(f"{release} does not import here (Python {platform.python_version()}, {_stack()}): "
                            f"{info['reason']}")
    return info["specs"], resolver


def _still_valid(env_dir: Path) -> dict | None:
    """The marker of a finished environment whose resolution still holds, else None."""
    marker = env_dir / MARKER
    if not (marker.is_file() and (env_dir / "bin" / "python").exists()):
        return None
    meta = json.loads(marker.read_text())
    consulted = meta.get("consulted")
    if consulted is None or any(project_version(n) != v for n, v in consulted.items()):
        return None  # an older layout, or the project changed what the resolution relied on
    return meta


def prepare_env(dist: str, version: str, library: str, *, cache: Path | None = None) -> Env:
    """The environment of ``dist==version`` (created once, then reused while its resolution
    holds); AuditEnvError (one line) if the release, or a requirement the project does not
    satisfy, cannot be installed or does not import beside the project's kept stack."""
    start = time.perf_counter()
    envs = (cache or cache_root()) / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    prefix = f"{dist}-{version}-{_base_tag()}"
    with open(envs / f"{prefix}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one preparation per release at a time, across processes
        for final in sorted(envs.glob(f"{prefix}-*")):
            meta = _still_valid(final)
            if meta is not None:
                return Env(dist, version, library, str(final), str(final / "bin" / "python"),
                           str(_site_packages(final)), True, time.perf_counter() - start, meta.get("specs", []),
                           meta.get("added_requirements", []), meta.get("warnings", []), meta.get("resolved", []),
                           meta.get("key", ""))
        tmp = Path(tempfile.mkdtemp(prefix=f".{prefix}.", dir=envs))
        try:
            specs, resolver = _build(tmp, dist, version, library)
            blob = json.dumps([sorted((r["name"], r["version"]) for r in resolver.records),
                               sorted(resolver.consulted.items(), key=lambda kv: kv[0])], default=str)
            key = hashlib.sha256(blob.encode()).hexdigest()[:8]
            final = envs / f"{prefix}-{key}"
            shutil.rmtree(final, ignore_errors=True)  # an incomplete leftover
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        env = Env(dist, version, library, str(final), str(final / "bin" / "python"), str(_site_packages(final)),
                  False, time.perf_counter() - start, specs,
                  [f"{r['name']}=={r['version']}" for r in resolver.records], resolver.warnings, resolver.records, key)
        meta = {**asdict(env), "consulted": resolver.consulted, "base_site_packages": base_site_packages(),
                "base_prefix": sys.prefix, "installed_version": installed_version(dist),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (final / MARKER).write_text(json.dumps(meta, indent=2) + "\n")
        return env


# -- a run under another interpreter ------------------------------------------------------------
def is_current_interpreter(python: str) -> bool:
    """Whether ``python`` is this process's interpreter (venv symlinks are *not* resolved: two
    environments share a binary yet differ)."""
    return os.path.abspath(python) == os.path.abspath(sys.executable)


def run_under(config):
    """Run ``config`` (a RunConfig) with ``config.python`` as the interpreter of the whole run;
    returns its RunSummary. The run's usage errors come back as ConfigError (one line)."""
    from .config import ConfigError
    from .runner import RunSummary

    if not os.access(config.python, os.X_OK):
        raise ConfigError(f"python {config.python} is not an executable interpreter")
    with tempfile.TemporaryDirectory(prefix="attackaudit-run-") as tmp:
        request, answer = Path(tmp) / "config.json", Path(tmp) / "summary.json"
        request.write_text(json.dumps(asdict(config)))
        proc = subprocess.run([config.python, "-m", "attackaudit.audit_env", str(request), str(answer)])
        data = json.loads(answer.read_text()) if answer.is_file() else None
    if data is None:
        raise RuntimeError(f"the run under {config.python} ended without a summary (exit code {proc.returncode})")
    if "error" in data:
        raise ConfigError(data["error"])
    return RunSummary(Path(data["run_dir"]), data["total"], data["executed"], data["counts"], data["wall_s"])


def _child(request: str, answer: str) -> int:
    from .config import RunConfig
    from .runner import run

    config = RunConfig(**json.loads(Path(request).read_text()))
    try:
        if not is_current_interpreter(config.python):
            raise ValueError(f"expected to run under {config.python}, not {sys.executable}")
        summary = run(config)
    except ValueError as exc:  # ConfigError, RunDirError, DataSourceError, ...: one line for the user
        Path(answer).write_text(json.dumps({"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}))
        return 2
    Path(answer).write_text(json.dumps({"run_dir": str(summary.run_dir), "total": summary.total,
                                        "executed": summary.executed, "counts": summary.counts,
                                        "wall_s": summary.wall_s}))
    return 0


if __name__ == "__main__":
    sys.exit(_child(*sys.argv[1:3]))
