"""The notebook API: ``attackaudit.compare`` on your own model, ``attackaudit.open`` on any run.

``compare(model, inputs, labels, ...)`` runs the grid ``attackaudit run`` runs (every matching
attack implementation × norm on the model, one hashed subset, one query budget) and returns a
:class:`Result`: the rows, the leaderboard, the flags, a trust verdict per family and norm,
robustness-curve plots and the report, computed by the same functions as ``attackaudit report``.
The run is an ordinary run directory (``harness/sources/user_model.py`` says how the model and tensors
become sources the workers load), so ``attackaudit report DIR`` reads it and calling ``compare``
again with the same ``out`` resumes it.

This module imports neither torch nor the runner until ``compare`` is called: ``import
attackaudit`` and ``attackaudit.open`` stay light.
"""
from __future__ import annotations

import html
import json
import os
import sys
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from attackaudit.results.store import atomic_write_bytes, load_run, read_manifest
from attackaudit.sources.user_args import NORMS  # noqa: F401  (attackaudit.api.NORMS, as before)
from attackaudit.sources.user_args import check as _check
from attackaudit.sources.user_args import check_int as _check_int  # noqa: F401  (tests call api._check_int)
from attackaudit.sources.user_args import checked_scalars as _checked_scalars, filters as _filters
from attackaudit.sources.user_args import plugin_paths as _plugin_paths, run_dir_of as _run_dir

if TYPE_CHECKING:  # annotations only: importing torch here would make ``import attackaudit`` heavy
    from matplotlib.figure import Figure
    from torch import Tensor, nn

    from attackaudit.reports import ReportData
    from attackaudit.sources.user_model import Handoff

#: written beside the manifest by ``compare``: how its jobs ran, and which model they attacked
NOTEBOOK_FILE = "notebook.json"


