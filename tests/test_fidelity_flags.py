"""Flags: each misbehaviour is flagged for what it is, healthy implementations are not."""
import numpy as np
import pandas as pd

from attackaudit.fidelity import FLAG_COLUMNS, FLAGS, flagged, flags
from attackaudit.fidelity.synthetic import job_rows, table
from attackaudit.fidelity.flags import LAST_NOT_BEST_NULL_RATE

INF = np.inf
RNG = np.random.default_rng(7)
D = RNG.uniform(0.1, 0.5, 24)
D[:2] = 0.0  # misclassified clean


def healthy(model="m", impl="adv_lib/fmn", scale=1.0, **kw):
    kw.setdefault("family", "fmn")
    return job_rows(model, impl, "l2", D * scale, **kw)


def found(t, **kw):
    """{(implementation, flag)} of the findings."""
    f = flags(t, **kw)
    assert list(f.columns) == FLAG_COLUMNS
    assert set(f.flag) <= set(FLAGS)
    return {(r.implementation, r.flag) for r in f.itertuples()}, f


def test_healthy_siblings_are_not_flagged():
    noise = 1 + RNG.uniform(-0.01, 0.01, D.size)
    t = table(healthy(), healthy(impl="foolbox/FMN", scale=noise),
              # a fixed-ε attack whose returns are within the search's precision of its best
              healthy(impl="art/PGD", family="pgd", kind="fixed", returned=D * 1.02))
    got, f = found(t)
    assert got == set(), f.to_string()


def test_crash_timeout_invalid_out_of_box():
    half = np.array(["crash"] * 12 + ["ok"] * 12, dtype=object)
    err = np.where(half == "crash", "RuntimeError: shape mismatch", "")
    t = table(healthy(),
              healthy(impl="b/crashy", status=half, error=err, returned=np.where(half == "ok", D, INF)),
              healthy(impl="c/slow", status="timeout", error="timed out after 60 s", returned=INF),
              healthy(impl="d/nan", status="invalid", error="returned 3 samples with NaN or inf", returned=INF),
              healthy(impl="e/box", status="invalid", returned=INF,
                      error="returned values in [-0.2, 1.3], outside the [0, 1] box"))
    got, f = found(t)
    assert {("b/crashy", "crash"), ("c/slow", "timeout"), ("d/nan", "invalid"), ("e/box", "out_of_box")} <= got
    ev = f[f.flag == "crash"].evidence.iloc[0]
    assert "12 of 24" in ev and "RuntimeError: shape mismatch" in ev
    assert ("e/box", "invalid") not in got and ("d/nan", "out_of_box") not in got


def test_budget_overrun():
    refused = np.zeros(D.size)
    refused[[3, 5]] = [10, 250]
    got, f = found(table(healthy(), healthy(impl="b/greedy", refused=refused)))
    assert ("b/greedy", "budget_overrun") in got
    ev = f[f.flag == "budget_overrun"].evidence.iloc[0]
    assert "2 of 24" in ev and "260 refused" in ev and "sample 5" in ev


def test_last_not_best_returns_wandered_iterate():
    returned = D * 1.5
    returned[10:] = INF  # wandered off to a non-adversarial point on some
    got, f = found(table(healthy(), healthy(impl="b/last", returned=returned)))
    assert ("b/last", "last_not_best") in got
    assert "returned no adversarial" in f[f.flag == "last_not_best"].evidence.iloc[0]
    # one sample in 22 is not a pattern
    one = D.copy()
    one[5] *= 2
    got, _ = found(table(healthy(), healthy(impl="b/last", returned=one)))
    assert ("b/last", "last_not_best") not in got


def _worse_on(idx, factor=1.3):
    """D, returned ``factor`` farther on the samples ``idx``."""
    out = D.copy()
    out[idx] *= factor
    return out


