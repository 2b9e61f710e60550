"""Per-release environments for ``attackaudit audit``, and running a grid under one.

An environment pins one release of one attack library on top of the project's own environment:
``python -m venv --without-pip`` (its interpreter is the base Python's), a ``.pth`` file in its
site-packages that calls ``site.addsitedir`` on the running environment's site-packages (so
torch, numpy, the other libraries and attackaudit itself, an editable install included, come from
there), then ``pip install --no-deps --target <its site-packages> DIST==VERSION`` (plus the
release's requirements that the base lacks). Its own site-packages come first on ``sys.path``, so
the pinned release shadows the installed one; the installed environment is never written to.

Why not the alternatives: ``venv --system-site-packages`` run from a venv's interpreter layers
on the *base* Python (pyenv's), not on the project venv, so torch is missing there; and running
only the job workers under the pinned interpreter (``multiprocessing`` ``set_executable``) does
not pin anything, because a spawned child replaces its ``sys.path`` with the parent's and so
imports the installed release again. Hence ``run_under``: the whole run (catalogue, plan,
manifest, workers) executes under the environment's interpreter, and ``library_version`` in the
rows, read by the workers, is the pinned release's.

Environments live in ``$ATTACKAUDIT_CACHE/envs`` (else ``$XDG_CACHE_HOME/attackaudit/envs``,
else ``~/.cache/attackaudit/envs``), one directory ``<dist>-<version>-<tag>`` per release, where
``<tag>`` names the base environment they are layered on. They are built in a temporary
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
import shutil
import site
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import asdict, dataclass, field
from pathlib import Path

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
    """A prepared release environment."""

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

    def line(self) -> str:
        how = "reused" if self.reused else "created"
        extra = f", added {', '.join(self.added_requirements)}" if self.added_requirements else ""
        return f"environment {self.dist}=={self.version}: {how} in {self.prepare_s:.1f} s ({self.path}{extra})"


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


_INSPECT = r"""
import importlib.metadata as M, json, sys
dist, library = sys.argv[1], sys.argv[2]
out = {"version": None, "missing": [], "unsatisfied": [], "available": False, "reason": "", "specs": []}
try:
    out["version"] = M.version(dist)
    try:
        from packaging.requirements import Requirement
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement
    for text in M.requires(dist) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = M.version(req.name)
        except M.PackageNotFoundError:
            out["missing"].append(str(req))
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out["unsatisfied"].append(f"{req} (installed {have})")
    if sys.argv[3] == "import":
        import importlib
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


def _inspect(python: str, dist: str, library: str, with_import: bool) -> dict:
    proc = subprocess.run([python, "-c", _INSPECT, dist, library, "import" if with_import else "requirements"],
                          capture_output=True, text=True)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("ATTACKAUDIT-ENV "):
            return json.loads(line.removeprefix("ATTACKAUDIT-ENV "))
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"version": None, "missing": [], "unsatisfied": [], "available": False,
            "reason": f"the environment's interpreter failed ({tail})", "specs": []}


def installed_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _build(tmp: Path, dist: str, version: str, library: str) -> tuple[list[str], list[str], list[str]]:
    """Create the environment in ``tmp``; (specs, added requirements, warnings) or AuditEnvError."""
    release = f"{dist}=={version}"
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(tmp)
    sp = _site_packages(tmp)
    sp.mkdir(parents=True, exist_ok=True)
    (sp / _PTH).write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in base_site_packages()))
    proc = _pip(["install", "--no-deps", "--target", str(sp), release])
    if proc.returncode != 0:
        cause = _pip_error(proc.stdout + "\n" + proc.stderr)
        if "No matching distribution" in cause or "Could not find a version" in cause:
            cause = f"no such release on the package index ({cause})"
        raise AuditEnvError(f"cannot install {release}: {cause}")
    python = str(tmp / "bin" / "python")
    info = _inspect(python, dist, library, with_import=False)
    added, warnings = [], [f"{release} asks for {u}" for u in info["unsatisfied"]]
    if info["missing"]:  # what the release needs and the base lacks: into the environment, never the base
        proc = _pip(["install", "--no-deps", "--target", str(sp), *info["missing"]])
        if proc.returncode != 0:
            raise AuditEnvError(f"cannot install the requirements {', '.join(info['missing'])} of {release}: "
                                f"{_pip_error(proc.stdout + chr(10) + proc.stderr)}")
        added = list(info["missing"])
    info = _inspect(python, dist, library, with_import=True)
    if info["version"] != version:
        raise AuditEnvError(f"{release}: the environment resolves {dist} {info['version']}, not {version} "
                            f"(the pinned release does not shadow the installed one)")
    if not info["available"] and info.get("imports"):
        raise AuditEnvError(f"{release} imports, but attackaudit's {library} adapter fails on it "
                            f"({info['reason']}); the adapter must detect this release's API")
    if not info["available"]:
        import numpy
        import torch

        unsatisfied = f"; it asks for {', '.join(info['unsatisfied'])}" if info["unsatisfied"] else ""
        raise AuditEnvError(f"{release} does not import here (Python {platform.python_version()}, torch "
                            f"{torch.__version__}, numpy {numpy.__version__}): {info['reason']}{unsatisfied}")
    return info["specs"], added, warnings


def prepare_env(dist: str, version: str, library: str, *, cache: Path | None = None) -> Env:
    """The environment of ``dist==version`` (created once, then reused); AuditEnvError if the
    release cannot be installed or does not import next to the installed torch and numpy."""
    start = time.perf_counter()
    envs = (cache or cache_root()) / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    name = f"{dist}-{version}-{_base_tag()}"
    final = envs / name
    with open(envs / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one preparation per release at a time, across processes
        marker = final / MARKER
        if marker.is_file() and (final / "bin" / "python").exists():
            meta = json.loads(marker.read_text())
            return Env(dist, version, library, str(final), str(final / "bin" / "python"),
                       str(_site_packages(final)), True, time.perf_counter() - start, meta.get("specs", []),
                       meta.get("added_requirements", []), meta.get("warnings", []))
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=envs))
        try:
            specs, added, warnings = _build(tmp, dist, version, library)
            shutil.rmtree(final, ignore_errors=True)  # an incomplete leftover of an older layout
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        seconds = time.perf_counter() - start
        env = Env(dist, version, library, str(final), str(final / "bin" / "python"), str(_site_packages(final)),
                  False, seconds, specs, added, warnings)
        meta = {**asdict(env), "base_site_packages": base_site_packages(), "base_prefix": sys.prefix,
                "installed_version": installed_version(dist), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        marker.write_text(json.dumps(meta, indent=2) + "\n")
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