def compare(model: "nn.Module", inputs: "Tensor | np.ndarray", labels: "Tensor | np.ndarray", *,
            families: str | Sequence[str] | None = None, norms: str | Sequence[str] | None = None,
            libraries: str | Sequence[str] | None = None, attacks: str | Sequence[str] | None = None,
            plugins: Sequence[str | os.PathLike] = (), budget: int = 2000, samples: int | None = None,
            seed: int = 0, targeted: bool = False, metamorphic: bool = False,
            steps_scale: float = 1.0, batch_size: int = 0, device: str = "auto",
            workers: int | None = None, timeout_s: float = 900.0,
            out: str | os.PathLike | None = None, progress: bool = True, retry: str | None = None,
            name: str | None = None, until_decided: int | None = None) -> "Result":
    """Run every matching attack implementation on ``model`` and say which ones to trust.

    Parameters
    ----------
    model : torch.nn.Module
        Takes N×C×H×W inputs in [0, 1] and returns N×K logits (normalisation inside the model).
        It is left as it was: each worker attacks its own copy (pickled with cloudpickle, so a
        class defined in the notebook works). A model that does not pickle is attacked in this
        process, and restored afterwards (training flags, ``requires_grad``, device).
    inputs : Tensor or ndarray, shape (N, C, H, W)
        Floating point, finite, in [0, 1]; float64 or float16 is cast to the model's float32 (a
        note in ``Result.notes`` says so).
    labels : Tensor or ndarray, shape (N,)
        Integer classes in [0, K).
    families : str or sequence of str, optional
        Attack families (``"apgd"``, ``["pgd", "cw"]``), any case; None: all (``attackaudit attacks``).
    norms : str or sequence of str, optional
        ``"l0"``, ``"l1"``, ``"l2"``, ``"linf"``, any case (``"Linf"``); None: all four.
    libraries : str or sequence of str, optional
        Library names (``"adv_lib"``, ``"torchattacks"``, a plugin's); None: all.
    attacks : str or sequence of str, optional
        Spec keys or implementations (``"adv_lib/fmn/l2"``), any case; None: all.
    plugins : sequence of paths
        Plugin files of your own attacks (``def specs() -> list[AttackSpec]``); always run.
    budget : int
        Forwards + backwards per sample, for every attack.
    samples : int, optional
        How many of the N samples to attack (a seeded choice; subsets nest); None: all N. More
        than N attacks all N, as ``attackaudit run --samples`` does, and a note says so.
    seed : int
        Chooses the samples, the targets of a targeted run, and seeds each attack.
    targeted : bool
        Seeded random targets instead of untargeted attacks (specs without a targeted mode are
        left out).
    metamorphic : bool
        Also run the model's metamorphic twins (logits shifted, classes permuted), the evidence
        for ``shift_sensitivity`` and ``label_bug``.
    steps_scale : float
        Scales every attack's iteration count (0.1 for a quick look).
    batch_size : int
        Samples per attack call; 0: all at once.
    device : str
        ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    workers : int, optional
        Worker processes (None: up to 2). 0 runs the jobs in this process, without isolation.
    timeout_s : float
        Per-job time limit in worker processes.
    out : path, optional
        The run directory (created; the same ``out`` resumes). None: a new temporary directory.
    progress : bool
        Show the job progress bar.
    retry : str, optional
        ``"crashed"``: the jobs of ``out`` that crashed run again. Jobs whose worker failed before
        the attack started (``harness_error``) always do.
    name : str, optional
        What the model is called in the rows' ``model`` column, progress bars, flags, ``explain``
        and reports (letters, digits, ``_``, ``.``, ``-``); None: its class name. The model's
        source stays a file of the run directory; another name resumes the same run.
    until_decided : int, optional
        A cap above ``samples``: judge on ``samples`` images, then run only the family × norm rows
        still inconclusive again on doubling nested subsets up to this many images (or all N), the
        error rate spent across the looks (``attackaudit run --until-decided``; docs/statistics.md).
        The looks are in the manifest's ``looks``; the verdicts are those of each row's last look.

    Returns
    -------
    Result
        ``Result.execution`` says whether the jobs ran isolated or in this process, and why;
        ``Result.notes`` what was changed or left out (inputs cast, training mode, names).

    Raises
    ------
    ValueError
        One line naming the argument that is wrong.
    attackaudit.run.faults.HarnessFault
        Every job failed before its attack started, the same way (one line: the cause and the fix).
    """
    from attackaudit.sources.user_model import checked_inputs, hand_over, model_name, save_data

    x, y, notes = checked_inputs(model, inputs, labels)
    samples, workers = _checked_scalars(len(y), samples=samples, budget=budget, seed=seed, batch_size=batch_size,
                                        workers=workers, steps_scale=steps_scale, timeout_s=timeout_s,
                                        targeted=targeted, metamorphic=metamorphic, progress=progress)
    names = _filters(families=families, norms=norms, libraries=libraries, attacks=attacks)
    plugin_paths = _plugin_paths(plugins)
    _check("device", device)
    _check("retry", "" if retry is None else retry)  # None: the run's "" (no retry)
    if until_decided is not None:
        _check("until_decided", until_decided)
        if until_decided <= samples:
            raise ValueError(f"until_decided must be larger than samples ({samples}, the first look's images), "
                             f"got {until_decided}")
    label = model_name(model, name)
    run_dir = _run_dir(out)
    dataset = save_data(run_dir, x, y)
    handoff = hand_over(model, run_dir, isolate=workers > 0)
    flags = {"out": str(run_dir), "models": [handoff.source], "model_names": {handoff.source: label},
             "dataset": dataset, **names, "plugins": plugin_paths,
             "budget": budget, "samples": samples, "seed": seed, "targeted": targeted, "metamorphic": metamorphic,
             "steps_scale": float(steps_scale), "batch_size": batch_size, "device": device,
             "workers": max(1, workers), "timeout_s": float(timeout_s), "quiet": not progress, "retry": retry or "",
             "until_decided": until_decided or 0}
    _run_grid(model, handoff, flags, run_dir, notes)
    return Result(run_dir)


def open(run_dir: str | os.PathLike) -> "Result":  # noqa: A001 - attackaudit.open, as the issue names it
    """The :class:`Result` of any run directory (``compare``'s or ``attackaudit run``'s).

    Raises ValueError (one line naming ``run_dir``) when it is missing or holds no results."""
    path = Path(run_dir)
    if not path.is_dir():
        raise ValueError(f"run_dir {path} does not exist")
    if not any((path / "jobs").glob("*.parquet")):
        raise ValueError(f"run_dir {path} holds no results (no jobs/*.parquet)")
    return Result(path)


