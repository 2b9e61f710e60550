"""The seed twins of a run, shown as the report's noise floor (fidelity/README.md, "Flags").

``--metamorphic`` adds ``M~seed``: the randomised attacks on model ``M`` run again with another
seed. A sound attack's two seeds differ only by its own noise, so no seed twin may be flagged or
separated from its model; every twin check (``~perm``, ``~shift``, ``~split``) is judged against
this noise. ``seed_twin_table`` gives, per seed twin and implementation, what
``fidelity.twins.seed_twin_check`` measures (images that differ, the largest relative
difference), the image-by-image answer of the seed twin against its model (the alignment test:
"different" would mean the attack is separated from itself) and any flag the seed twin got.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from attackaudit.fidelity._table import prepare  # every fidelity check reads the table through it
from attackaudit.fidelity.equivalence import answer, compare, pair_values
from attackaudit.fidelity.stats import ALPHA, holm
from attackaudit.fidelity.twins import seed_twin_check

SEED = "~seed"
COLUMNS = ["model", "norm", "implementation", "library_version", "n", "n_differ", "largest_relative_difference",
           "answer", "flags"]


def seed_twin_table(table: pd.DataFrame, flags: pd.DataFrame) -> pd.DataFrame | None:
    """One row per (model with a seed twin, norm, implementation): ``COLUMNS``. ``answer`` is
    ``equivalence.compare`` of seed twin against model (both endpoints), Holm over the rows;
    ``flags`` the flags raised on the seed twin that its model does not have (none expected). None when the run has no
    ``~seed`` rows."""
    if not table["model"].astype(str).str.endswith(SEED).any():
        return None
    t = prepare(table)
    check = seed_twin_check(t)
    if check.empty:
        return pd.DataFrame(columns=COLUMNS)
    dist = {k: g.set_index("sample")["best_distance"]
            for k, g in t.groupby(["model", "norm", "implementation", "library_version"], sort=False)}
    results = []
    for r in check.itertuples(index=False):
        base = dist[(r.model, r.norm, r.implementation, r.library_version)]
        twin = dist[(r.model + SEED, r.norm, r.implementation, r.library_version)].reindex(base.index)
        a, b = twin.to_numpy(float), base.to_numpy(float)
        results.append(compare(pair_values(a, b, live=~((a == 0) & (b == 0)))))
    p_diff = holm([res["p_different"] for res in results])
    p_eq = holm([res["p_equivalent"] for res in results])
    # a flag the seed twin shares with its own model is the attack's own behaviour (e.g. last_not_best
    # on both seeds), not a separation from itself: only the seed twin's extra flags count
    on_twin: dict[tuple, list[str]] = {}
    on_model: dict[tuple, set[str]] = {}
    for f in flags.itertuples(index=False) if len(flags) else []:
        model = str(f.model)
        if model.endswith(SEED):
            on_twin.setdefault((model[: -len(SEED)], f.norm, f.implementation, f.library_version), []).append(str(f.flag))
        else:
            on_model.setdefault((model, f.norm, f.implementation, f.library_version), set()).add(str(f.flag))
    keys = [(r.model, r.norm, r.implementation, r.library_version) for r in check.itertuples(index=False)]
    return check.assign(
        answer=[answer(d, e, ALPHA) for d, e in zip(p_diff, p_eq)],
        flags=[", ".join(f for f in on_twin.get(k, []) if f not in on_model.get(k, set())) for k in keys])[COLUMNS]


def seed_twin_sentence(frame: pd.DataFrame) -> str:
    """One sentence on the seed twins: none flagged or separated from itself, or which were."""
    if frame.empty:
        return "The run has seed twins, but no implementation ran on both a model and its seed twin."
    bad = frame[(frame["answer"] == "different") | frame["flags"].astype(bool)]
    models = ", ".join(sorted(set(frame["model"] + SEED)))
    head = (f"{len(frame)} randomised implementations ran again with another seed on {models}: differing images "
            f"per implementation {int(frame['n_differ'].min())}–{int(frame['n_differ'].max())} of "
            f"{int(frame['n'].max())}, largest relative difference {frame['largest_relative_difference'].max():.1%}. ")
    if bad.empty:
        return head + ("No seed twin was flagged or separated from itself (none is different from its model beyond "
                       "the margin): this is the noise floor every twin check is judged against.")
    names = "; ".join(f"{r.implementation} {r.norm}"
                      + (f" flagged {r.flags}" if r.flags else "") + (" different from itself" if r.answer == "different"
                                                                        else "")
                      for r in bad.itertuples(index=False))
    return head + (f"{len(bad)} seed twins were flagged or separated from their own model, which a sound randomised "
                   f"attack never is: {names}. Twin checks of these implementations rest on a noisy floor.")
