"""Per-release environments for ``attackaudit audit``, and running a grid under one.

An environment pins one release of one attack library on top of the project's own environment:
``python -m venv --without-pip`` (its interpreter is the base Python's), a ``.pth`` file in its
site-packages that calls ``site.addsitedir`` on the running environment's site-packages (so
torch, numpy, the other libraries and attackaudit itself, an editable install included, come from
there), then ``pip install --no-deps --target <its site-packages> DIST==VERSION`` (or, for a
release candidate, ``pip install --no-deps --target ... PATH``: a wheel, an sdist or a source
tree). Its own site-packages come first on ``sys.path``, so the pinned release shadows the
installed one; the installed environment is never written to.

What else goes into the overlay, and which declared pins it cannot meet, is resolved from metadata
(``harness/audit/resolve.py``). A pin that cannot be met is tried, not refused: the release runs
with the project's copy, the environment report names the pin (``Env.unmet``), and preparation
stops with one line (``AuditEnvError``) only when the release does not work that way: it does not
import, the adapter cannot read its catalogue, or (when a pin was not met) none of its attacks
runs on two digits (``_INSPECT``'s smoke test).

A release candidate is named by its version and a content hash (``content_hash``): the overlay's
copy of its metadata says ``VERSION+c<hash>`` (a PEP 440 local label), so every row, manifest and
report of its run names the candidate, not the release it was built from.

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
hashes what was resolved (the overlay's distributions, the unmet pins and the project versions
every requirement was checked against); one is reused only while those project versions are
unchanged. They are built in a temporary directory under a file lock and renamed into place when
they work, so a failed or interrupted preparation leaves nothing behind, and a finished one is
reused. ``$ATTACKAUDIT_PIP_ARGS`` (e.g. ``--no-index --find-links DIR``) is added to every pip
call: offline audits from a local wheel directory.
"""
from __future__ import annotations

import fcntl
import hashlib
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

from attackaudit.audit.resolve import (EXTRAS, IMPLIED, KEPT, AuditEnvError, Requirement, Resolver, canonicalize_name,
                            not_found, pip, pip_error, project_version, requirements_of, resolution_phrase,
                            unmet_phrase)

__all__ = ["AuditEnvError", "Env", "MARKER", "base_site_packages", "cache_root", "content_hash", "installed_version",
           "is_current_interpreter", "prepare_env", "resolution_phrase", "run_under", "unmet_phrase"]

MARKER = "attackaudit-env.json"
_PTH = "_attackaudit_base.pth"


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


#: what a source tree's content hash leaves out: build products and VCS metadata
_TREE_SKIP = {".git", ".hg", "__pycache__", "build", "dist", ".tox", ".eggs", ".mypy_cache", ".pytest_cache"}


def content_hash(path: str | Path) -> str:
    """SHA-256 (first 12 hex digits) of a wheel's or sdist's bytes, or of a source tree's files
    (relative paths and bytes, sorted; build products, caches and ``*.egg-info`` left out)."""
    path = Path(path)
    digest = hashlib.sha256()
    if path.is_file():
        digest.update(path.read_bytes())
        return digest.hexdigest()[:12]
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path)
        if any(part in _TREE_SKIP or part.endswith(".egg-info") for part in rel.parts):
            continue
        digest.update(str(rel).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:12]


@dataclass
class Env:
    """A prepared release environment. ``resolved``: one record per distribution the overlay
    installed beside the release (``name``, ``version``, ``requirement``, ``required_by``,
    ``project_version`` (None: the project lacks it), ``why``); ``unmet``: the declared pins it
    could not meet (the project's copy is used: ``requirement``, ``required_by``,
    ``project_version``, ``why``); ``source``: a candidate's path ("" for a release from the
    index) and ``content_hash`` its hash."""

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
    unmet: list[dict] = field(default_factory=list)
    source: str = ""
    content_hash: str = ""

    def line(self) -> str:
        how = "reused" if self.reused else "created"
        phrases = [resolution_phrase(r) for r in self.resolved] + [unmet_phrase(u) for u in self.unmet]
        extra = f"; {'; '.join(phrases)}" if phrases else "; nothing to resolve beside the release"
        what = f"candidate {self.source} ({self.dist} {self.version})" if self.source else f"{self.dist}=={self.version}"
        return f"environment {what}: {how} in {self.prepare_s:.1f} s ({self.path}{extra})"


def _site_packages(env_dir: Path) -> Path:
    return env_dir / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