def test_last_not_best_is_judged_against_the_noise_of_the_attacks_kind():
    """4 of 22 broken images returned > 5% worse than the best queried: a finding for a minimal
    attack (null rate 5%, p ≈ 0.022), the measured noise of a sound fixed-ε attack under the
    minimal-ε search (null rate 18%, p ≈ 0.5)."""
    four = _worse_on([3, 7, 11, 15])
    got, f = found(table(healthy(), healthy(impl="b/min", returned=four)))
    assert ("b/min", "last_not_best") in got
    ev = f[f.flag == "last_not_best"].evidence.iloc[0]
    rate = LAST_NOT_BEST_NULL_RATE["minimal"]
    assert "4 of 22 images" in ev and f"null rate {rate:.0%} for a sound minimal attack" in ev and "BH q" in ev
    got, _ = found(table(healthy(), healthy(impl="b/fix", family="pgd", kind="fixed", returned=four)))
    assert ("b/fix", "last_not_best") not in got
    # a fixed-ε attack returning its last iterate on most images is still found
    most = _worse_on(np.arange(2, 16))
    got, _ = found(table(healthy(), healthy(impl="b/fix", family="pgd", kind="fixed", returned=most)))
    assert ("b/fix", "last_not_best") in got


def test_last_not_best_is_adjusted_over_the_implementations_own_jobs():
    """One marginal job (4 of 22, p ≈ 0.022 at the minimal null rate 5%) is a finding alone and
    stays one among 30 sound jobs of other implementations (the multiplicity family is the
    implementation's own jobs, fixed in advance); spread over 30 models of its own, the same single
    job is adjusted over them."""
    three = _worse_on([3, 7, 11, 15])
    got, _ = found(table(healthy(), healthy(impl="b/min", returned=three)))
    assert ("b/min", "last_not_best") in got
    crowd = [healthy(model=f"m{i}", impl=f"x/s{i}") for i in range(30)]
    got, f = found(table(healthy(), healthy(impl="b/min", returned=three), *crowd))
    assert ("b/min", "last_not_best") in got, f.to_string()
    own = [healthy(model=f"m{i}", impl="b/min") for i in range(30)]
    got, f = found(table(healthy(), healthy(impl="b/min", returned=three), *own))
    assert ("b/min", "last_not_best") not in got, f.to_string()


def test_silent_failure_is_judged_over_every_model_of_the_implementation():
    """Broke nothing on a model's twin but images on the model itself: a weak attack, not a silent
    failure; broke nothing anywhere on 22 images: silent failure; on 8 images only: too few to
    tell from a weak attack (0.75^8 = 0.10 > 0.05), inconclusive, no flag."""
    nothing = np.where(D > 0, INF, 0.0)
    weak = np.where(np.arange(D.size) % 4 == 0, D * 2, nothing)
    t = table(healthy(), job_rows("m", "b/weak", "l2", weak, family="fmn", forwards=300, backwards=300),
              healthy(model="m~shift"), job_rows("m~shift", "b/weak", "l2", nothing, family="fmn", forwards=300,
                                                 backwards=300))
    got, f = found(t)
    assert ("b/weak", "silent_failure") not in got, f.to_string()
    dead = job_rows("m", "b/dead", "l2", nothing, family="fmn", forwards=300, backwards=300)
    got, f = found(table(healthy(), dead))
    assert ("b/dead", "silent_failure") in got
    assert "broke none of the 22 images" in f[f.flag == "silent_failure"].evidence.iloc[0]
    few = job_rows("m", "b/dead", "l2", nothing[2:10], family="fmn", forwards=300, backwards=300,
                   samples=np.arange(2, 10))
    got, _ = found(table(job_rows("m", "adv_lib/fmn", "l2", D[2:10], family="fmn", samples=np.arange(2, 10)), few))
    assert ("b/dead", "silent_failure") not in got


