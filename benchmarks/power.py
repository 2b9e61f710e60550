"""The power ``images_to_decide`` actually buys: simulate an inconclusive comparison, rerun it at
the size it asks for, and count how often the rerun decides the right way (issue 36 item 5).

Per scenario (a true per-image distance effect θ and a true failure-rate difference Δ) and
repetition: draw ``--first`` images (default 32) of a pair whose per-image log ratios are θ plus
**real seed noise** (the log ratios between two seeds of the randomised built-ins on the images
both seeds broke, pooled from ``benchmarks/noise/corpus.parquet`` and centred per attack: heavy
tailed, foolbox PGD's included) and whose failures differ by Δ; when ``equivalence.pair_test`` is
inconclusive, ask ``sample_size.images_to_decide`` for N and draw N fresh images from the same
truth. The right answer is "different" when θ or Δ lies beyond its margin (5% / 5 points),
"equivalent" when both lie inside. Printed per scenario: the share inconclusive at the first
size, the median N (and its quartiles), the power achieved at N (the share of reruns deciding
right), the power in the lowest third of N (where a plug-in of the observed effect used to fail),
and the share of reruns deciding *wrong* (a false verdict, which must stay near α).

    python benchmarks/power.py [--reps 200] [--first 32] [--seed 0] [--cap 4000]
    python benchmarks/power.py --minority 64 [--reps 600]   # the headline on real seed noise
    python benchmarks/power.py --sizes [--first 32] [--reps 200]   # N80 against images_to_decide

Sizes above ``--cap`` images are not simulated (counted as "beyond cap"). Measured numbers are in
fidelity/README.md ("Statistics").
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from attackaudit.fidelity.equivalence import DELTA, answer, pair_test  # noqa: E402
from attackaudit.fidelity.paired_binary import FAILURE_MARGIN  # noqa: E402
from attackaudit.fidelity.sample_size import images_to_decide  # noqa: E402
from attackaudit.fidelity.stats import ALPHA  # noqa: E402

#: (θ as a relative distance effect, Δ as a failure-rate difference, base failure rate)
SCENARIOS = [(0.00, 0.00, 0.0), (0.02, 0.00, 0.0), (0.035, 0.00, 0.1), (0.08, 0.00, 0.0),
             (0.12, 0.00, 0.1), (0.00, 0.10, 0.1), (0.00, 0.15, 0.2), (0.02, 0.02, 0.1)]


def real_seed_noise() -> np.ndarray:
    """(m,) per-image log ratios between two seeds of the corpus's randomised built-ins, centred
    per (implementation, norm) so that they carry spread and tails, not an effect."""
    import real_noise
    from attackaudit.sources.run_twins import randomised_builtins

    c = real_noise.load()
    w = real_noise._wide(c, "seed")
    w = w[w["implementation"].isin(randomised_builtins())]
    a, b = w["best_distance_a"].to_numpy(float), w["best_distance_b"].to_numpy(float)
    ok = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    w = w[ok].assign(r=np.log(a[ok] / b[ok]))
    return (w["r"] - w.groupby(["implementation", "norm"])["r"].transform("median")).to_numpy(float)


def draw(rng: np.random.Generator, noise: np.ndarray, n: int, theta: float, delta_fail: float,
         base_fail: float) -> np.ndarray:
    """(3, n) pair values of ``n`` images from the truth (θ, Δ)."""
    fb = (rng.random(n) < base_fail).astype(float)
    fa = (rng.random(n) < base_fail + delta_fail).astype(float)
    r = np.log1p(theta) + rng.choice(noise, n)
    return np.vstack([fa, fb, np.where((fa == 0) & (fb == 0), r, np.nan)])


def right_answer(theta: float, delta_fail: float) -> str:
    return "different" if abs(np.log1p(theta)) > DELTA or abs(delta_fail) > FAILURE_MARGIN else "equivalent"


def scenario(rng: np.random.Generator, noise: np.ndarray, theta: float, delta_fail: float, base_fail: float,
             reps: int, first: int, cap: int) -> dict:
    truth = right_answer(theta, delta_fail)
    sizes, outcomes, undecided, beyond = [], [], 0, 0
    for _ in range(reps):
        x = draw(rng, noise, first, theta, delta_fail, base_fail)
        c = pair_test(x)
        if answer(c["p_different"], c["p_equivalent"], ALPHA) != "inconclusive":
            continue
        undecided += 1
        need = images_to_decide(x, ALPHA)
        if not np.isfinite(need) or need > cap:
            beyond += 1
            continue
        c = pair_test(draw(rng, noise, int(need), theta, delta_fail, base_fail))
        sizes.append(need)
        outcomes.append(answer(c["p_different"], c["p_equivalent"], ALPHA))
    sizes_a, out = np.asarray(sizes), np.asarray(outcomes)
    low = sizes_a <= np.quantile(sizes_a, 1 / 3) if sizes_a.size else np.zeros(0, bool)
    wrong = {"different": "equivalent", "equivalent": "different"}[truth]
    return {"theta": theta, "delta_fail": delta_fail, "truth": truth, "undecided": undecided / reps,
            "beyond_cap": beyond / max(undecided, 1), "n_q": np.quantile(sizes_a, [0.25, 0.5, 0.75]) if sizes_a.size else None,
            "power": float(np.mean(out == truth)) if out.size else np.nan,
            "power_low_third": float(np.mean(out[low] == truth)) if low.any() else np.nan,
            "wrong": float(np.mean(out == wrong)) if out.size else np.nan}


def seed_pairs(min_images: int = 30) -> list[tuple[str, str, np.ndarray, np.ndarray]]:
    """(model, implementation·norm, distances, distances of its seed twin) of every randomised cell
    of the corpus with at least ``min_images`` images that needed an attack and not identical."""
    import pandas as pd
    c = pd.read_parquet(Path(__file__).resolve().parent / "noise" / "corpus.parquet")
    c = c[c["status"] == "ok"]
    out = []
    models = set(c["model"].astype(str).unique())
    for base in sorted(m for m in models if f"{m}~seed" in models):
        j = c[c["model"] == base].merge(c[c["model"] == f"{base}~seed"], on=["implementation", "norm", "sample"],
                                          suffixes=("_a", "_b"))
        for (impl, norm), g in j.groupby(["implementation", "norm"], observed=True):
            a, b = g["best_distance_a"].to_numpy(float), g["best_distance_b"].to_numpy(float)
            keep = ~((a == 0) & (b == 0))
            if keep.sum() >= min_images and not np.array_equal(a, b):
                out.append((base, f"{impl} {norm}", a[keep], b[keep]))
    return out


def minority(reps: int, n: int, seed: int) -> dict[str, float]:
    """On real seed noise (a randomised cell against its own seed twin, ``n`` images drawn with
    replacement): the headline's A/A rate of any direction or crossing, and its power to call a
    copy ``worse`` when 20% of the images are 2× (or 1.5×) farther, and when 25% fail."""
    from attackaudit.fidelity.equivalence import pair_values
    pairs, rng = seed_pairs(), np.random.default_rng(seed)
    hits = {"A/A different": 0, "20% of images 2x farther: worse": 0, "20% 1.5x farther: worse": 0,
            "25% fail, rest equal: worse": 0, "identical copies: equivalent": 0}
    for _ in range(reps):
        _, _, da, db = pairs[rng.integers(len(pairs))]
        idx = rng.integers(0, len(da), n)
        x, y = da[idx], db[idx]
        hits["A/A different"] += pair_test(pair_values(x[None], y[None]))["headline"] in ("better", "worse", "mixed")
        hits["identical copies: equivalent"] += pair_test(pair_values(x[None], x[None]))["headline"] == "equivalent"
        for key, factor, share in (("20% of images 2x farther: worse", 2.0, 0.2), ("20% 1.5x farther: worse", 1.5, 0.2),
                                   ("25% fail, rest equal: worse", np.inf, 0.25)):
            z = y.copy()
            z[rng.random(n) < share] *= factor
            hits[key] += pair_test(pair_values(z[None], x[None]))["headline"] == "worse"
    return {k: v / reps for k, v in hits.items()}


#: (name, share of images changed, factor on them; inf: failed) for ``sizes``: effects beyond the
#: margins whose right answer is "worse", and identical copies whose right answer is "equivalent"
SIZE_SCENARIOS = [("20% of images 2x farther", 0.2, 2.0), ("15% of images fail", 0.15, np.inf),
                  ("every image 8% farther", 1.0, 1.08), ("every image 12% farther", 1.0, 1.12), ("identical copies", 0.0, 1.0)]


def _draw_pair(rng: np.random.Generator, pairs: list, n: int, share: float, factor: float) -> np.ndarray:
    """Pair values of ``n`` images of a random real seed-noise cell, the copy changed on ``share``
    of them by ``factor`` (identical copies: the cell against itself)."""
    from attackaudit.fidelity.equivalence import pair_values
    _, _, da, db = pairs[rng.integers(len(pairs))]
    idx = rng.integers(0, len(da), n)
    x, y = da[idx], (db[idx] if share else da[idx]).copy()
    y[rng.random(n) < share] *= factor
    return pair_values(y[None], x[None])


def _power(rng, pairs, n: int, share: float, factor: float, truth: str, reps: int) -> float:
    hits = 0
    for _ in range(reps):
        c = pair_test(_draw_pair(rng, pairs, n, share, factor))
        hits += answer(c["p_different"], c["p_equivalent"], ALPHA) == truth
    return hits / reps


def sizes(reps: int, first: int, seed: int, cap: int) -> list[dict]:
    """Per ``SIZE_SCENARIOS`` on real seed noise: N80, the fewest images (bisected over a doubling
    grid) at which the headline decides right with 80% power, and the ``images_to_decide`` a first
    look at ``first`` images asks when it is inconclusive (median, quartiles, the share 'would not
    decide'). Issue 48 item 7: the median within 2× of N80."""
    pairs, rng = seed_pairs(), np.random.default_rng(seed)
    out = []
    for name, share, factor in SIZE_SCENARIOS:
        truth = "equivalent" if share == 0 else "different"
        lo, hi = 8, 16
        while hi < cap and _power(rng, pairs, hi, share, factor, truth, reps) < 0.8:
            lo, hi = hi, hi * 2
        while hi - lo > max(4, lo // 8):
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if _power(rng, pairs, mid, share, factor, truth, reps) >= 0.8 else (mid, hi)
        asked = []
        for _ in range(reps):
            x = _draw_pair(rng, pairs, first, share, factor)
            c = pair_test(x)
            if answer(c["p_different"], c["p_equivalent"], ALPHA) == "inconclusive":
                asked.append(images_to_decide(x, ALPHA))
        a = np.asarray(asked, dtype=float)
        fin = a[np.isfinite(a)]
        out.append({"scenario": name, "n80": hi, "inconclusive_first": a.size / reps,
                    "asked_q": np.quantile(fin, [0.25, 0.5, 0.75]) if fin.size else None,
                    "no_size": float(np.mean(~np.isfinite(a))) if a.size else 0.0})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--first", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cap", type=int, default=4000)
    ap.add_argument("--minority", type=int, metavar="N", help="instead: the headline on real seed noise at N images "
                    "(A/A, minority-share and failure-excess power; issue 48)")
    ap.add_argument("--sizes", action="store_true", help="instead: N80 on real seed noise against the median "
                    "images_to_decide of a first look at --first images (issue 48 item 7)")
    args = ap.parse_args(argv)
    if args.sizes:
        print("| scenario | N80 | inconclusive at first look | asked (q1 / median / q3) | 'would not decide' |")
        print("|---|---|---|---|---|")
        for r in sizes(args.reps, args.first, args.seed, args.cap):
            q = "–" if r["asked_q"] is None else " / ".join(f"{v:.0f}" for v in r["asked_q"])
            print(f"| {r['scenario']} | {r['n80']} | {r['inconclusive_first']:.2f} | {q} | {r['no_size']:.2f} |")
        return 0
    if args.minority:
        for key, rate in minority(args.reps, args.minority, args.seed).items():
            print(f"| {key} | {rate:.3f} |")
        return 0
    rng = np.random.default_rng(args.seed)
    noise = real_seed_noise()
    print(f"real seed noise: {noise.size} image pairs, sd {noise.std():.3f}, "
          f"{np.mean(np.abs(noise) > DELTA):.0%} beyond ±5%; {args.reps} reps, first {args.first} images")
    print("| θ | Δ fail | truth | inconclusive at first | N (q1 / median / q3) | power at N | power, lowest third of N | wrong at N |")
    print("|---|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for theta, delta_fail, base in SCENARIOS:
        s = scenario(rng, noise, theta, delta_fail, base, args.reps, args.first, args.cap)
        n = "–" if s["n_q"] is None else " / ".join(f"{v:.0f}" for v in s["n_q"])
        print(f"| {theta:+.1%} | {delta_fail:+.0%} | {s['truth']} | {s['undecided']:.2f} "
              f"(beyond cap {s['beyond_cap']:.2f}) | {n} | {s['power']:.2f} | {s['power_low_third']:.2f} | {s['wrong']:.3f} |")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
