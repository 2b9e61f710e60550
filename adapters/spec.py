"""The one attack signature every adapter normalises to, and the checks a spec must pass.

Two call signatures, one per ``kind``: :class:`MinimalAttack` (finds the smallest perturbation
itself) and :class:`FixedEpsAttack` (an ε budget; the harness's minimal-ε search calls it with
growing, then bisected ε). Both are typing ``Protocol``s: any callable with that signature is one.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import re
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Mapping, Protocol, Union

import torch
from torch import Tensor, nn

from attackaudit.results.schema import AttackId


class MinimalAttack(Protocol):
    """``kind="minimal"``: called once per batch, returns its smallest adversarials.

    - ``model``: the QueryTracker, an ``nn.Module`` wrapping the model (in eval mode) on the
      job's device; ``model(x)`` returns N×K float logits and is differentiable in ``x``. Every
      forward and backward row is charged to the sample it is closest to; past the per-sample
      budget the rows of that sample get a non-adversarial output and a zero gradient.
      ``model.num_classes`` is K, the class count (an ``int``, known without a query: attacks
      such as DeepFool or C&W that loop over classes or one-hot the labels read it there).
    - ``inputs``: N×C×H×W float32 on the job's device, values in [0, 1]; a private copy (an
      in-place change does no harm).
    - ``labels``: N int64 on the same device, the true classes.
    - ``targeted``/``targets``: passed only in ``--targeted`` runs, as ``targeted=True`` and
      N int64 target classes (never equal to ``labels``) on the same device; success then means
      reaching ``targets``. Untargeted runs pass neither, so both need these defaults. A spec
      with ``targeted_support=False`` is never called targeted; one with ``targeted_only=True``
      is never called untargeted (it runs only in ``--targeted`` runs, and always gets both).
    - returns N×C×H×W float (same shape as ``inputs``), finite, in [0, 1]; anything else makes
      the job ``invalid``. Success is re-checked on the unwrapped model, never trusted.
    """

    def __call__(self, model: nn.Module, inputs: Tensor, labels: Tensor, *,
                 targeted: bool = False,  # pragma: no mutate
                 targets: Tensor | None = None) -> Tensor: ...


class FixedEpsAttack(Protocol):
    """``kind="fixed"``: an attack within an ε ball, called by the minimal-ε search.

    The search (``harness/measure/minimal.py``) calls it many times per batch (up to 14 rounds), each
    time on the subset of the batch still being searched, so N varies between calls; ε doubles
    from a norm-specific start until success, then is bisected. Arguments are as in
    :class:`MinimalAttack`, plus ``eps``:

    - ``per_sample_eps=False`` (the default): ``eps`` is a Python ``float``, one ε for all N rows.
      Each round groups the rows still searched by their ε: all rows that share one ε go into one
      call, and rows at different ε into different calls (rows at the same ε interact, e.g.
      through batch statistics or a shared step size, only with each other). The bisection runs
      on a grid shared by all rows (``minimal.GRID_STEPS`` points per octave), so a round makes
      few calls however many rows it searches.
    - ``per_sample_eps=True``: one call per round with every row still searched; ``eps`` is a
      float32 tensor of shape (N,), one ε per row, **on the CPU** whatever the job's device (move
      it: ``eps.to(inputs.device)``). Declare it only where each row gets what a scalar call at its
      ε gives (tests/test_per_sample_eps_conformance.py checks the built-in specs so).

    ε is in the spec's norm on [0, 1] inputs (L0: a number of pixels). A returned row counts as
    a success at ε only if it is adversarial and its distance is at most ε (0.1% slack): project
    onto the ball. The search spends the same query budget as one minimal call.
    """

    def __call__(self, model: nn.Module, inputs: Tensor, labels: Tensor, *, eps: float | Tensor,
                 targeted: bool = False,  # pragma: no mutate
                 targets: Tensor | None = None) -> Tensor: ...


#: what ``AttackSpec.run`` is: a MinimalAttack or a FixedEpsAttack, according to ``kind``
AttackFn = Union[MinimalAttack, FixedEpsAttack]

NORMS = ("l0", "l1", "l2", "linf")


class AttackKind(str, Enum):
    """Which call signature ``AttackSpec.run`` has: :class:`MinimalAttack` or :class:`FixedEpsAttack`.

    A ``str`` enum: ``AttackKind.FIXED == "fixed"``, and result rows, the manifest and JSON hold
    the plain strings ``"minimal"`` / ``"fixed"``, as they always did.
    """

    MINIMAL = "minimal"  # finds the smallest perturbation itself, called once per batch
    FIXED = "fixed"  # an ε budget: the minimal-ε search (harness/measure/minimal.py) calls it

    def __str__(self) -> str:  # tables and f-strings show the stored string, not "AttackKind.FIXED"
        return self.value

    __format__ = str.__format__


#: the kinds as the strings stored in results (``AttackKind``'s values)
KINDS = tuple(kind.value for kind in AttackKind)


@dataclass(frozen=True)
class AttackSpec:
    """One implementation of one attack, for one norm, in one library.

    ``run`` is a :class:`MinimalAttack` or a :class:`FixedEpsAttack` according to ``kind``.
    ``targeted_support`` says whether the library can run the attack targeted; a spec that
    cannot is never run with ``--targeted`` (it is listed, and skipped with a reason).
    ``targeted_only`` says the attack has no untargeted mode (it needs target classes); such a
    spec runs only with ``--targeted`` and is skipped, with the reason, in untargeted runs.
    Plugin specs are checked by :func:`spec_problem` when loaded.
    """

    library: str
    name: str
    family: str
    norm: str
    kind: AttackKind  # given as AttackKind or its string ("minimal" | "fixed"), kept as AttackKind
    params: Mapping[str, Any]
    run: AttackFn = field(repr=False, compare=False)
    targeted_support: bool = True
    per_sample_eps: bool = False
    variant: str = ""  # distinguishes two specs of one attack and norm (e.g. loss "ce" vs "dlr")
    steps_param: str = ""  # the params key that sets the number of iterations, if any
    note: str = ""
    targeted_only: bool = False  # no untargeted mode: runs only in --targeted runs
    randomised: bool = False  # its results depend on the seed (random start, ...): --metamorphic gives it a seed twin
    #: its call moves a global random state (torch, NumPy, ``random``) though its results do not
    #: depend on the seed (measured): it gets a seed twin too, so that the batch twins, which see
    #: ``rng_used``, have a measured floor (a seed twin equal to its model says "deterministic")
    moves_global_rng: bool = False

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ValueError(f"AttackSpec {self.library}/{self.name}: norm {self.norm!r} is not one of {NORMS}")
        if self.kind not in KINDS:
            raise ValueError(f"AttackSpec {self.library}/{self.name}: kind {self.kind!r} is not one of {KINDS}")
        object.__setattr__(self, "kind", AttackKind(self.kind))  # frozen: the one place it is typed
        if self.targeted_only and not self.targeted_support:
            raise ValueError(f"AttackSpec {self.library}/{self.name}: targeted_only=True with targeted_support=False "
                             "would never run; drop one of them")

    @property
    def id(self) -> AttackId:
        """Which implementation and norm the spec is, as a value jobs and rows' readers carry."""
        return AttackId(self.library, self.name, self.variant, self.norm)

    @property
    def implementation(self) -> str:
        """``library/name[:variant]``: one implementation across norms."""
        return self.id.implementation

    @property
    def key(self) -> str:
        """Unique, stable identifier of the spec: ``library/name[:variant]/norm``."""
        return self.id.key

    @property
    def params_hash(self) -> str:
        blob = json.dumps({**self.params, "variant": self.variant}, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


    def with_params(self, **overrides: Any) -> "AttackSpec":
        """The same spec with some hyperparameters changed (``run`` must be a ``functools.partial``)."""
        if not isinstance(self.run, functools.partial):
            raise TypeError(f"{self.key}: run is not a functools.partial, its params cannot be changed")
        run = functools.partial(self.run.func, *self.run.args, **{**self.run.keywords, **overrides})
        return replace(self, params={**self.params, **overrides}, run=run)

    def steps_at(self, factor: float) -> int | None:
        """The iterations the spec runs at ``--steps-scale factor``; None when it has no steps_param."""
        scaled = self.scaled(factor)
        return scaled.params[self.steps_param] if self.steps_param in scaled.params else None

    def scaled(self, factor: float) -> "AttackSpec":
        """The same spec with its iteration count scaled by ``factor`` (for quick runs and tests)."""
        if not self.steps_param or factor == 1 or not isinstance(self.run, functools.partial):
            return self
        steps = self.params[self.steps_param]
        return self.with_params(**{self.steps_param: max(1, int(round(steps * factor)))})


_LIBRARY_NAME = re.compile(r"[A-Za-z0-9_.-]+")


#: How the built-ins' randomness was measured (each adapter's ``RANDOMISED`` and ``MOVES_GLOBAL_RNG``):
#: every built-in spec run twice on 4 digits (digits-mlp, 0.1 of its steps, budget 400), seeds 0
#: and 1 (and, for specs with a ``seed`` parameter, that parameter 0 and 1). ``RANDOMISED``: those
#: that gave different returned outputs or best distances (random starts: PGD, APGD; random draws
#: inside the iteration: ART's JSMA, torchattacks' SparseFool); every other built-in gave identical
#: ones. ``MOVES_GLOBAL_RNG``: those whose call moved a global random state (``rng_used``) although
#: their results did not depend on the seed (ART builds its classifier wrapper; foolbox's DDN and
#: adv-lib's VFGA draw numbers they never use on the digits).
def declare_randomness(specs: list[AttackSpec], randomised: set[tuple[str, str]],
                       moves_global_rng: set[tuple[str, str]]) -> list[AttackSpec]:
    """A built-in adapter's ``specs`` with ``randomised`` and ``moves_global_rng`` declared for the
    attacks named in each set, as (name, variant) pairs (every norm)."""
    return [replace(s, randomised=(s.name, s.variant) in randomised,
                    moves_global_rng=(s.name, s.variant) in moves_global_rng) for s in specs]


def spec_problem(spec: AttackSpec) -> str:
    """Why ``spec`` cannot run as declared (one line), or ``""`` when it can.

    Checked: norm and kind; a library name usable in keys and file names; ``steps_param``
    naming a positive integer of ``params``; every key of ``params`` being a keyword of a
    ``functools.partial`` ``run`` with the same value (so ``--steps-scale`` and ``with_params``
    reach the attack, and the recorded params are the ones it runs with); and ``run`` accepting
    the call of its kind (``FixedEpsAttack`` takes ``eps``; ``targeted``/``targets`` unless
    ``targeted_support`` is false; a ``targeted_only`` spec need not accept the untargeted call),
    after the arguments a partial ``run`` binds fit its function (a misspelt hyperparameter).
    """
    where = f"attack {spec.key}"
    if spec.norm not in NORMS:
        return f"{where}: norm {spec.norm!r} is not one of {', '.join(NORMS)}"
    if spec.kind not in KINDS:
        return f"{where}: kind {spec.kind!r} is not one of {', '.join(KINDS)}"
    if not _LIBRARY_NAME.fullmatch(spec.library or ""):
        return f"{where}: library name {spec.library!r} must be letters, digits, '_', '.' or '-'"
    if not spec.name:
        return f"{where}: name is empty"
    if not callable(spec.run):
        return f"{where}: run is {type(spec.run).__name__}, not callable"
    if spec.steps_param:
        if spec.steps_param not in spec.params:
            return (f"{where}: steps_param {spec.steps_param!r} is not a key of params "
                    f"({', '.join(map(repr, spec.params)) or 'empty'}); --steps-scale would do nothing")
        steps = spec.params[spec.steps_param]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            return f"{where}: params[{spec.steps_param!r}] = {steps!r} is not a positive integer number of steps"
    if spec.params:
        if not isinstance(spec.run, functools.partial):
            return (f"{where}: run is not a functools.partial, so its params cannot be overridden; "
                    f"write run=functools.partial(fn, **params)")
        for key, value in spec.params.items():
            if key not in spec.run.keywords:
                return (f"{where}: params[{key!r}] is not a keyword of its functools.partial run; "
                        f"write run=functools.partial(fn, **params)")
            if not _same(spec.run.keywords[key], value):
                return (f"{where}: params[{key!r}] = {value!r} but run passes {spec.run.keywords[key]!r}; "
                        f"the recorded params must be those it runs with")
    return _signature_problem(spec, where)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or a == b)
    except Exception:  # e.g. tensors of several elements: identity is the only safe answer
        return False