def test_silent_failure_returns_clean_input():
    clean = np.where(D > 0, INF, 0.0)
    got, f = found(table(healthy(), job_rows("m", "b/noop", "l2", clean, family="fmn", forwards=0, backwards=0)))
    assert ("b/noop", "silent_failure") in got
    assert ("b/noop", "label_bug") not in got
    assert "clean error rate" in f[f.flag == "silent_failure"].evidence.iloc[0]


def test_silent_failure_no_backward_even_if_lucky():
    got, _ = found(table(healthy(), healthy(impl="b/fwd", scale=1.5, backwards=0)))
    assert ("b/fwd", "silent_failure") in got
    # a gradient-free family may legitimately skip backward passes
    got, _ = found(table(healthy(), healthy(impl="b/bnd", family="boundary", scale=1.5, backwards=0)))
    assert ("b/bnd", "silent_failure") not in got


def test_weak_but_correct_is_never_a_label_bug():
    # works hard, stops early, breaks almost nothing: without label evidence that is weakness
    best = np.where(D > 0, INF, 0.0)
    best[5] = D[5] * 3  # one accidental success
    got, f = found(table(healthy(), job_rows("m", "b/weak", "l2", best, family="fmn",
                                             forwards=300, backwards=300)))
    assert ("b/weak", "label_bug") not in got
    assert ("b/weak", "optimality_gap") in got


def test_budget_starved_attack_is_a_silent_failure_not_a_label_bug():
    best = np.where(D > 0, INF, 0.0)
    got, f = found(table(healthy(), job_rows("m", "b/starved", "l2", best, family="fmn",
                                             forwards=1000, backwards=1000)))
    assert ("b/starved", "label_bug") not in got
    assert ("b/starved", "silent_failure") in got  # ASR equals the clean error rate
    assert "broke none of the 22" in f[f.flag == "silent_failure"].evidence.iloc[0]


def test_failing_alike_on_every_model_is_still_not_a_label_bug():
    weak = np.where(D > 0, INF, 0.0)
    t = table(healthy(), job_rows("m", "b/bug", "l2", weak, family="fmn", forwards=300, backwards=300),
              healthy(model="m2"), job_rows("m2", "b/bug", "l2", weak, family="fmn", forwards=300, backwards=300))
    got, f = found(t)
    assert ("b/bug", "label_bug") not in got
    assert {"silent_failure", "optimality_gap"} <= set(f[f.implementation == "b/bug"].flag)


def test_label_bug_from_the_permutation_twin():
    noise = 1 + RNG.uniform(-0.005, 0.005, D.size)
    moved = D * np.where(np.arange(D.size) % 2 == 0, 1.5, 1.0)  # another class aimed at on half the samples
    t = table(healthy(), healthy(model="m~perm", scale=noise),
              healthy(impl="b/index", family="pgd"), healthy(model="m~perm", impl="b/index", family="pgd",
                                                            scale=moved / np.where(D > 0, D, 1)))
    got, f = found(t)
    assert got == {("b/index", "label_bug")}
    row = f.iloc[0]
    assert row.model == "m" and "m~perm" in row.evidence and "classes renamed" in row.evidence
    # the permutation twin does not raise shift_sensitivity, nor the shift twin label_bug
    t = table(healthy(impl="b/index", family="pgd"), healthy(model="m~shift", impl="b/index", family="pgd", scale=1.5))
    assert set(flags(t).flag) == {"shift_sensitivity"}


def _classes(n_models: int = 2, dead: int = 3, queries: float = 40, rate: float = 1.0):
    """Two implementations on ``n_models`` models; ``b/cc`` fails on every sample of class ``dead``
    (labels are sample % 10) with ``queries`` per failing sample."""
    jobs = []
    for k in range(n_models):
        m = f"m{k}"
        best = D.copy()
        labels = np.arange(D.size) % 10
        best[(labels == dead) & (D > 0)] = INF
        q = np.where(np.isfinite(best), 500, queries / 2)
        jobs += [healthy(model=m, family="pgd"),
                 job_rows(m, "b/cc", "l2", best * rate, family="pgd", forwards=q, backwards=q)]
    return table(*jobs)


