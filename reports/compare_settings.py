"""The settings two runs of ``attackaudit compare`` were made with, and which of them differ.

A diff's verdicts are meant to measure a change of library (a release, a patched tree, an edited
plugin) on one grid. Two runs made with another budget, subset or iteration count differ by
that too, and a verdict would blame the library for it ("regressed: xi 1.00 -> 0.12" between
``--steps-scale 1`` and ``0.2``). Each run's manifest records its result config
(``harness/run/config.py`` ``RunConfig.result_config``); the fields compared here are:

- the settings (every other field): they change every result of every implementation (budget, samples, seed,
  targeted, iterations, data, ...). ``compare`` refuses runs that differ in one unless asked
  (``--across-settings``), and then labels every page with them;
- ``GRID``: they choose which implementations and models run (filters, twins, plugins, the
  interpreter of a release audit). A difference there is listed but never refused: what one run
  lacks is ``new`` or ``removed``, and the interpreter is how a release is compared.
"""
from __future__ import annotations

#: result-config fields that choose which implementations and models run, or the release itself
GRID = ("models", "libraries", "families", "norms", "attacks", "metamorphic", "plugins", "plugin_fingerprints",
        "python")


def _shown(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value) or "[]"
    return "(default)" if value is None else str(value)


def setting_changes(manifest_a: dict, manifest_b: dict) -> tuple[list[str], list[str]]:
    """(settings that differ, grid fields that differ), each as ``"name A -> B"``, from the two
    runs' manifests; both empty when either run predates the recorded config."""
    a, b = manifest_a.get("config") or {}, manifest_b.get("config") or {}
    if not a or not b:
        return [], []
    changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    lines = {k: f"{k} {_shown(a.get(k))} -> {_shown(b.get(k))}" for k in changed}
    return [lines[k] for k in changed if k not in GRID], [lines[k] for k in changed if k in GRID]


def refusal(run_a: str, run_b: str, settings: list[str]) -> str:
    """The one-line error for runs whose settings differ (``compare`` without ``--across-settings``)."""
    return (f"{run_a} and {run_b} ran with different settings ({'; '.join(settings)}): every verdict would mix "
            "them with the library change; rerun one with the other's settings, or pass --across-settings to "
            "compare them anyway, labelled")


def settings_label(settings: list[str]) -> str:
    """The sentence each page of a comparison across settings opens with."""
    return (f"Settings differ between A and B ({'; '.join(settings)}): each verdict measures the change of "
            "settings together with any change of library.")