def _binding_problem(spec: AttackSpec, where: str) -> str:
    """Why the arguments a ``functools.partial`` run binds (its params, a typo among them) do not
    fit its function's signature, or ``""``. ``inspect.signature`` of such a partial raises, so
    without this check the typo would only surface when the attack is called, as a crash."""
    if not isinstance(spec.run, functools.partial):
        return ""
    try:
        signature = inspect.signature(spec.run.func)
    except (TypeError, ValueError):  # builtins without a signature: the call itself will tell
        return ""
    try:
        signature.bind_partial(*spec.run.args, **spec.run.keywords)
    except TypeError as exc:
        function = getattr(spec.run.func, "__qualname__", type(spec.run.func).__name__)
        return f"{where}: run's bound params do not fit {function}() ({exc}); check their spelling"
    return ""


def _signature_problem(spec: AttackSpec, where: str) -> str:
    problem = _binding_problem(spec, where)
    if problem:
        return problem
    try:
        signature = inspect.signature(spec.run)
    except (TypeError, ValueError):  # builtins without a signature: the call itself will tell
        return ""
    fixed = spec.kind is AttackKind.FIXED
    base: dict[str, Any] = {"eps": 0.0} if fixed else {}
    # the calls the harness makes: untargeted (never for a targeted_only spec), and targeted
    calls = ([] if spec.targeted_only else [base]) + (
        [base | {"targeted": True, "targets": None}] if spec.targeted_support else [])
    for keywords in calls:
        try:
            signature.bind(None, None, None, **keywords)
        except TypeError as exc:
            protocol = "FixedEpsAttack" if fixed else "MinimalAttack"
            called = ", ".join(["model, inputs, labels", *(f"{k}=..." for k in keywords)])
            return f"{where}: run cannot be called as run({called}) ({exc}); see {protocol}"
    return ""


def num_classes(model: nn.Module, inputs: Tensor) -> int:
    """The tracker knows its class count; any other model costs one forward of one sample."""
    n = getattr(model, "num_classes", None)
    if n is not None:
        return int(n)
    with torch.no_grad():
        return int(model(inputs[:1]).shape[1])