def test_label_bug_from_class_conditional_failure():
    got, f = found(_classes())
    assert ("b/cc", "label_bug") in got
    ev = f[(f.flag == "label_bug")].iloc[0]
    assert ev.model == "*" and "class 3" in ev.evidence and "Holm" in ev.evidence
    # one model suffices when it breaks every other sample (p = 1/C(22, 3), ×10 classes) ...
    got, _ = found(_classes(n_models=1))
    assert ("b/cc", "label_bug") in got
    # ... but not when it also fails on many samples of other classes: that is weakness
    t = _classes(n_models=1)
    extra = (t.implementation == "b/cc") & t["sample"].isin([2, 4, 5, 6, 7, 8, 9, 10])
    t.loc[extra, "best_distance"] = INF
    got, _ = found(t)
    assert ("b/cc", "label_bug") not in got
    # failures that ran out of budget on that class are weakness
    got, _ = found(_classes(queries=2000))
    assert ("b/cc", "label_bug") not in got


def test_class_conditional_failure_is_judged_within_the_family():
    """Issue 36: the class rule reads only the implementation's own family. The same class-3
    failure beside an implementation of another family is not judged (a sole implementation of
    its family has nothing to compare its classes with); beside its own sibling it is a label bug."""
    t = _classes()
    got, _ = found(t)
    assert ("b/cc", "label_bug") in got
    other = t.assign(family=np.where(t["implementation"] == "b/cc", "pgd", "fmn"))
    got, _ = found(other)
    assert ("b/cc", "label_bug") not in got


def test_scattered_failures_are_not_class_conditional():
    jobs = []
    for k in range(3):
        best = D.copy()
        best[RNG.choice(np.arange(2, D.size), 8, replace=False)] = INF
        jobs += [healthy(model=f"m{k}"), job_rows(f"m{k}", "b/weak", "l2", best, family="pgd", forwards=20, backwards=20)]
    got, _ = found(table(*jobs))
    assert ("b/weak", "label_bug") not in got


def test_twin_repeats_are_dropped():
    clean = np.where(D > 0, INF, 0.0)
    t = table(healthy(), job_rows("m", "b/noop", "l2", clean, family="fmn", forwards=0, backwards=0),
              healthy(model="m~shift"), job_rows("m~shift", "b/noop", "l2", clean, family="fmn", forwards=0,
                                                 backwards=0, status="crash", error="boom"))
    got, f = found(t)
    twin = f[f.model == "m~shift"]
    assert set(twin.flag) == {"crash"}  # silent_failure is a repeat of the base model's finding


def test_nondeterminism():
    t = table(healthy(), healthy(impl="b/rand"))
    other = t.copy()
    mask = (other.implementation == "b/rand") & (other["sample"] == 7)
    other.loc[mask, "best_distance"] *= 1.1
    got, f = found(t, other=other)
    assert got == {("b/rand", "nondeterminism")}
    assert "1 of 24" in f.evidence.iloc[0] and "sample 7" in f.evidence.iloc[0]
    got, _ = found(t, other=t.copy())
    assert got == set()


def test_shift_sensitivity():
    noise = 1 + RNG.uniform(-0.01, 0.01, D.size)
    t = table(healthy(), healthy(model="m~shift", scale=noise),
              healthy(impl="b/logit", family="pgd"), healthy(model="m~shift", impl="b/logit", family="pgd", scale=1.4))
    got, f = found(t)
    assert got == {("b/logit", "shift_sensitivity")}
    row = f.iloc[0]
    assert row.model == "m" and "m~shift" in row.evidence and "22 of 22 informative images (of 24" in row.evidence


def test_twin_rows_do_not_create_gaps_on_the_base_model():
    t = table(healthy(), healthy(impl="b/y"), healthy(model="m~shift", impl="b/y", scale=3))
    got, _ = found(t)
    assert ("b/y", "optimality_gap") not in got


