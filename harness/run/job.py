"""One job: one model × one attack implementation (one norm) on the run's subset.

``execute_job`` is a pure function of its ``Job``: it loads the model, data and spec itself,
attacks through a QueryTracker, re-checks what came back on the unwrapped model, and returns the
per-sample rows. A crashing or misbehaving attack becomes rows with ``status`` and ``error``;
whatever the tracker saw before the failure is kept.
"""
from __future__ import annotations

import hashlib
import json
import random
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Callable, TextIO

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from attackaudit.adapters import AttackKind, AttackSpec, SpecSource
from attackaudit.adapters.release import Unsupported

import attackaudit.sources.run_twins as run_twins
from attackaudit.measure.criterion import Criterion, as_criterion
from attackaudit.measure.distance import lp_norm
from attackaudit.measure.minimal import BallRecord, minimal_search
from attackaudit.results.schema import DEFAULT_BUDGET, PERM, ROW_COLUMNS, UNSUPPORTED, AttackId, Twin, error_line
from attackaudit.measure.success import is_success
from attackaudit.measure.tracker import QueryTracker
from attackaudit.run.outcome import OK, InvalidOutput, Outcome, output_check, output_problem  # noqa: F401
from attackaudit.sources.zoo import perm_twin_classes

if TYPE_CHECKING:  # the subset's type only: the data module loads datasets, a worker imports it lazily
    from attackaudit.sources.subset import Subset

#: ``progress(samples done, samples in the job, fraction of the budget used in the running batch)``
JobProgress = Callable[[int, int, float], None]



@dataclass(frozen=True)
class Job:
    """Everything a worker needs to run one job, picklable and hashable."""

    run: str
    #: which model the job runs on: its base model (a source) and which twin of it ("" for itself)
    twin: Twin
    spec_key: str  # the spec's catalogue key (``attack``), the worker finds the spec by it
    # dataset ... steps_scale, threat_model, allow_download, trust_checkpoint: the config's values of
    # the parameter table's job rows (harness/results/parameters.py; runner._job copies them), with
    # RunConfig's defaults (tests/test_parameters.py holds both)
    dataset: str = "digits"
    samples: int = 32
    seed: int = 0
    budget: int = DEFAULT_BUDGET
    targeted: bool = False
    device: str = "cpu"
    batch_size: int = 0  # 0: the whole subset in one batch
    steps_scale: float = 1.0  # scales each spec's iteration count (quick runs, tests)
    plugins: tuple[str, ...] = field(default=())
    model_source: str = ""  # empty: the embedded zoo
    model_dir: str = ""  # RobustBench layout root ("" = ./models)
    threat_model: str = ""  # RobustBench threat model for sources that name none ("" = Linf)
    allow_download: bool = False  # may the model source download weights
    trust_checkpoint: bool = False  # unpickle checkpoints in full
    #: which attack implementation and norm ``spec_key`` is; None: read from the key (a Job made by hand)
    attack: AttackId = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not isinstance(self.twin, Twin):
            raise TypeError(f"Job.twin must be a Twin (RunConfig.twins reads model names), got {self.twin!r}")
        if self.attack is None:
            object.__setattr__(self, "attack", AttackId.from_key(self.spec_key))

    @property
    def model(self) -> str:
        """The model's name, as rows' ``model`` column and the job id show it."""
        return self.twin.name

    @property
    def spec_source(self) -> SpecSource:
        """Where the job's spec is defined: its ``--plugin`` file, else the built-in adapter or
        entry point named by the attack's library. The worker imports just that (``resolve_spec``)."""
        return SpecSource(self.attack.library, self.plugins[0] if self.plugins else "")

    @property
    def job_id(self) -> str:
        fields = asdict(self) | {"run": "", "model": self.model}
        # loading permissions never change results; the RobustBench options only count when set,
        # so the ids of zoo jobs stay what they were before these fields existed; the twin is in
        # the id as the model's name, the attack as the spec key (ids made before these were typed)
        for key in ("allow_download", "trust_checkpoint", "twin", "attack"):
            fields.pop(key)
        for key in ("model_dir", "threat_model"):
            if not fields[key]:
                fields.pop(key)
        blob = json.dumps(fields, sort_keys=True).encode()
        safe = "".join(c if c.isalnum() else "-" for c in f"{self.model}__{self.spec_key}")
        return f"{safe}__{hashlib.sha256(blob).hexdigest()[:10]}"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def attack_with_tracker(spec: AttackSpec, model: nn.Module, inputs: Tensor, labels: Tensor, *, budget: int,
                        criterion: Criterion | None = None, targets: Tensor | None = None,
                        on_progress: Callable[[int], None] | None = None, clean_logits: Tensor | None = None,
                        record: BallRecord | None = None) -> tuple[QueryTracker, Tensor | None, str]:
    """``attack_outcome`` with its outcome as one line for a person (``Outcome.line``: "" when the
    call returned)."""
    tracker, returned, outcome = attack_outcome(spec, model, inputs, labels, budget=budget, criterion=criterion,
                                                targets=targets, on_progress=on_progress, clean_logits=clean_logits,
                                                record=record)
    return tracker, returned, outcome.line