_INSPECT = r"""
import importlib, importlib.metadata as M, json, sys
dist, library, smoke = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
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
    if smoke and entry.available:  # a pin went unmet: do its attacks run with the project's copies?
        import torch
        from attackaudit.sources.subset import load_subset
        from attackaudit.sources.zoo import load_model
        sub, model = load_subset("digits", 2, 0), load_model("digits-mlp")
        errors = {}
        for spec in entry.specs:
            kw = {"eps": torch.full((2,), 0.1) if spec.per_sample_eps else 0.1} if spec.kind == "fixed" else {}
            try:
                spec.scaled(0.01).run(model, sub.inputs.clone(), sub.labels.clone(), **kw)
            except Exception as exc:
                errors[spec.key] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        out["smoke_errors"] = errors
        if errors and len(errors) == len(entry.specs):
            out.update(available=False, reason="none of its attacks runs: " + next(iter(errors.values())))
except Exception as exc:
    out["reason"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
print("ATTACKAUDIT-ENV " + json.dumps(out))
"""


def _inspect(python: str, dist: str, library: str, smoke: bool = False) -> dict:
    proc = subprocess.run([python, "-c", _INSPECT, dist, library, "1" if smoke else "0"], capture_output=True,
                          text=True)
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


def _label_candidate(sp: Path, dist: str, digest: str) -> str:
    """Rewrite the overlay's metadata of the installed candidate to ``VERSION+c<digest>``; returns it."""
    installed = Resolver(sp, dist).overlay()[canonicalize_name(dist)]
    metadata = next(Path(installed.locate_file(f)) for f in installed.files or []
                    if f.name == "METADATA" and f.parent.name.endswith(".dist-info"))
    version = installed.version.split("+")[0] + f"+c{digest}"
    text = metadata.read_text(encoding="utf-8")
    metadata.write_text(text.replace(f"\nVersion: {installed.version}\n", f"\nVersion: {version}\n", 1),
                        encoding="utf-8")
    return version


def _install_release(sp: Path, dist: str, version: str, source: str) -> tuple[str, str]:
    """``pip install --no-deps`` the release (or the candidate at ``source``) into ``sp``;
    (how to name it, its version)."""
    release = f"{dist}=={version}" if not source else f"{dist}@{source}"
    proc = pip(["install", "--no-deps", "--target", str(sp), source or release])
    if proc.returncode != 0:
        cause = pip_error(proc.stdout + "\n" + proc.stderr)
        if not_found(cause):
            cause = f"no such release on the package index ({cause})"
        raise AuditEnvError(f"cannot install {release}: {cause}")
    if source:
        if canonicalize_name(dist) not in Resolver(sp, release).overlay():
            raise AuditEnvError(f"{source} does not build a {dist} distribution")
        version = _label_candidate(sp, dist, version)
    return release, version


