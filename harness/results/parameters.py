"""The grid's parameters, declared once (issue 52, item 4).

``PARAMETERS`` is the one table of what a run takes: each ``Parameter``'s name (``RunConfig``'s
field and the TOML key), type, default, bounds, command-line flag, ``attackaudit.compare`` keyword
and help text. Everything else is made from it: ``RunConfig``'s fields and the checks of its
values (harness/run/config.py), the flags of ``attackaudit run`` and ``attackaudit audit``
(harness/run/grid_args.py), the checks of ``compare()``'s keywords (harness/sources/user_args.py;
``compare()`` keeps its written signature for users and IDEs, and tests/test_parameters.py checks
that it agrees with the table), the ``Job`` fields copied from a config (harness/run/runner.py) and
the flag → keyword map that words messages for ``compare()``'s callers (reports/wording.py).

A bad value is one message form, naming the culprit (the flag, or the keyword in ``compare()``'s
words) and the values it may take: ``--samples must be an integer ≥ 1, got 0``.

It sits beside the row schema (and ``DEFAULT_BUDGET``) because every layer reads it (the runner,
the sources' checks of ``compare()``'s arguments, reports' wording), and it imports nothing but the
schema: torch-free and light, as ``--help`` and ``import attackaudit`` need.
"""
from __future__ import annotations

import copy
import numbers
from dataclasses import dataclass
from typing import Any

from attackaudit.results.schema import DEFAULT_BUDGET


@dataclass(frozen=True)
class Parameter:
    """One parameter of a run: a row of ``PARAMETERS``."""

    name: str  #: RunConfig's field, the TOML key
    type: type  #: int, float, bool, str, list (of names) or dict
    default: Any  #: RunConfig's default (a list or dict is copied into each config)
    help: str | None = None  #: the flag's --help text (None: none shown)
    flag: str | None = None  #: the flag of ``attackaudit run`` (None: TOML and compare() only)
    api: str | None = None  #: the ``compare()`` keyword of the same meaning (None: compare() has none)
    optional: bool = False  #: None is a value ("all", "none given")
    grid: bool = False  #: ``attackaudit audit`` takes the flag too (grid_args.add_grid_arguments)
    result: bool = True  #: changes results (compared on resume); False: how the jobs run or are shown
    job: bool = False  #: a field of ``Job`` copied from the config as it is (runner._job)
    low: float | None = None  #: the smallest good value (int: inclusive; float: exclusive)
    api_low: float | None = None  #: ``low`` of the ``compare()`` keyword, where it differs
    choices: tuple | None = None  #: the good values (of a list: of each element, in any case)
    cli_choices: bool = False  #: argparse lists ``choices`` in --help and refuses the others
    hint: str = ""  #: what a good value means, in brackets after the rule
    action: str | None = None  #: argparse's: "store_true", "store_false" (--no-X) or "append"
    metavar: str | None = None  #: argparse's, where the dest's upper case is not the word

    @property
    def annotation(self) -> str:
        inner = {list: "list[str]", dict: "dict[str, str]"}.get(self.type, self.type.__name__)
        return f"{inner} | None" if self.optional else inner

    def fresh_default(self) -> Any:
        """The default, a new list or dict each time (configs never share one)."""
        return copy.copy(self.default)

    def culprit(self, style: str) -> str:
        """Who a message names: the keyword (api), else the flag, else the TOML key (a bool's
        value other than True or False comes from a TOML file or the API, never from its switch)."""
        if style == "api":
            return self.api or self.name
        return self.flag if self.flag and self.type is not bool else self.name

    def lowest(self, style: str) -> float | None:
        return self.api_low if style == "api" and self.api_low is not None else self.low

    def rule(self, style: str) -> str:
        """The values it may take, in words: "an integer ≥ 1", "local or dask" ..."""
        if self.choices is not None:
            shown = [repr(c) if style == "api" else str(c) for c in self.choices]
            if style == "api" and self.default == "":  # compare()'s None is the run's "" (not given)
                shown.insert(0, "None")
            text = _either(shown)
        elif self.type is bool:
            text = "True or False"
        elif self.type is int:
            low = self.lowest(style)
            text = "an integer" + (f" ≥ {low}" if low is not None else "")
        else:
            text = "a positive number" if self.low == 0 else "a number" + (
                f" > {self.low}" if self.low is not None else "")
        return f"{text} ({self.hint})" if self.hint else text

    def problem(self, value: Any, style: str = "cli") -> str | None:
        """None when ``value`` is good; else the one-line message naming the culprit and the
        values it may take. ``style``: "cli" names the flag, "api" the ``compare()`` keyword (whose
        None the caller has replaced by its default already)."""
        if value is None and self.optional:
            return None
        values = value if self.type is list and isinstance(value, (list, tuple)) else [value]
        bad = [v for v in values if not self._good(v, self.lowest(style))]
        return f"{self.culprit(style)} must be {self.rule(style)}, got {bad[0]!r}" if bad else None

    def _good(self, value: Any, low: float | None) -> bool:
        if self.choices is not None:
            if self.default == "" and value == "":  # "": not given
                return True
            like = self.choices[0]
            if not isinstance(value, type(like)) or isinstance(value, bool) != isinstance(like, bool):
                return False
            probe = value.lower() if self.type is list else value  # a list's names in any case
            # "cuda:N": any "cuda:" device
            return any(probe == c or (isinstance(c, str) and c.endswith(":N") and probe.startswith(c[:-1]))
                       for c in self.choices)
        if self.type is bool:
            return isinstance(value, bool)
        if self.type in (int, float):
            kind = numbers.Integral if self.type is int else numbers.Real
            if isinstance(value, bool) or not isinstance(value, kind):
                return False
            return low is None or (value >= low if self.type is int else value > low)
        return True


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