def test_optimality_gap_needs_significance_and_size():
    t = table(healthy(family="f"), healthy(impl="b/far", scale=1.6, family="f"))
    got, f = found(t)
    assert got == {("b/far", "optimality_gap")}
    ev = f.evidence.iloc[0]
    assert "adv_lib/fmn" in ev and "60% farther" in ev and "BH q" in ev
    # all 22 worse but only 0.5% worse: inside the margin δ, not a gap
    got, _ = found(table(healthy(), healthy(impl="b/close", scale=1.005)))
    assert got == set()
    # different families are not siblings
    got, _ = found(table(healthy(family="f"), healthy(impl="b/far", scale=1.6, family="g")))
    assert got == set()
    # the headline's tests: with no discordant image the failure endpoint cannot show anything and
    # is not charged (Tarone); the share endpoint (every image worse) is never below the exact sign
    # test, and the distance endpoint's exact signed rank is charged beside it (weighted Bonferroni,
    # 0.6 and 0.3 of 0.9): 5 images all 2× farther give 0.0625 × 1.5, 6 give 0.031 × 1.5 = 0.047
    for n, flagged in ((5, False), (6, True), (7, True)):
        t = table(job_rows("m", "a/x", "l2", D[2:2 + n], family="f"),
                  job_rows("m", "b/y", "l2", D[2:2 + n] * 2, family="f"))
        assert (set(flags(t).flag) == {"optimality_gap"}) is flagged, n


def test_below_exact_uses_the_exact_table():
    exact = pd.DataFrame({"model": "m", "norm": "l2", "sample": np.arange(D.size),
                          "status": np.where(D > 0, "optimal", "clean_misclassified"),
                          "exact_distance": D * 0.9, "lower_bound": D * 0.9})
    cheat = D.copy()
    cheat[4] = D[4] * 0.5
    got, f = found(table(healthy(), job_rows("m", "b/cheat", "l2", cheat, family="fmn")), exact=exact)
    assert ("b/cheat", "below_exact") in got
    assert ("adv_lib/fmn", "below_exact") not in got


def test_flagged_summary():
    t = table(healthy(family="f"), healthy(impl="b/far", scale=1.6, refused=5, family="f"))
    marks = flagged(flags(t))
    assert marks == {("b/far", "1.0", "l2"): ["budget_overrun", "optimality_gap"]}
    assert flagged(None) == {}


def test_shift_check_skips_families_not_invariant_by_construction():
    from attackaudit.fidelity.synthetic import job_rows, table

    from attackaudit.fidelity import flags

    base = [0.1, 0.2, 0.3, 0.4]
    moved = [0.3, 0.5, 0.9, 1.2]
    t = table(job_rows("m", "lib/jsma", "l0", base, family="jsma"),
              job_rows("m~shift", "lib/jsma", "l0", moved, family="jsma"),
              job_rows("m", "lib/cw", "l2", base, family="cw"),
              job_rows("m~shift", "lib/cw", "l2", moved, family="cw"))
    found = flags(t)
    shifted = set(found[found["flag"] == "shift_sensitivity"]["implementation"])
    assert shifted == {"lib/cw"}


def test_a_seed_twin_is_never_flagged_itself():
    """A per-job finding on M~seed (the same model and images, another seed) is evidence about the
    attack on M: reported on M, saying it came from the seed twin; one M has too is not repeated."""
    import pandas as pd

    from attackaudit.fidelity.flags import _drop_twin_repeats

    def finding(model, flag, evidence):
        return {"model": model, "norm": "l2", "implementation": "a/x", "library_version": "1", "flag": flag,
                "evidence": evidence}

    found = pd.DataFrame([finding("m~seed", "last_not_best", "3 of 16"), finding("m~seed", "crash", "boom"),
                          finding("m", "crash", "bang"), finding("m~shift", "crash", "bang")])
    twins = {"m": ("m", ""), "m~seed": ("m", "seed"), "m~shift": ("m", "shift")}  # _table.twins_of's form
    out = _drop_twin_repeats(found, twins)
    assert not out["model"].str.endswith("~seed").any()
    by_flag = out.set_index("flag")
    assert by_flag.loc["crash", "evidence"] == "bang" and by_flag.loc["crash", "model"] == "m"
    assert by_flag.loc["last_not_best", "model"] == "m"
    assert by_flag.loc["last_not_best", "evidence"].startswith("on its seed twin m~seed")
    assert len(out) == 2


