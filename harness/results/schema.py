"""The per-sample result schema (docs/architecture.md "The result schema"), torch-free so fidelity can share it."""
from __future__ import annotations

from dataclasses import dataclass

#: the twin kinds (the ``twin`` column's values; "" for a model itself). The model twins change the
#: network in a way a sound attack must not notice: ``SHIFT`` (logits minus their log-sum-exp),
#: ``PERM`` (classes permuted). The run twins run the attack another way on the same network:
#: ``SEED`` (another seed), ``SPLIT`` (one image per call), ``BATCH`` (another batch arrangement)
SHIFT, PERM, SEED, SPLIT, BATCH = "shift", "perm", "seed", "split", "batch"
#: added on every model by ``--metamorphic``
MODEL_TWINS = (SHIFT, PERM)
#: added on one model by ``--metamorphic``
RUN_TWINS = (SEED, SPLIT, BATCH)
#: every twin kind, in the order ``--metamorphic`` adds them (the ``twin`` column; "" for a model itself)
TWIN_KINDS = MODEL_TWINS + RUN_TWINS
#: what joins a base model and its twin kind in a model's name: ``digits-mlp~shift``
TWIN_SEP = "~"


@dataclass(frozen=True)
class Twin:
    """Which model a job runs on: its base model and the twin it is of it ("" for the model itself).
    Rows carry both as the ``base_model`` and ``twin`` columns; ``name`` is the ``model`` column."""

    base_model: str
    kind: str = ""

    def __post_init__(self) -> None:
        if self.kind and self.kind not in TWIN_KINDS:
            raise ValueError(f"unknown twin {self.kind!r}; twins are {', '.join(TWIN_KINDS)}")

    @property
    def name(self) -> str:
        """The model's name, as the command line gives it and rows show it."""
        return f"{self.base_model}{TWIN_SEP}{self.kind}" if self.kind else self.base_model

    @property
    def is_twin(self) -> bool:
        return bool(self.kind)

    @property
    def is_run_twin(self) -> bool:
        return self.kind in RUN_TWINS

    def of(self, kind: str) -> Twin:
        """The ``kind`` twin of this model's base model."""
        return Twin(self.base_model, kind)


def as_twin(model: Twin | str) -> Twin:
    """``model`` as a ``Twin``: a ``Twin`` as it is, a string as the model itself (its name is not
    read for a twin suffix: ``parse_model_name`` does that where names come in)."""
    return model if isinstance(model, Twin) else Twin(str(model))


def parse_model_name(name: str) -> Twin:
    """The one reader of a model name's twin suffix (``NAME~KIND``, KIND one of ``TWIN_KINDS``;
    a "~" anywhere else, as in a path, is part of the name): where the command line, a config or
    the API gives a model, and where rows written before the ``twin`` column are loaded."""
    base, sep, kind = str(name).rpartition(TWIN_SEP)
    return Twin(base, kind) if sep and base and kind in TWIN_KINDS else Twin(str(name))


#: which model a row's job ran on (``Twin``): absent in runs written before them, derived on loading
TWIN_COLUMNS = ["base_model", "twin"]


def with_twin_columns(rows):
    """``rows`` (a DataFrame with a ``model`` column) with ``base_model`` and ``twin`` derived from
    its model names where they are missing (rows written before those columns existed)."""
    if all(c in rows.columns for c in TWIN_COLUMNS):
        return rows
    twins = [parse_model_name(m) for m in rows["model"]]
    return rows.assign(base_model=[t.base_model for t in twins], twin=[t.kind for t in twins])


def with_models(rows, models):
    """``rows`` (a DataFrame) on other models: ``models`` gives each row its model, a ``Twin`` or a
    name (its twin suffix read by ``parse_model_name``), and the ``model``, ``base_model`` and
    ``twin`` columns are written from it together. The one way to rename a table's models: a
    ``model`` column reassigned alone leaves the twin columns naming the old model."""
    twins = [m if isinstance(m, Twin) else parse_model_name(m) for m in models]
    return rows.assign(model=[t.name for t in twins], base_model=[t.base_model for t in twins],
                       twin=[t.kind for t in twins])


def implementation_name(library: str, name: str, variant: str = "") -> str:
    """The one writer of an implementation's name, ``library/name[:variant]`` (the ``implementation``
    column; with the norm, one line of the leaderboard)."""
    return f"{library}/{name}:{variant}" if variant else f"{library}/{name}"


def with_implementation(rows):
    """``rows`` (a DataFrame with ``library`` and ``attack``) with the ``implementation`` column made
    by ``implementation_name`` where it is missing (a table made by hand)."""
    if "implementation" in rows.columns:
        return rows
    return rows.assign(implementation=[implementation_name(lib, attack) for lib, attack in
                                       zip(rows["library"].astype(str), rows["attack"].astype(str))])


@dataclass(frozen=True)
class AttackId:
    """Which attack implementation a spec, a job or a row is: its library, the attack's name there,
    the variant that tells two specs of one attack and norm apart ("" for none) and the norm.
    Rows carry it as the ``library``, ``attack``, ``implementation`` and ``norm`` columns."""

    library: str
    name: str
    variant: str = ""
    norm: str = ""

    @property
    def implementation(self) -> str:
        return implementation_name(self.library, self.name, self.variant)

    @property
    def key(self) -> str:
        """The spec's catalogue key, ``library/name[:variant]/norm``."""
        return f"{self.implementation}/{self.norm}"

    @classmethod
    def from_key(cls, key: str) -> AttackId:
        """A catalogue key read (a job made from its key alone)."""
        implementation, _, norm = key.rpartition("/")
        return cls.from_implementation(implementation, norm)

    @classmethod
    def from_implementation(cls, implementation: str, norm: str = "") -> AttackId:
        """The one reader of an implementation's name, ``library/name[:variant]`` (``implementation_name``'s
        inverse), for a job or a hand-made row that gives the name alone."""
        library, _, attack = implementation.partition("/")
        name, _, variant = attack.partition(":")
        return cls(library, name, variant, norm)


