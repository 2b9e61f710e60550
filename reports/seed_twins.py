"""The seed twins of a run, shown as the report's noise floor (fidelity/README.md, "Flags").

``--metamorphic`` adds ``M~seed``: the randomised attacks on model ``M`` run again with another
seed. A sound attack's two seeds differ only by its own noise, so no seed twin may be flagged or
separated from its model; every twin check (``~perm``, ``~shift``, ``~split``) is judged against
this noise. ``seed_twin_table`` gives, per seed twin and implementation, what
``fidelity.twins.seed_twin_check`` measures (images that differ, the largest relative
difference), the image-by-image answer of the seed twin against its model (the alignment test:
"different" would mean the attack is separated from itself), any flag the seed twin got, whether
its rows record that its call moved a global random state (``rng_used``) and whether its spec
declares it randomised (``declared``: the manifest's ``specs``; None for runs made before it).

A plugin gets a seed twin whether or not it declares ``randomised``, and so do built-ins that move a
random state without using it: ``seed_twin_sentence`` counts as randomised only those whose seed
twin differs, calls the others deterministic, and names each one that differs without declaring
it (undeclared randomness).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from attackaudit.fidelity import prepare, twins_of  # every fidelity check reads the table through it
from attackaudit.fidelity.equivalence import answer, pair_test, pair_values
from attackaudit.fidelity.stats import ALPHA, holm
from attackaudit.fidelity.twins import seed_twin_check
from attackaudit.results.schema import SEED, Twin, with_models

COLUMNS = ["model", "norm", "implementation", "library_version", "n", "n_differ", "largest_relative_difference",
           "answer", "flags", "rng_used", "declared"]


def declared_randomised(manifests: list[dict]) -> dict[str, bool]:
    """implementation -> whether its spec declares it randomised, from the runs' manifests (a run
    made before the manifest recorded it says nothing)."""
    out: dict[str, bool] = {}
    for m in manifests:
        for spec in (m.get("specs") or {}).values():
            if isinstance(spec, dict) and "randomised" in spec and spec.get("implementation"):
                out[str(spec["implementation"])] = out.get(str(spec["implementation"]), False) or bool(spec["randomised"])
    return out


def seed_twin_table(table: pd.DataFrame, flags: pd.DataFrame, declared: dict[str, bool] | None = None
                    ) -> pd.DataFrame | None:
    """One row per (model with a seed twin, norm, implementation): ``COLUMNS``. ``answer`` is
    ``equivalence.pair_test`` of seed twin against model (both endpoints), Holm over the rows;
    ``flags`` the flags raised on the seed twin that its model does not have (none expected). None when the run has no
    ``~seed`` rows."""
    t = prepare(table)
    if not (t["twin"] == SEED).any():
        return None
    check = seed_twin_check(t)
    if check.empty:
        return pd.DataFrame(columns=COLUMNS)
    dist = {k: g.set_index("sample")["best_distance"]
            for k, g in t.groupby(["base_model", "twin", "norm", "implementation", "library_version"], sort=False)}
    results = []
    for r in check.itertuples(index=False):
        base = dist[(r.model, "", r.norm, r.implementation, r.library_version)]
        twin = dist[(r.model, SEED, r.norm, r.implementation, r.library_version)].reindex(base.index)
        a, b = twin.to_numpy(float), base.to_numpy(float)
        results.append(pair_test(pair_values(a, b, live=~((a == 0) & (b == 0)))))
    p_diff = holm([res["p_different"] for res in results])
    p_eq = holm([res["p_equivalent"] for res in results])
    # a flag the seed twin shares with its own model is the attack's own behaviour (e.g. last_not_best
    # on both seeds), not a separation from itself: only the seed twin's extra flags count
    on_twin: dict[tuple, list[str]] = {}
    on_model: dict[tuple, set[str]] = {}
    twins = twins_of(t)
    for f in flags.itertuples(index=False) if len(flags) else []:
        base, kind = twins.get(str(f.model), (str(f.model), ""))
        if kind == SEED:
            on_twin.setdefault((base, f.norm, f.implementation, f.library_version), []).append(str(f.flag))
        else:
            on_model.setdefault((str(f.model), f.norm, f.implementation, f.library_version), set()).add(str(f.flag))
    keys = [(r.model, r.norm, r.implementation, r.library_version) for r in check.itertuples(index=False)]
    rng = t.assign(rng_used=t["rng_used"].eq(True) if "rng_used" in t.columns else False)  # NaN: not recorded
    moved = with_models(rng, [Twin(b) if k == SEED else Twin(b, k) for b, k in zip(rng["base_model"], rng["twin"])]) \
        .groupby(["model", "norm", "implementation", "library_version"])["rng_used"].any().to_dict()
    declared = declared or {}
    return check.assign(
        answer=[answer(d, e, ALPHA) for d, e in zip(p_diff, p_eq)],
        flags=[", ".join(f for f in on_twin.get(k, []) if f not in on_model.get(k, set())) for k in keys],
        rng_used=[bool(moved.get(k, False)) for k in keys],
        declared=[declared.get(k[2]) for k in keys])[COLUMNS]


def seed_twin_sentence(frame: pd.DataFrame) -> str:
    """On the seed twins: how many implementations ran again, which of them are randomised (their
    seed twin differs) and which deterministic, each one randomised without declaring it, and
    whether any was flagged or separated from itself."""
    if frame.empty:
        return "The run has seed twins, but no implementation ran on both a model and its seed twin."
    bad = frame[(frame["answer"] == "different") | frame["flags"].astype(bool)]
    models = ", ".join(sorted({Twin(m, SEED).name for m in frame["model"]}))
    random, same = frame[frame["n_differ"] > 0], frame[frame["n_differ"] == 0]
    head = f"{len(frame)} implementations ran again with another seed on {models}: "
    if len(random):
        head += (f"{len(random)} randomised (its seed twin differs: differing images {int(random['n_differ'].min())}–"
                 f"{int(random['n_differ'].max())} of {int(random['n'].max())}, largest relative difference "
                 f"{random['largest_relative_difference'].max():.1%})")
    if len(same):
        head += ("; " if len(random) else "") + (
            f"{len(same)} deterministic (the same result on every image with another seed: a plugin gets a seed twin "
            "whether or not it declares randomness, and so does a built-in that moves a random state it does not use)")
    head += ". " + undeclared_sentence(frame)
    if bad.empty:
        return head + ("No seed twin was flagged or separated from itself (none is different from its model beyond "
                       "the margin): this is the noise floor every twin check is judged against.")
    names = "; ".join(f"{r.implementation} {r.norm}"
                      + (f" flagged {r.flags}" if r.flags else "") + (" different from itself" if r.answer == "different"
                                                                        else "")
                      for r in bad.itertuples(index=False))
    return head + (f"{len(bad)} seed twins were flagged or separated from their own model, which a sound randomised "
                   f"attack never is: {names}. Twin checks of these implementations rest on a noisy floor.")


def undeclared_sentence(frame: pd.DataFrame) -> str:
    """Each implementation whose seed twin differs but whose spec does not declare it randomised
    (``declared`` False; unknown for older runs), with what was measured; "" for none."""
    hidden = frame[(frame["n_differ"] > 0) & (frame["declared"] == False)]  # noqa: E712 (None: not recorded)
    if hidden.empty:
        return ""
    names = "; ".join(f"{r.implementation} {r.norm} differs from its seed twin on {int(r.n_differ)} of {int(r.n)} "
                      f"images, by up to {r.largest_relative_difference:.0%}"
                      + (" (its call moved a global random state: rng_used)" if r.rng_used else "")
                      for r in hidden.itertuples(index=False))
    return (f"Undeclared randomness: {names}; its spec does not declare randomised=True, yet its results depend "
            "on the seed: its results here are one draw, and another --seed gives others. A plugin should declare "
            "it (AttackSpec(..., randomised=True)). ")