def _strength(impls: dict[str, tuple[str, float]]):
    """A table of l2 jobs on two models: ``{implementation: (family, scale of D)}``."""
    return table(*[healthy(model=m, impl=impl, family=fam, scale=scale)
                   for impl, (fam, scale) in impls.items() for m in ("m", "m2")])


def test_below_expected_strength_singles_out_only_the_outlier_of_its_family():
    """A strong family (FMN, published L2 optimality 0.976) 3× farther than its own family in
    another library is flagged; the same shortfall in every library is the settings' or a shared
    flaw's, flagged on none and said in the recommendation; a sole implementation, or variants of
    one library, cannot be told from the settings without looking outside the family (issue 36: the
    family is the whole judge), so they are not flagged."""
    from attackaudit.fidelity import recommend
    got, f = found(_strength({"adv_lib/fmn": ("fmn", 1.0), "foolbox/FMN": ("fmn", 3.0)}))
    assert ("foolbox/FMN", "below_expected_strength") in got and ("adv_lib/fmn", "below_expected_strength") not in got
    assert "strongest fmn of another library here (adv_lib/fmn, 1.000)" in \
        f[f.flag == "below_expected_strength"].evidence.iloc[0]

    both = _strength({"adv_lib/fmn": ("fmn", 3.0), "foolbox/FMN": ("fmn", 3.0), "adv_lib/ddn": ("ddn", 1.0)})
    got, f = found(both)
    assert not {i for i, flag in got if flag == "below_expected_strength"}, f.to_string()
    rec = recommend(both, f).set_index(["family", "norm"]).loc[("fmn", "l2")]
    assert "every implementation of fmn under l2 here" in rec.summary and "use adv_lib/ddn" in rec.note

    for impls in ({"foolbox/FMN": ("fmn", 3.0), "adv_lib/ddn": ("ddn", 1.0)},
                  {"foolbox/FMN:a": ("fmn", 3.0), "foolbox/FMN:b": ("fmn", 3.0), "adv_lib/ddn": ("ddn", 1.0)}):
        got, f = found(_strength(impls))
        flagged_impls = {i for i, flag in got if flag == "below_expected_strength"}
        assert flagged_impls == set(), f.to_string()


def test_ead_has_a_last_not_best_null_of_its_own():
    """EAD's FISTA queries a slack point it never keeps as a candidate: a sound EAD returns worse than
    its queried best on about a tenth of the images (ART ElasticNet L1, held-out calibration), which
    the minimal attacks' 5% null flags. The same rows under another family are flagged; a returned
    output worse on half the images is flagged under EAD too."""
    from attackaudit.fidelity.flags import LAST_NOT_BEST_FAMILY_NULL_RATE
    best = np.linspace(0.5, 2.0, 100)
    tenth = np.where(np.arange(100) % 10 == 0, best * 1.3, best)
    half = np.where(np.arange(100) % 2 == 0, best * 1.3, best)
    assert LAST_NOT_BEST_FAMILY_NULL_RATE["ead"] > LAST_NOT_BEST_NULL_RATE["minimal"]

    def last_not_best(family, returned):
        t = table(job_rows("m", f"lib/{family}", "l1", best, family=family, returned=returned))
        return "last_not_best" in set(flags(t)["flag"])

    assert not last_not_best("ead", tenth) and last_not_best("fmn", tenth)
    assert last_not_best("ead", half)