#: evidence for fallback outputs, batch composition and ε use (absent in older runs, where those
#: rules do not apply): ``returned_fallback``, "" or what the attack returned instead of a search
#: result that would have counted as broken (a default output: "all-zero image", "constant 0.5
#: image", "one output shared by 5 images"; harness/measure/fallback.py), never counted;
#: ``best_margin``, the best's success margin on the unwrapped model relative to its largest logit
#: (NaN without a best; ~0: an exact decision-boundary point); ``rng_used``, whether the attack
#: call moved the global random state of torch, NumPy or ``random`` (measured, not declared);
#: ``eps_success``, the smallest ε a fixed-ε attack was called with whose returned row was
#: adversarial inside the ball (inf: none; NaN: a minimal attack), and ``ball_mean_ratio``, the
#: mean returned-row distance / ε over its calls (fidelity/eps_use.py)
FALLBACK_COLUMNS = ["returned_fallback", "best_margin", "rng_used", "eps_success", "ball_mean_ratio"]

#: per-sample evidence for the defect rules of fidelity/defects.py (absent in older runs, where
#: those rules do not apply): the class the attack's output reached (``returned_class``; −1 for
#: none or a tie), and what a fixed-ε attack returned for the balls the minimal-ε search gave it
#: (harness/measure/minimal.py ``BallRecord``: calls, calls outside the ball, the largest distance/ε and
#: its ε, the largest ε at which a moved row failed and its distance/ε; 0 and NaN for minimal attacks)
DEFECT_COLUMNS = ["returned_class", "ball_calls", "ball_out", "ball_worst_ratio", "ball_worst_eps",
                  "eps_fail_max", "eps_fail_ratio", *FALLBACK_COLUMNS]

#: forwards + backwards allowed per sample when a run names no budget: the one default of
#: ``RunConfig.budget``, ``Job.budget`` and ``QueryTracker``'s ``budget`` (``attackaudit.compare``'s
#: signature repeats it as a value for its API reference; tests/test_defaults_documented.py holds them equal)
DEFAULT_BUDGET = 2000

ROW_COLUMNS = [
    "run", "job_id", "model", *TWIN_COLUMNS, "dataset", "subset_hash", "sample", "label", "clean_correct",
    "library", "library_version", "attack", "implementation", "family", "norm", "kind",
    "params_hash", "params", "targeted", "target", "budget", "forwards", "backwards", "refused",
    "best_dropped",  # stored bests the end-of-job re-check found not adversarial (absent in old runs)
    "best_distance", "best_l0", "best_l1", "best_l2", "best_linf", "returned_distance",
    "returned_adversarial", "status", "error", "invalid_reason", "wall_s",
    *DEFECT_COLUMNS,
]

#: a row's ``status``: ``unsupported`` means attackaudit's adapter cannot call this release of the
#: library the way the job needs (``adapters/release.py`` ``Unsupported``): our limitation, shown
#: apart from the library's crashes and never counted as one, nor as the attack's disappearance.
#: ``harness_error``: the job's worker failed before the attack started (it could not start, import
#: the spec, unpickle or load the model, read the data): our fault or the caller's set-up, never the
#: library's; such rows carry no result, are left out of every analysis, and the job runs again on
#: the next call of the same run
STATUSES = ("ok", "crash", "timeout", "invalid", "unsupported", "harness_error")
UNSUPPORTED = "unsupported"
HARNESS_ERROR = "harness_error"

def error_line(exc: BaseException) -> str:
    """A row's ``error``: the first line of ``Type: message``, at most 500 characters (the
    traceback goes to the job's log). Here, below the runner and the sources, because both write it."""
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:500] if text else type(exc).__name__


#: the phrase of an ``invalid`` row's error that means the attack returned values outside [0, 1]
OUT_OF_BOX_ERROR = "outside the [0, 1] box"

#: why an ``invalid`` row's batch broke the output contract (its ``invalid_reason``; "" for every
#: other status), each with the phrase of the error ``harness/run/outcome.py`` ``output_check`` writes for it:
#: not a tensor, another shape, an integer dtype, NaN or inf, values outside [0, 1] (fidelity's
#: ``out_of_box`` flag reads this reason, never the text)
INVALID_REASONS = {"not_tensor": "expected a torch.Tensor", "shape": "returned shape",
                   "dtype": "returned dtype", "not_finite": "NaN or inf", "out_of_box": OUT_OF_BOX_ERROR}
OUT_OF_BOX = "out_of_box"


def with_invalid_reason(rows):
    """``rows`` (a DataFrame with ``status`` and ``error``) with ``invalid_reason`` derived where it
    is missing: runs written before the column, whose reason is read once here from the error's
    phrase ("other" for an invalid row whose phrase is none of them)."""
    if "invalid_reason" in rows.columns or "status" not in rows.columns:
        return rows

    def reason(status: str, error: str) -> str:
        if status != "invalid":
            return ""
        return next((r for r, phrase in INVALID_REASONS.items() if phrase in error), "other")

    errors = rows["error"].astype(str) if "error" in rows.columns else [""] * len(rows)
    return rows.assign(invalid_reason=[reason(s, e) for s, e in zip(rows["status"].astype(str), errors)])