def attack_outcome(spec: AttackSpec, model: nn.Module, inputs: Tensor, labels: Tensor, *, budget: int,
                   criterion: Criterion | None = None, targets: Tensor | None = None,
                   on_progress: Callable[[int], None] | None = None, clean_logits: Tensor | None = None,
                   record: BallRecord | None = None) -> tuple[QueryTracker, Tensor | None, Outcome]:
    """Run ``spec`` on ``inputs`` (N×C×H×W) and ``labels`` (N) through a fresh QueryTracker;
    returns (tracker, what the attack returned, the call's outcome).

    ``criterion``: ``Untargeted()`` (the default) or ``Targeted(targets)``; ``targets=`` (N) is
    the older spelling of ``criterion=Targeted(targets)``. Fixed-ε specs go through the minimal-ε
    search, which fills ``record`` when given (``BallRecord.empty(inputs)``). An exception becomes
    the outcome (invalid, unsupported or a crash); the tracker (and the record) keep what they saw before it.
    """
    if criterion is not None and targets is not None:
        raise ValueError("give attack_with_tracker either criterion= or targets=, not both")
    criterion = as_criterion(criterion if criterion is not None else targets)
    tracker = QueryTracker(model, inputs, labels, norm=spec.norm, budget=budget, criterion=criterion,
                           on_progress=on_progress, clean_logits=clean_logits)
    try:
        if spec.kind is AttackKind.MINIMAL:
            # a private copy: some attacks change their input in place (adv-lib's tr detaches it)
            returned = spec.run(tracker, inputs.clone(), labels.clone(), **criterion.attack_kwargs())
        else:
            returned = _search_fixed(spec, tracker, inputs, labels, criterion, budget, record)
    except InvalidOutput as exc:
        return tracker, None, exc.outcome
    except Unsupported as exc:  # our adapter cannot call this release so: not the library's crash
        return tracker, None, Outcome(UNSUPPORTED, str(exc))
    except Exception as exc:
        return tracker, None, Outcome("crash", error_line(exc))
    return tracker, returned, OK


def _search_fixed(spec: AttackSpec, tracker: QueryTracker, inputs: Tensor, labels: Tensor, criterion: Criterion,
                  budget: int, record: BallRecord | None) -> Tensor:
    """A fixed-ε spec made minimal by ``minimal_search``, every call and check through ``tracker``."""
    def attack(idx: Tensor, x: Tensor, eps: float | Tensor) -> Tensor:
        tracker.expect(idx)  # the search attacks a subset: tell the tracker which
        try:
            adv = spec.run(tracker, x.clone(), labels[idx], eps=eps, **criterion.take(idx).attack_kwargs())
        finally:
            tracker.expect(None)
        checked = output_check(adv, x)
        if not checked.ok:
            raise InvalidOutput(checked)
        # a default output (zeros, a constant, one row for several images) is the call's failure,
        # never its success: put back the input before the search checks it (fallback_output)
        fallback, words = tracker.fallbacks(adv, idx, closer_only=False)
        if bool(fallback.any()):
            adv = torch.where(fallback.view(-1, *[1] * (adv.dim() - 1)).to(adv.device), x.to(adv.dtype), adv)
            if record is not None:
                record.note_fallback(idx.cpu(), words)
        return adv

    def success(x: Tensor, idx: Tensor) -> Tensor:
        # a counted query through the tracker (README "How a run is measured"): past the
        # budget it answers "not adversarial", so the search cannot steer for free
        tracker.expect(idx)
        try:
            with torch.no_grad():
                return tracker.judge(tracker(x), idx)
        finally:
            tracker.expect(None)

    return minimal_search(attack, inputs, spec.norm, success, lambda: tracker.queries, budget,
                          per_sample_eps=spec.per_sample_eps, clean_adversarial=tracker.clean_adversarial,
                          record=record)


@dataclass
class Companions:
    """The batch-composition twin's companions (``run_twins.companions``): P images of the dataset
    outside the job's subset, attacked in the job's batch and never reported. ``inputs``:
    P×C×H×W, ``labels``: P, ``indices``: their dataset indices, ``criterion``: their targets."""

    inputs: Tensor
    labels: Tensor
    indices: np.ndarray
    criterion: Criterion


