"""``attackaudit audit --bisect``: which release between two made each change.

Part of the release audit (``harness/audit/command.py``): ``index_releases`` lists the releases between
two on the package index, ``bisect`` finds, per changed implementation, the first release whose
verdict against the first endpoint is the final one.
"""
from __future__ import annotations

import sys

from attackaudit.audit.resolve import AuditEnvError
from attackaudit.errors import InputError


def version_key(version: str):
    """A sort key of version strings (PEP 440 where they parse)."""
    try:
        from packaging.version import Version
    except ImportError:  # pragma: no cover
        from pip._vendor.packaging.version import Version
    try:
        return (0, Version(version))
    except Exception:
        return (1, version)


def index_versions(dist: str) -> list[str]:
    """Every release of ``dist`` the package index offers for this Python (``pip index
    versions``), ascending; ValueError (one line) when the index cannot be asked."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "index",
                           "versions", dist], capture_output=True, text=True)
    listed = next((ln.split(":", 1)[1] for ln in proc.stdout.splitlines() if ln.startswith("Available versions:")),
                  None)
    if listed is None:
        raise InputError(f"cannot list the releases of {dist} on the package index "
                         f"({(proc.stderr.strip().splitlines() or ['no output'])[-1]})")
    return sorted({v.strip() for v in listed.split(",") if v.strip()}, key=version_key)


def is_prerelease(version: str) -> bool:
    return bool(getattr(version_key(version)[1], "is_prerelease", False))


def index_releases(dist: str, first: str, last: str) -> list[str]:
    """The releases of ``dist`` from ``first`` to ``last`` (inclusive, ascending) that the package
    index offers for this Python (``pip index versions``); pre-releases only as endpoints."""
    found = index_versions(dist)
    for end in (first, last):
        if end not in found:
            raise InputError(f"{dist}=={end} is not on the package index for this Python; "
                             f"`pip index versions {dist}` lists what is")
    lo, hi = version_key(first), version_key(last)
    return [v for v in found if lo <= version_key(v) <= hi and (v in (first, last) or not is_prerelease(v))]


def measures(diff, side: str) -> dict[tuple[str, str], dict]:
    return {(r["implementation"], r["norm"]): {"optimality": r[f"optimality_{side}"], "asr": r[f"asr_{side}"],
                                               "verdict": r["verdict"]}
            for _, r in diff.iterrows()}


def bisect(releases: list[str], changed: dict[tuple[str, str], str], measure, echo) -> tuple[list[dict], dict]:
    """First release at which each changed implementation's verdict (against ``releases[0]``)
    becomes its verdict at ``releases[-1]``.

    ``measure(version)`` runs the grid on a release and returns {(implementation, norm): {
    optimality, asr, verdict}} against the first release, or raises AuditEnvError when the release
    cannot be prepared (it is then skipped, as ``git bisect skip``). Assumes one change per
    implementation in the range; the evidence of every tested release is returned, so a history
    that changed back and forth shows. Returns (one record per change, {version: evidence or error}).
    """
    evidence: dict[str, dict] = {}

    def verdict_at(i: int, key) -> str | None:
        version = releases[i]
        if version not in evidence:
            try:
                evidence[version] = measure(version)
            except AuditEnvError as exc:
                echo(f"attackaudit: warning: bisect skips {version}: {exc}")
                evidence[version] = {"error": str(exc)}
        found = evidence[version]
        return None if "error" in found else found.get(key, {}).get("verdict", "unchanged")

    changes = []
    for key, verdict in sorted(changed.items()):
        lo, hi, skipped = 0, len(releases) - 1, []
        while hi - lo > 1:
            open_ = [i for i in range(lo + 1, hi) if releases[i] not in skipped]
            if not open_:
                break
            mid = min(open_, key=lambda i: abs(i - (lo + hi) / 2))
            got = verdict_at(mid, key)
            if got is None:
                skipped.append(releases[mid])
            elif got == verdict:
                hi = mid
            else:
                lo = mid
        changes.append({"implementation": key[0], "norm": key[1], "verdict": verdict,
                        "first_release": releases[hi], "last_release_before": releases[lo],
                        "untestable_between": releases[lo + 1:hi]})
    return changes, evidence


def bisect_lines(changes: list[dict], dist: str, n_releases: int, n_tested: int) -> list[str]:
    out = []
    for c in changes:
        between = f"; {', '.join(c['untestable_between'])} could not be tested" if c["untestable_between"] else ""
        out.append(f"{c['implementation']} [{c['norm']}]: {c['verdict']} first in {dist} {c['first_release']} "
                   f"(last release before it: {c['last_release_before']}{between})")
    out.append(f"bisect: {n_tested} of {n_releases} releases tested")
    return out


