"""The report-wide rate of false defect flags (fidelity/README.md, "Report-wide false flags"):
P(at least one defect flag in a report of K sound implementations), measured on real noise.

    .venv/bin/python benchmarks/calibration.py --report-wide [--k 1 5 20 98] [--reps R] [--images 64] [--save]

Each flag rule controls its error per implementation (a family fixed in advance: its own jobs, its
own family), never over the report, so that no verdict about one implementation depends on which
others ran. The price is that a report's chance of holding at least one false flag grows with the
number of implementations it judges; this module measures it.

One repetition: K implementations drawn without replacement from the corpus's sound built-ins
(``held_out.sound``: no known defect, no defect-corpus case, no crash, invalid batch or refused
query in their rows), each with every job the corpus holds for it (three models, their seed twins,
the split, shift and batch twins where it ran them), on ``n`` images drawn with replacement (one
image draw per report, every job on the same images), judged by the public ``fidelity.flags``.
The split twins are judged apart from the rest (``one_report``), their rows exchanged per image and
implementation with the base model's (``real_nulls.exchange``: the calibrated null of the split
rule; ``as is`` judges them as resampled).
When K exceeds the pool the report is made of several blocks, each holding distinct
implementations on its own image draw (the extra copies are unrelated implementations with the
same noise, which by the families contract (tests/test_families.py) no other block can move).
A defect flag is every flag but ``optimality_gap`` (a weakness) and ``known_defect`` (the defect
corpus read back).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

import real_noise as rn
import real_nulls

#: flags that are not a defect finding: a weakness, and the defect corpus read back
NOT_DEFECTS = frozenset({"optimality_gap", "known_defect"})


def _block(R: rn.Resampler, rng: np.random.Generator, keys: list[tuple[str, str]], n: int
           ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """``keys``' rows on one image draw: (every job but the split twins, the base models with the
    split twins exchanged per image, the same with the split twins as resampled)."""
    jobs = [j for k in keys for j in R.jobs(*k)]
    images = rng.choice(R.common(jobs), n, replace=True)
    tables = {j: R.rows(j, images) for j in jobs}
    split = [j for j in jobs if j.model.endswith("~split")]
    pairs = [j for j in jobs if rn.Job(j.implementation, j.norm, j.model + "~split") in tables] + split
    as_is = pd.concat([tables[j] for j in pairs], ignore_index=True) if split else None
    rest = pd.concat([t for j, t in tables.items() if j not in split], ignore_index=True)
    swapped = {j: tables[j].copy() for j in pairs}
    for impl, norm in keys:
        for b in real_nulls.SPLIT_MODELS:
            real_nulls.exchange(swapped, rn.Job(impl, norm, b), rn.Job(impl, norm, b + "~split"), rng.random(n) < 0.5)
    return rest, (pd.concat(list(swapped.values()), ignore_index=True) if split else None), as_is


def one_report(R: rn.Resampler, rng: np.random.Generator, pool: list[tuple[str, str]], k: int, n: int) -> dict:
    """One report of ``k`` sound implementations: which defect flags fired, on how many
    implementations, and whether any did (``any``; ``any as is``: with the split twins as resampled).
    ``fidelity.flags`` judges every job but the split twins; the split twins are judged apart by
    ``fidelity.defects.batch_dependence`` on the base models and their split twins, exchanged per
    image (the calibrated null, ``real_nulls.exchange``) and as resampled: exchanging the base rows
    inside the whole table would move them against their batch-composition twin too."""
    from attackaudit.fidelity import flags
    from attackaudit.fidelity._table import prepare
    from attackaudit.fidelity.defects import batch_dependence

    blocks, left = [], k
    while left > 0:
        take = min(left, len(pool))
        blocks.append([pool[i] for i in rng.choice(len(pool), take, replace=False)])
        left -= take
    found, as_is = [], []
    for b, keys in enumerate(blocks):
        rest, swapped, raw = _block(R, rng, keys, n)
        f = flags(rest)
        f = f[~f["flag"].isin(NOT_DEFECTS)][["implementation", "norm", "flag"]].assign(block=b)
        split = [pd.DataFrame(batch_dependence(prepare(t)), columns=["implementation", "norm", "flag"]).assign(block=b)
                 if t is not None else None for t in (swapped, raw)]
        found.append(pd.concat([f] + ([split[0]] if split[0] is not None else []), ignore_index=True))
        as_is.append(pd.concat([f] + ([split[1]] if split[1] is not None else []), ignore_index=True))
    f, g = pd.concat(found, ignore_index=True), pd.concat(as_is, ignore_index=True)
    key = ["block", "implementation", "norm"]
    out = {"any": bool(len(f)), "implementations": int(f[key].drop_duplicates().shape[0]), "any as is": bool(len(g))}
    for flag, h in f.groupby("flag"):
        out[flag] = int(h[key].drop_duplicates().shape[0])
    out["named"] = sorted({f"{i} {nm}: {fl}" for i, nm, fl in zip(f["implementation"], f["norm"], f["flag"])})
    return out


def measure(ks: list[int], reps: int, n: int = 64, seed: int = 0, part: str | None = None) -> tuple[pd.DataFrame, dict]:
    """One row per K: ``reps`` reports, the share with at least one false defect flag (``any``, and
    ``any as is``), the mean number of implementations flagged, and per flag the share of reports
    where it fired; and, per K, how often each (implementation, flag) was named."""
    R = real_nulls.resampler(part=part)
    import held_out
    pool = [k for k in held_out.sound(R.c) if R.jobs(*k)]
    rows, named = [], {}
    for k in ks:
        rng = np.random.default_rng([seed, k, n])
        res = [one_report(R, rng, pool, k, n) for _ in range(reps)]
        flags_seen = sorted({f for r in res for f in r} - {"any", "implementations", "any as is", "named"})
        row = {"K": k, "pool": len(pool), "with replacement": k > len(pool), "images": n, "reps": reps,
               "any": float(np.mean([r["any"] for r in res])), "fired": int(sum(r["any"] for r in res)),
               "any as is": float(np.mean([r["any as is"] for r in res])),
               "flagged per report": float(np.mean([r["implementations"] for r in res]))}
        row |= {f"share {f}": float(np.mean([r.get(f, 0) > 0 for r in res])) for f in flags_seen}
        rows.append(row)
        named[k] = pd.Series([x for r in res for x in r["named"]]).value_counts().to_dict() if res else {}
    return pd.DataFrame(rows), named