class Result:
    """A run's answer, computed on first use by the functions behind ``attackaudit report``.

    Attributes
    ----------
    run_dir : Path
        The run directory (an ordinary one: ``attackaudit report run_dir`` works on it).
    execution : str
        How the jobs ran: isolated in worker processes, or in-process and why.
    notes : list of str
        What ``compare`` changed or left out, one line each (inputs cast to float32, a model in
        training mode attacked in eval mode, a filter that named no attack).

    Verdicts and notes name ``compare()``'s arguments ("rerun with samples=12"), not the command
    line's flags (``attackaudit.reports.wording``).
    """

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir = Path(run_dir)
        note = _read_json(self.run_dir / NOTEBOOK_FILE)
        self.execution: str = note.get("execution", "by `attackaudit run` (each job in a worker process)")
        self.model_name: str = note.get("model", "")
        self.notes: list[str] = list(note.get("notes", []))

    @cached_property
    def rows(self) -> pd.DataFrame:
        """One row per sample per job (docs/architecture.md, "The result schema")."""
        return load_run(self.run_dir)

    @cached_property
    def data(self) -> "ReportData":
        """Everything the report shows (``attackaudit.reports.ReportData``), computed once."""
        from attackaudit.reports import build
        from attackaudit.reports.run_files import load_exact

        manifest = read_manifest(self.run_dir) or {}
        return build(self.rows, [manifest], [self.run_dir], load_exact(self.run_dir))

    @property
    def leaderboard(self) -> pd.DataFrame:
        """One row per implementation and norm: optimality ξ, ASR, median distance, queries, time."""
        return self.data.leaderboard

    @property
    def flags(self) -> pd.DataFrame:
        """One row per finding: ``model, library, attack, family, norm, flag, evidence``."""
        from attackaudit.reports.wording import speak

        flags = self.data.flags
        if "evidence" not in flags.columns:
            return flags
        return flags.assign(evidence=[speak(v, "api") if isinstance(v, str) else v for v in flags["evidence"]])

    @property
    def recommendation(self) -> pd.DataFrame:
        """The trust verdict of every family and norm (``fidelity.recommend``'s rows), its text in
        ``compare()``'s words."""
        from attackaudit.reports.wording import report_advice, speak

        from attackaudit.fidelity.flag_kinds import family_counts

        rec = self.data.recommend.copy()
        advice = report_advice(rec)  # worded from fidelity's values, not read back from text
        for col in ("summary", "note"):
            if col in rec.columns:
                rec[col] = [speak(v, "api", advice) if isinstance(v, str) else v for v in rec[col]]
        if len(rec):  # flagged: a defect, never trusted; weaker: only a weakness (fidelity/flag_kinds.py)
            counts = family_counts(self.data.flags)
            rec["weaker"] = [counts.get((str(f), str(n)), (0, 0))[1] for f, n in zip(rec["family"], rec["norm"])]
        return rec

    def trust(self, family: str, norm: str) -> dict[str, Any]:
        """The trust verdict for ``family`` under ``norm``: the row of ``recommendation``.

        Its keys include ``verdict``, ``trust_set`` (the members, top pick first, each with its
        ``implementation``, ``optimality`` and 95% bootstrap ``optimality_ci``) and ``summary``
        (the verdict in one sentence). Raises ValueError naming what this run has instead."""
        rec = self.recommendation
        hit = rec[(rec["family"] == family) & (rec["norm"] == norm)] if len(rec) else rec
        if hit.empty:
            have = ", ".join(f"{f}/{n}" for f, n in zip(rec.get("family", []), rec.get("norm", []))) or "nothing"
            raise ValueError(f"family {family!r} under norm {norm!r} is not in this run; it has {have}")
        return {k: _plain(v) for k, v in hit.iloc[0].to_dict().items()}

    def plot(self, family: str, norm: str) -> "Figure":
        """Robust accuracy against ε of ``family``'s implementations under ``norm``, one panel per
        model (metamorphic twins left out), with the envelope (the per-sample best over every
        implementation of the norm). Raises ValueError when the run has no such results."""
        from matplotlib.figure import Figure

        from attackaudit.fidelity import robustness_curve

        impls = set(self.rows.loc[(self.rows["family"] == family) & (self.rows["norm"] == norm), "implementation"])
        # the metamorphic twins (``MODEL~shift``, ...) are the same network: their panels would repeat it
        curves = [c for c in self.data.curves if c.norm == norm and not c.is_twin
                  and any(k[0] in impls for k in c.by_impl)]
        if not curves:
            raise ValueError(f"family {family!r} under norm {norm!r} has no results in this run")
        fig = Figure(figsize=(5.2 * len(curves), 3.6), layout="constrained")
        for ax, curve in zip(fig.subplots(1, len(curves), squeeze=False)[0], curves):
            finite = curve.d_star[np.isfinite(curve.d_star)]
            x_max = float(finite.max()) * 1.08 if finite.size and finite.max() > 0 else 1.0
            lines = [("envelope", curve.d_star, None)] + [
                (f"{impl} {version} (ξ {curve.optimality.get((impl, version), float('nan')):.3f})", d, (impl, version))
                for (impl, version), d in sorted(curve.by_impl.items()) if impl in impls]
            for label, d, key in lines:
                eps, acc = robustness_curve(d)
                keep = eps <= x_max
                ax.step(np.append(eps[keep], x_max), np.append(acc[keep], acc[keep][-1]), where="post", label=label,
                        color="black" if key is None else None, linewidth=2.5 if key is None else 1.4)
            ax.set(xlim=(0, x_max), ylim=(-0.02, 1.02), xlabel=f"ε ({norm})", ylabel="robust accuracy",
                   title=f"{family} · {_short(curve.model, self.model_name)}")
            ax.legend(fontsize=7)
        return fig

    def report(self, path: str | os.PathLike | None = None,
               formats: Iterable[str] = ("md", "html", "json")) -> dict[str, Path]:
        """Write ``attackaudit report``'s files (tables, ``report.md|html|json``) into ``path``
        (default: the run directory); returns ``{file name: path}``."""
        from attackaudit.reports import write_report_data
        from attackaudit.reports.wording import report_advice, speak_document

        written = write_report_data(self.data, Path(path) if path is not None else self.run_dir, formats)
        advice = report_advice(self.data.recommend)  # worded from fidelity's values, not read back from text
        for name in ("report.md", "report.html", "report.json"):  # the reader called compare(), not the CLI
            if name in written:
                written[name].write_text(speak_document(written[name].read_text(), "api", advice))
        return written

    def _repr_html_(self) -> str:
        """The first-screen answer in Jupyter: per family and norm, the verdict and whom to trust."""
        from attackaudit.fidelity.flag_kinds import WEAKNESS_FLAGS

        rec = self.recommendation
        head = (f"<p><b>attackaudit</b> · {html.escape(str(self.run_dir))} · {len(self.rows)} rows · "
                f"{html.escape(self.execution)}</p>"
                + "".join(f"<p>note: {html.escape(n)}</p>" for n in self.notes))
        if rec.empty:
            return head + "<p>No implementation produced results.</p>"
        body = "".join(
            f"<tr><td>{html.escape(str(r['family']))}</td><td>{html.escape(str(r['norm']))}</td>"
            f"<td>{html.escape(str(r.get('verdict', '')))}</td><td>{html.escape(_members(r))}</td>"
            f"<td>{html.escape(str(r.get('flagged', '')))}</td><td>{html.escape(str(r.get('weaker', '')))}</td></tr>"
            for _, r in rec.iterrows())
        return (head + "<table><thead><tr><th>family</th><th>norm</th><th>verdict</th>"
                "<th>trust (global ξ, 95% CI)</th><th>flagged</th><th>weaker</th></tr></thead>"
                f"<tbody>{body}</tbody></table><p>flagged: a defect, never trusted; weaker: only a weakness "
                f"({', '.join(sorted(WEAKNESS_FLAGS))}), still trusted. .trust(family, norm) for the reasons, .flags for the findings "
                "(their severity), .report(path) for the full report.</p>")

    def __repr__(self) -> str:
        return f"Result({str(self.run_dir)!r}; {self.execution})"

    def __str__(self) -> str:
        """``print(result)``: the run, then per family and norm the verdict and whom to trust."""
        rec = self.recommendation
        lines = [repr(self), *(f"note: {n}" for n in self.notes)] + [
            f"{r['family']} {r['norm']}: {r.get('verdict', '')}: {_members(r)}" for _, r in rec.iterrows()]
        return "\n".join(lines if len(rec) else lines + ["No implementation produced results."])