# The table, in the order ``attackaudit run --help`` lists the flags (RunConfig's field order)
PARAMETERS: tuple[Parameter, ...] = (
    Parameter("out", str, "", "run directory (created; rerunning resumes)", "--out", "out", result=False),
    Parameter("preset", str, "", flag="--preset", choices=("quick", "demo"), cli_choices=True, result=False),
    # -- the grid: `attackaudit audit` takes these flags too
    Parameter("models", list, ["digits-cnn"], flag="--models", grid=True),
    Parameter("families", list, None, flag="--families", api="families", optional=True, grid=True),
    Parameter("norms", list, None, flag="--norms", api="norms", optional=True, grid=True,
              choices=("l0", "l1", "l2", "linf"), hint="any case"),
    Parameter("attacks", list, None, "spec keys or implementations, e.g. adv_lib/fmn", "--attacks", "attacks",
              optional=True, grid=True),
    Parameter("samples", int, 32, flag="--samples", api="samples", grid=True, job=True, low=1),
    Parameter("budget", int, DEFAULT_BUDGET, f"forwards + backwards per sample (default {DEFAULT_BUDGET})",
              "--budget", "budget", grid=True, job=True, low=1),
    Parameter("seed", int, 0, flag="--seed", api="seed", grid=True, job=True, low=0),
    Parameter("steps_scale", float, 1.0, "scale every attack's iterations", "--steps-scale", "steps_scale",
              grid=True, job=True, low=0),
    Parameter("targeted", bool, False, flag="--targeted", api="targeted", grid=True, job=True, action="store_true"),
    # auto is resolved (cuda when available) before the check
    Parameter("device", str, "cpu", "cpu, cuda, cuda:N or auto (cuda when available)", "--device", "device",
              grid=True, job=True, choices=("auto", "cpu", "cuda", "cuda:N")),
    # compare()'s workers=0 runs the jobs in its own process, on a config of one worker
    Parameter("workers", int, 1, flag="--workers", api="workers", grid=True, result=False, low=1, api_low=0),
    Parameter("timeout_s", float, 900.0, "seconds per job before it is killed", "--timeout", "timeout_s", grid=True,
              result=False, low=0),
    Parameter("quiet", bool, False, "no progress bars", "--quiet", grid=True, result=False, action="store_true"),
    # -- `attackaudit run`'s own
    Parameter("libraries", list, None, flag="--libraries", api="libraries", optional=True),
    Parameter("metamorphic", bool, False, "also run every model's metamorphic twins (~shift: logits shifted; ~perm: "
              "classes permuted) and, on the first model, the run twins (~seed: randomised attacks with another "
              "seed, the noise floor; ~split: every attack on one sample per call; ~batch: every attack on the "
              "images reversed, with companions, in one call)", "--metamorphic", "metamorphic", action="store_true"),
    # the repeat is a second run beside the first: adding it resumes the first
    Parameter("repeat", int, 1, "2: run every job on the first model a second time with the same seed (in "
              "OUT/repeat); reports flag results that differ (nondeterminism)", "--repeat", result=False,
              choices=(1, 2), hint="a second seeded run to compare with"),
    Parameter("executor", str, "local", flag="--executor", result=False, choices=("local", "dask"), cli_choices=True),
    Parameter("scheduler", str, None, "address of an existing Dask scheduler", "--scheduler", optional=True,
              result=False),
    Parameter("batch_size", int, 0, "samples per attack call (0: all at once)", "--batch-size", "batch_size",
              job=True, low=0),
    Parameter("dataset", str, "digits", "digits, cifar10:DIR, cifar100:DIR, imagenet:ROOT:LIST[:CROP[:RESIZE]], "
              "tensors:FILE or tensors:INPUTS:LABELS", "--dataset", job=True),
    # RobustBench checkpoints: <model_dir>/<dataset>/<threat_model>/<name>.pt (a Job holds it resolved)
    Parameter("model_dir", str, "", "RobustBench checkpoints, laid out as DIR/<dataset>/<threat_model>/<name>.pt",
              "--model-dir"),
    # of robustbench: models that name none ("" = Linf)
    Parameter("threat_model", str, "", "RobustBench threat model (Linf, L2, corruptions) for robustbench: models "
              "naming none", "--threat-model", job=True),
    Parameter("allow_download", bool, False, "let model sources download missing weights (never done otherwise)",
              "--allow-download", result=False, job=True, action="store_true"),
    Parameter("trust_checkpoint", bool, False, "unpickle checkpoints in full (torch.load weights_only=False): only "
              "for trusted files", "--trust-checkpoint", result=False, job=True, action="store_true"),
    Parameter("memory_limit_mb", int, 8192, flag="--memory-limit-mb", result=False),
    Parameter("plugins", list, [], "a .py file defining specs() (repeatable)", "--plugin", "plugins", action="append",
              metavar="PLUGIN"),
    Parameter("force", bool, False, "run a changed config in an existing run directory", "--force", result=False,
              action="store_true"),
    # "crashed": finished jobs that crashed run again (runner.RETRY_STATUSES)
    Parameter("retry", str, "", "crashed: also run again the finished jobs that crashed (jobs whose worker failed "
              "before the attack always run again)", "--retry", "retry", result=False, choices=("crashed",),
              cli_choices=True),
    Parameter("strict", bool, False, "exit 1 when any job crashed, timed out or was invalid", "--strict",
              result=False, action="store_true"),
    # exact minima beside the jobs (exact/defaults.py), not what a job computes
    Parameter("exact", bool, True, "skip the exact minimal distances a run of digits-mlp or digits-mlp-tiny writes "
              "to OUT/exact/", "--no-exact", result=False, action="store_false"),
    # a cap > samples: judge at samples, then extend the undecided family × norm rows along the nested
    # subsets (run/sequential.py); how many looks judge the jobs, not what a job computes: a plain
    # run of the first look's size resumes as the first look
    Parameter("until_decided", int, 0, "judge at --samples, then run only the undecided family x norm rows again on "
              "doubling nested subsets up to CAP images (or the dataset's size), the error rate spent across the "
              "looks; the looks go to OUT/looks/ and OUT/manifest.json", "--until-decided", "until_decided",
              result=False, low=0, api_low=1, hint="the cap on the images", metavar="CAP"),
    # -- TOML and compare() only
    # images of the batch-split twin M~split (the first ones of the subset; 0 = all of samples): its
    # one-image calls cost ~6x a batched job's CPU on the digits MLP
    Parameter("split_samples", int, 0, low=0, hint="0: all samples"),
    # interpreter of the whole run, e.g. a release environment of `attackaudit audit` ("" = this
    # one). A result field: its environment pins the library release, so results differ.
    Parameter("python", str, ""),
    # model source -> the name rows, bars and pages show (compare()'s name=; store.model_label): how
    # a model is shown, not what runs, so renaming one resumes its run
    Parameter("model_names", dict, {}, result=False),
)

#: name → its row
BY_NAME: dict[str, Parameter] = {p.name: p for p in PARAMETERS}
#: compare() keyword → its row
BY_API: dict[str, Parameter] = {p.api: p for p in PARAMETERS if p.api}
#: RunConfig's fields that do not change results: they may differ between a run and its resumption
NON_RESULT_FIELDS: frozenset[str] = frozenset(p.name for p in PARAMETERS if not p.result)
#: command-line flag → ``compare()`` keyword (the switches: ``API_SWITCHES``)
CLI_TO_API: dict[str, str] = {p.flag: p.api for p in PARAMETERS
                              if p.flag and p.api and p.action != "store_true"}
#: on/off flags → the keyword that turns them on
API_SWITCHES: dict[str, str] = {p.flag: f"{p.api}=True" for p in PARAMETERS
                                if p.flag and p.api and p.action == "store_true"}