def _build(tmp: Path, dist: str, version: str, library: str, source: str = "") -> tuple[dict, Resolver]:
    """Create the environment in ``tmp``; (its inspection, its resolution) or AuditEnvError.
    For a candidate (``source``), ``version`` is its content hash."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(tmp)
    sp = _site_packages(tmp)
    sp.mkdir(parents=True, exist_ok=True)
    (sp / _PTH).write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in base_site_packages()))
    release, version = _install_release(sp, dist, version, source)
    resolver = Resolver(sp, release)
    resolver.run([(r, release, None) for r in requirements_of(resolver.overlay()[canonicalize_name(dist)], EXTRAS)])
    python, applied = str(tmp / "bin" / "python"), set()
    while True:
        info = _inspect(python, dist, library, smoke=bool(resolver.unmet))
        cure = next(((req, why) for sig, req, why in IMPLIED
                     if sig.search(info["reason"] or "") and req not in applied), None)
        if cure is not None:
            applied.add(cure[0])
            resolver.run([(Requirement(cure[0]), release, cure[1])])
            continue
        culprit = None if info["available"] else resolver.failing(python)
        if culprit is None:
            break
        # a requirement that does not import beside the kept stack: try the project's copy
        rec, why = culprit
        resolver.drop(rec, f"does not import beside the project's {_stack()}: {why}")
    if info["version"] != version:
        raise AuditEnvError(f"{release}: the environment resolves {dist} {info['version']}, not {version} "
                            f"(the pinned release does not shadow the installed one)")
    unmet = "".join(f"; {unmet_phrase(u)}" for u in resolver.unmet)
    if not info["available"] and info.get("imports") and not info["reason"].startswith("none of its attacks"):
        raise AuditEnvError(f"{release} imports, but attackaudit's {library} adapter fails on it "
                            f"({info['reason']}); the adapter must detect this release's API{unmet}")
    if not info["available"]:
        raise AuditEnvError(f"{release} does not work here (Python {platform.python_version()}, {_stack()}): "
                            f"{info['reason']}{unmet}")
    return info, resolver


def _still_valid(env_dir: Path) -> dict | None:
    """The marker of a finished environment whose resolution still holds, else None."""
    marker = env_dir / MARKER
    if not (marker.is_file() and (env_dir / "bin" / "python").exists()):
        return None
    meta = json.loads(marker.read_text())
    consulted = meta.get("consulted")
    if consulted is None or "unmet" not in meta or any(project_version(n) != v for n, v in consulted.items()):
        return None  # an older layout, or the project changed what the resolution relied on
    return meta


def prepare_env(dist: str, version: str, library: str, *, cache: Path | None = None, source: str | Path = "") -> Env:
    """The environment of ``dist==version``, or of the candidate at ``source`` (a wheel, an sdist
    or a source tree; ``version`` is then ignored), created once and reused while its resolution
    holds; AuditEnvError (one line) when the release cannot be installed or does not work beside
    the project's kept stack (see the module docstring)."""
    start = time.perf_counter()
    envs = (cache or cache_root()) / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    source = str(Path(source).resolve()) if source else ""
    if source and not Path(source).exists():
        raise AuditEnvError(f"release candidate {source} does not exist (give a wheel, an sdist or a source tree)")
    digest = content_hash(source) if source else ""
    prefix = f"{dist}-{'c' + digest if source else version}-{_base_tag()}"
    with open(envs / f"{prefix}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one preparation per release at a time, across processes
        for final in sorted(envs.glob(f"{prefix}-*")):
            meta = _still_valid(final)
            if meta is not None:
                kept = {k: meta[k] for k in ("version", "specs", "added_requirements", "warnings", "resolved", "key",
                                             "unmet", "source", "content_hash") if k in meta}
                return Env(**{**kept, "dist": dist, "library": library, "path": str(final),
                              "python": str(final / "bin" / "python"), "site_packages": str(_site_packages(final)),
                              "reused": True, "prepare_s": time.perf_counter() - start})
        tmp = Path(tempfile.mkdtemp(prefix=f".{prefix}.", dir=envs))
        try:
            info, resolver = _build(tmp, dist, digest or version, library, source)
            blob = json.dumps([sorted((r["name"], r["version"]) for r in resolver.records),
                               sorted(u["requirement"] for u in resolver.unmet),
                               sorted(resolver.consulted.items(), key=lambda kv: kv[0])], default=str)
            key = hashlib.sha256(blob.encode()).hexdigest()[:8]
            final = envs / f"{prefix}-{key}"
            shutil.rmtree(final, ignore_errors=True)  # an incomplete leftover
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        warnings = resolver.warnings + [f"{k} does not run in this environment: {e}"
                                        for k, e in info.get("smoke_errors", {}).items()]
        env = Env(dist, info["version"], library, str(final), str(final / "bin" / "python"),
                  str(_site_packages(final)), False, time.perf_counter() - start, info["specs"],
                  [f"{r['name']}=={r['version']}" for r in resolver.records], warnings, resolver.records, key,
                  resolver.unmet, source, digest)
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
    from attackaudit.run.config import ConfigError
    from attackaudit.run.runner import RunSummary

    if not os.access(config.python, os.X_OK):
        raise ConfigError(f"python {config.python} is not an executable interpreter")
    with tempfile.TemporaryDirectory(prefix="attackaudit-run-") as tmp:
        request, answer = Path(tmp) / "config.json", Path(tmp) / "summary.json"
        request.write_text(json.dumps(asdict(config)))
        proc = subprocess.run([config.python, "-m", "attackaudit.audit.env", str(request), str(answer)])
        data = json.loads(answer.read_text()) if answer.is_file() else None
    if data is None:
        raise RuntimeError(f"the run under {config.python} ended without a summary (exit code {proc.returncode})")
    if "error" in data:
        raise ConfigError(data["error"])
    return RunSummary(Path(data["run_dir"]), data["total"], data["executed"], data["counts"], data["wall_s"])


def _child(request: str, answer: str) -> int:
    from attackaudit.run.config import RunConfig
    from attackaudit.run.runner import run

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