# -- compare's steps ------------------------------------------------------------------------------
def _run_grid(model: "nn.Module", handoff: "Handoff", flags: dict[str, Any], run_dir: Path,
              notes: list[str]) -> None:
    """Resolve ``flags`` into the run's config, run its jobs (isolated in workers, or in this
    process when the model could not be handed over) and write NOTEBOOK_FILE: how they ran, and
    ``notes`` with the run's own (each also printed on stderr), in ``compare()``'s words."""
    from attackaudit.reports.wording import speak
    from attackaudit.run.config import ConfigError, resolve
    from attackaudit.run.executors import InProcessExecutor
    from attackaudit.run.faults import HarnessFault
    from attackaudit.run.sequential import run_grid
    from attackaudit.sources.user_model import registered

    def say(note: str) -> None:
        notes.append(speak(note, "api"))
        print(f"attackaudit: note: {notes[-1]}", file=sys.stderr)

    for note in list(notes):
        print(f"attackaudit: note: {note}", file=sys.stderr)

    execution = (f"isolated: each job in one of {flags['workers']} worker processes, each with its own copy of the "
                 f"model" if handoff.isolated else
                 f"in-process: {handoff.reason}; the jobs ran one after another in this Python process, "
                 "without isolation or time limit")
    try:
        config = resolve(None, flags)
        with registered(model, handoff):
            summary = run_grid(config, executor=None if handoff.isolated else InProcessExecutor(), say=say)
    except ConfigError as exc:
        message = str(exc)
        if "holds a run with a different config" in message:  # another model, data or grid in ``out``
            raise ValueError(f"out: {message.split(';')[0]}; pass another out") from None
        raise ValueError(speak(message, "api")) from None
    except HarnessFault as exc:  # nothing ran: say why, in the caller's words, with the way around it
        message = speak(str(exc), "api")
        if handoff.isolated:  # in-process jobs re-import nothing
            head, _, where = message.rpartition(" (the traceback: ")
            message = f"{head or message}, or pass workers=0 to run the jobs in this process" + (
                f" (the traceback: {where}" if head else "")
        raise HarnessFault(message) from None
    note = {"execution": execution, "isolated": handoff.isolated, "model": config.model_names[handoff.source],
            "model_source": handoff.source, "fingerprint": handoff.fingerprint, "summary": summary.line(),
            "notes": notes}
    atomic_write_bytes(run_dir / NOTEBOOK_FILE, (json.dumps(note, indent=2) + "\n").encode())


# -- helpers --------------------------------------------------------------------------------------
def _members(row: Mapping[str, Any]) -> str:
    from attackaudit.reports.formats import f_ci, f_opt

    members = row.get("trust_set") or []
    if not members:
        return str(row.get("note") or row.get("summary") or "none")
    parts = []
    for m in members:
        ci = m.get("optimality_ci") or [float("nan")] * 2
        interval = f", {f_ci(*ci)}" if f_ci(*ci) else ""  # ξ and its interval at one precision
        parts.append(f"{m.get('implementation', '?')} ({f_opt(m.get('optimality', float('nan')))}{interval})")
    return "; ".join(parts)


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers, so a verdict prints and compares plainly."""
    return value.item() if isinstance(value, np.generic) else value


def _short(model: str, name: str) -> str:
    """A compare() model's source is a long path: its class name and twin suffix stand for it."""
    if name and model.startswith("module:") and "/models/" in model:
        return name + model[model.rfind(":load") + len(":load"):]
    return model


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