@dataclass
class BatchOutcome:
    """One batch of a job after the attack: its rows of the subset, the tracker that measured it,
    what the attack returned (None after an error), the call's outcome, and the fixed-ε search's record."""

    rows: slice
    tracker: QueryTracker
    returned: Tensor | None
    outcome: Outcome
    record: BallRecord | None


def job_rows(job: Job, spec: AttackSpec, library_version: str, model: nn.Module, subset: Subset,
             criterion: Criterion | Tensor | None, log: TextIO | None = None, progress: JobProgress | None = None,
             clean_logits: Tensor | None = None, companions: Companions | None = None) -> pd.DataFrame:
    """Attack ``subset`` with ``spec`` on ``model`` and build the per-sample rows (``ROW_COLUMNS``).

    ``criterion``: ``Untargeted()`` or ``Targeted(targets)`` (the N targets of the subset; the
    older form, the targets or None, is read as these). ``progress(samples done, samples, budget
    fraction used in the current batch)`` is called as the job goes: after each batch, and while
    one runs. ``clean_logits`` (N×classes, from ``clean_logits``) spares each batch's tracker its
    own clean forward. A run twin (``attackaudit.sources.run_twins``) runs the attack with another seed
    (``M~seed``), one sample per call (``M~split``) or in another arrangement (``M~batch``: reversed,
    with ``companions`` in its batch, whose rows are dropped)."""
    spec = run_twins.twin_spec(spec, job.twin)
    seed_everything(run_twins.attack_seed(job.twin, job.seed))
    device = torch.device(job.device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # libraries that pick "the" GPU (ART) pick this one
    inputs, labels = subset.inputs.to(device), subset.labels.to(device)
    criterion = as_criterion(criterion).to(device)
    model = model.to(device).eval()
    if job.twin.kind == PERM:  # the twin's classes are σ of the base model's
        labels, targets = perm_twin_classes(model, inputs, labels, criterion.targets, clean_logits)
        criterion = as_criterion(targets)
    order = run_twins.arrangement(job.twin, len(labels))  # the batch-composition twin's order
    indices = subset.indices
    if order is not None:
        inputs, labels, criterion, indices = inputs[order], labels[order], criterion.take(order), indices[order.numpy()]
        clean_logits = None  # computed in other batches: the tracker takes its own clean forward
    n, extra = len(labels), 0
    if companions is not None:  # the batch-composition twin's other batch-mates, after the run's images
        extra = len(companions.labels)
        inputs = torch.cat([inputs, companions.inputs.to(device)])
        labels = torch.cat([labels, companions.labels.to(device)])
        criterion = criterion.extend(companions.criterion.to(device))
        indices = np.concatenate([indices, companions.indices])
        clean_logits = None
    start = time.perf_counter()
    before = rng_state()
    outcomes = _attack_batches(job, spec, model, inputs, labels, criterion, log, progress, clean_logits, extra)
    rng_used = rng_state() != before
    wall = time.perf_counter() - start
    frames = [_batch_frame(o, spec, inputs[o.rows], labels[o.rows], criterion.take(o.rows),
                           indices[o.rows.start:o.rows.stop]) for o in outcomes]
    rows = pd.concat(frames, ignore_index=True).iloc[:n]  # the companions' rows are not results
    if order is not None:  # back in the subset's order
        rows = rows.iloc[np.argsort(order.numpy(), kind="stable")].reset_index(drop=True)
    rows = rows.assign(
        run=job.run, job_id=job.job_id, model=job.model, base_model=job.twin.base_model, twin=job.twin.kind,
        dataset=subset.dataset,
        subset_hash=subset.hash, library=spec.library, library_version=library_version,
        attack=spec.name, implementation=spec.implementation, family=spec.family, norm=spec.norm,
        kind=spec.kind.value, params_hash=spec.params_hash,
        params=json.dumps(dict(spec.params), sort_keys=True, default=str),
        targeted=job.targeted, budget=job.budget, wall_s=wall, rng_used=rng_used)
    return rows[ROW_COLUMNS]


def rng_state() -> tuple:
    """The global random states an attack may draw from (torch's CPU and CUDA generators, NumPy's,
    Python's ``random``), comparable with ``==``: an attack that moved one of them is randomised,
    whatever its spec declares (``rng_used``)."""
    cuda = tuple(bytes(s.numpy()) for s in torch.cuda.get_rng_state_all()) if torch.cuda.is_initialized() else ()
    state = np.random.get_state()
    return (bytes(torch.get_rng_state().numpy()), cuda, state[0], bytes(state[1].tobytes()), state[2:],
            random.getstate())


def _attack_batches(job: Job, spec: AttackSpec, model: nn.Module, inputs: Tensor, labels: Tensor,
                    criterion: Criterion, log: TextIO | None, progress: JobProgress | None,
                    clean_logits: Tensor | None, companions: int = 0) -> list[BatchOutcome]:
    """The attack on each batch of the job (``run_twins.batch_size``), one fresh tracker per batch;
    the last ``companions`` samples are the batch-composition twin's companions."""
    n = len(labels)
    outcomes = []
    for sl in _batches(n, run_twins.batch_size(job.twin, job.batch_size, n - companions, companions)):
        on_queries = None
        if progress is not None:
            def on_queries(used: int, done: int = sl.start) -> None:
                progress(done, n, min(1.0, used / job.budget))
        record = BallRecord.empty(inputs[sl]) if spec.kind is AttackKind.FIXED else None
        tracker, returned, outcome = attack_outcome(
            spec, model, inputs[sl], labels[sl], budget=job.budget, criterion=criterion.take(sl),
            on_progress=on_queries, clean_logits=clean_logits[sl].to(inputs.device) if clean_logits is not None else None,
            record=record)
        tracker.on_progress = None  # reading its results later must not report this batch again
        if progress is not None:
            progress(sl.stop, n, 0.0)
        if not outcome.ok and log is not None:
            log.write(f"batch {sl.start}:{sl.stop}: {outcome.line}\n{traceback.format_exc()}\n")
        outcomes.append(BatchOutcome(sl, tracker, returned, outcome, record))
    return outcomes


def _batch_outcome(batch: BatchOutcome, x: Tensor) -> Outcome:
    """A batch's outcome: its attack call's, or, when the call returned, what it returned checked
    against the output contract."""
    return batch.outcome if not batch.outcome.ok else output_check(batch.returned, x)


def _batch_frame(outcome: BatchOutcome, spec: AttackSpec, x: Tensor, y: Tensor, criterion: Criterion,
                 samples: np.ndarray) -> pd.DataFrame:
    """The per-sample columns of one batch (``x``: N×C×H×W, ``y``: N): the returned output
    re-checked on the unwrapped model, the tracker's counts and its re-checked bests."""
    tracker, n = outcome.tracker, len(y)
    result = _batch_outcome(outcome, x)
    status = result.status
    ret_adv = np.zeros(n, dtype=bool)
    ret_dist = np.full(n, np.inf)
    fallback = outcome.record.fallback if outcome.record is not None else [""] * n
    tracker.drop_shared_bests()  # a default the attack queried itself never counts (fallback_output)
    if status == "ok":
        adv = outcome.returned.detach().to(device=x.device, dtype=x.dtype).clamp(0, 1)
        # a default output closer than anything the queries found never counts (fallback_output)
        excluded, words = tracker.fallbacks(adv)
        fallback = [w or f for w, f in zip(words, fallback)]
        ret_adv = tracker.offer(adv, exclude=excluded).cpu().numpy()
        dist = lp_norm(adv - x, spec.norm).cpu().numpy().astype(float)
        ret_dist = np.where(ret_adv, dist, np.inf)
    dropped = tracker.recheck()  # a best that is not adversarial on the model is not reported
    best = tracker.best_adversarial - x
    found = torch.isfinite(tracker.best_distance).cpu().numpy()
    return pd.DataFrame({
        "sample": samples,
        "label": y.cpu().numpy(),
        "clean_correct": tracker.clean_correct.cpu().numpy(),
        "target": criterion.target_column(n),
        "forwards": tracker.forwards.cpu().numpy(),
        "backwards": tracker.backwards.cpu().numpy(),
        "refused": tracker.refused.cpu().numpy(),
        "best_dropped": dropped.cpu().numpy(),
        "best_distance": tracker.best_distance.cpu().numpy().astype(float),
        **{f"best_{nm}": np.where(found, lp_norm(best, nm).cpu().numpy().astype(float), np.inf)
           for nm in ("l0", "l1", "l2", "linf")},
        "returned_distance": ret_dist,
        "returned_adversarial": ret_adv,
        "status": status,
        "error": result.detail,
        "invalid_reason": result.invalid_reason,
        **_defect_columns(tracker, x, outcome.returned if status == "ok" else None, outcome.record),
        "returned_fallback": fallback,
        "best_margin": tracker.best_margin().cpu().numpy().astype(float),
    })


def _strict_class(logits: Tensor) -> Tensor:
    """Per row of ``logits`` (N×classes), the class whose logit is strictly above every other, or
    −1 on a tie at the top (the one success rule: no class wins a tie)."""
    top = logits.argmax(1)
    return torch.where(is_success(logits, top, top), top, torch.full_like(top, -1))


def _defect_columns(tracker: QueryTracker, x: Tensor, returned: Tensor | None,
                    record: BallRecord | None) -> dict[str, np.ndarray]:
    """The per-sample columns the defect rules of fidelity/defects.py read, for one batch (N):
    ``returned_class``, the class the attack's output reached (the returned row of a minimal
    attack, the row returned at the largest ε the search tried for a fixed-ε one; −1 when there is
    none or the top is tied), judged once on the unwrapped model, uncounted like the re-check of
    bests; and the minimal-ε search's ``BallRecord`` (``ball_*``, ``eps_fail_*``; 0 calls and NaN
    for minimal attacks)."""
    n = len(x)
    final = record.widest if record is not None else returned
    returned_class = np.full(n, -1)
    if final is not None:
        with torch.no_grad():
            logits = tracker.model(final.detach().to(device=x.device, dtype=x.dtype).clamp(0, 1))
        returned_class = _strict_class(logits).cpu().numpy()
    if record is None:
        nan = np.full(n, np.nan)
        return {"returned_class": returned_class, "ball_calls": np.zeros(n, dtype=int), "ball_out": np.zeros(n, dtype=int),
                "ball_worst_ratio": nan, "ball_worst_eps": nan, "eps_fail_max": nan, "eps_fail_ratio": nan,
                "eps_success": nan, "ball_mean_ratio": nan}
    calls = record.calls.numpy()
    return {"returned_class": returned_class, "ball_calls": calls, "ball_out": record.out.numpy(),
            **{column: getattr(record, name).numpy().astype(float) for column, name in (
                ("ball_worst_ratio", "worst_ratio"), ("ball_worst_eps", "worst_eps"),
                ("eps_fail_max", "fail_eps"), ("eps_fail_ratio", "fail_ratio"), ("eps_success", "success_eps"))},
            "ball_mean_ratio": np.where(calls > 0, record.ratio_sum.numpy() / np.maximum(calls, 1), np.nan)}


def failure_rows(job: Job, subset: Subset, status: str, error: str, spec: AttackSpec | None = None,
                 library_version: str = "", clean_correct: np.ndarray | None = None) -> pd.DataFrame:
    """Rows for a job that produced nothing (worker died, timed out, spec missing)."""
    attack = job.attack
    return pd.DataFrame({
        "run": job.run, "job_id": job.job_id, "model": job.model, "base_model": job.twin.base_model,
        "twin": job.twin.kind, "dataset": subset.dataset,
        "subset_hash": subset.hash, "sample": subset.indices, "label": subset.labels.numpy(),
        "clean_correct": clean_correct if clean_correct is not None else False,
        "library": attack.library, "library_version": library_version, "attack": attack.name,
        "implementation": attack.implementation, "family": spec.family if spec else "", "norm": attack.norm,
        "kind": spec.kind.value if spec else "", "params_hash": spec.params_hash if spec else "",
        "params": json.dumps(dict(spec.params), sort_keys=True, default=str) if spec else "{}",
        "targeted": job.targeted, "target": -1, "budget": job.budget, "forwards": 0, "backwards": 0,
        "refused": 0, "best_dropped": 0, "best_distance": np.inf, "best_l0": np.inf, "best_l1": np.inf, "best_l2": np.inf,
        "best_linf": np.inf, "returned_distance": np.inf, "returned_adversarial": False,
        "status": status, "error": error, "invalid_reason": "", "wall_s": 0.0, "returned_class": -1, "ball_calls": 0, "ball_out": 0,
        "ball_worst_ratio": np.nan, "ball_worst_eps": np.nan, "eps_fail_max": np.nan, "eps_fail_ratio": np.nan,
        "returned_fallback": "", "best_margin": np.nan, "rng_used": False, "eps_success": np.nan,
        "ball_mean_ratio": np.nan,
    })[ROW_COLUMNS]


def clean_logits(model: nn.Module, inputs: Tensor, batch_size: int) -> Tensor:
    """The model's logits on ``inputs`` (N×…), in the job's batches (same batches, same numbers)."""
    with torch.no_grad():
        return torch.cat([model(inputs[sl]) for sl in _batches(len(inputs), batch_size)])


def _batches(n: int, batch_size: int) -> list[slice]:
    size = batch_size if batch_size and batch_size > 0 else n
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]
