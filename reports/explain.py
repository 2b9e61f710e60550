"""``attackaudit explain RUN IMPLEMENTATION [--norm N]``: one implementation's story in the terminal.

For each norm it ran under: its flags with their evidence, whether it is trusted for its family
and norm and why (the recommendation's verdict, its place in the trust set or what kept it out),
its local optimality ξ on every model, and the images where it falls furthest behind the envelope
(the smallest distance any implementation found on that image).

Its arguments and entry point are ``harness/cli/explain.py``'s; ``explain`` raises ``InputError`` with
a one-line message for input the user must fix (a missing run, an implementation the run does not
hold, an ambiguous name, a norm it did not run).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from attackaudit.fidelity.advice import Advice, advice_sentence
from attackaudit.fidelity.flag_kinds import defects, severity, weaknesses
from .answer import BOUNDARY_COLUMNS, boundary_text, verdict_word
from .run_files import load_runs
from attackaudit.errors import InputError

#: images listed per model and norm under "furthest behind the envelope"
WORST_IMAGES = 5


def resolve_implementation(names: list[str], wanted: str) -> str:
    """The one implementation of ``names`` that ``wanted`` means: an exact name, else the unique
    name containing it (case-insensitive). ValueError (one line) otherwise."""
    if wanted in names:
        return wanted
    hits = sorted({n for n in names if wanted.lower() in n.lower()})
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise InputError(f"implementation {wanted!r} is not in this run; it holds {len(set(names))}, e.g. "
                         f"{', '.join(sorted(set(names))[:5])}")
    raise InputError(f"implementation {wanted!r} is ambiguous: {', '.join(hits[:8])}"
                     + (f" and {len(hits) - 8} more" if len(hits) > 8 else ""))


def _f(x: object, spec: str = ".3f") -> str:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "—"
    return "n/a" if math.isnan(v) else ("∞" if math.isinf(v) else format(v, spec))


def trust_lines(rec: pd.DataFrame, impl: str, version: str, family: str, norm: str,
                own_flags: list[str] | None = None) -> list[str]:
    """Whether ``impl`` is trusted for its family and norm, and why (from ``fidelity.recommend``)."""
    row = rec[(rec["family"] == family) & (rec["norm"] == norm)]
    if row.empty:
        return [f"trust: no recommendation for {family} under {norm}"]
    r = row.iloc[0].to_dict()
    word = verdict_word(r)
    members = [m for m in (r.get("trust_set") or []) if isinstance(m, dict)]
    names = ", ".join(m.get("implementation", "?") for m in members) or "none"
    mine = next((m for m in members if m.get("implementation") == impl
                 and str(m.get("library_version", "")) == version), None)
    if mine is not None:
        where = "the top pick" if members and mine is members[0] else _against_top(mine, members[0])
        lo, hi = (mine.get("optimality_ci") or [math.nan, math.nan])[:2]
        out = [f"trusted: {word} for {family} under {norm} ({names}); it is {where}; global ξ "
               f"{_f(mine.get('optimality'))} (95% interval {_f(lo)}–{_f(hi)})"]
    else:
        bad = defects(own_flags or [])
        why = [f"it is flagged ({', '.join(bad)}: a defect); a flagged implementation is never trusted"] \
            if bad else [w for w in (r.get("weak") or []) if impl in str(w)]
        note = str(r.get("note") or "")
        out = [f"not trusted: {family} under {norm} is {word}" + (f" ({names})" if members else "")]
        out += [f"  why: {w}" for w in why] or ([f"  why: {note}"] if note else [])
    weak = weaknesses(own_flags or [])
    if weak:
        out.append(f"  weaker: {', '.join(weak)} (a weakness, not a flag: it never removes an implementation from "
                   "the trust set, whose own tests decide)")
    summary = str(r.get("summary") or "")
    if summary and summary != str(r.get("note") or ""):
        out.append(f"  what to do: {summary}")
    return out


def _against_top(member: dict, top: dict) -> str:
    """How a trust-set member stands against the top pick (fidelity.recommend's member fields)."""
    name = top.get("implementation")
    if member.get("answer") == "equivalent":
        return f"equivalent to the top pick {name} (TOST Holm p = {_f(member.get('p_equivalent'), '.2g')})"
    need = member.get("images_to_decide")
    rerun = member.get("decision") or (advice_sentence(Advice("samples", round(float(need))))
                                       if need is not None and math.isfinite(float(need))
                                       else "more images would not decide it")
    return f"neither shown different from nor equivalent to the top pick {name}: {rerun}"


def behind_envelope(dist: pd.DataFrame, env: pd.DataFrame, impl: str, version: str, norm: str,
                    k: int, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per model, the ``k`` images where ``impl`` is furthest behind the envelope: failures where
    another implementation succeeded first, then the largest ratio distance / d*. Columns: model,
    sample, distance, d_star, ratio, found_by, and with ``table`` (the result rows) what the row
    recorded of a dropped best (``BOUNDARY_COLUMNS``, for ``answer.boundary_text``)."""
    mine = dist[(dist["implementation"] == impl) & (dist["library_version"] == version) & (dist["norm"] == norm)]
    if table is not None:
        cols = [c for c in BOUNDARY_COLUMNS if c in table.columns]
        keys = ["model", "norm", "implementation", "library_version", "sample"]
        mine = mine.merge(table[keys + cols].drop_duplicates(keys, keep="last"), on=keys, how="left")
    both = mine.merge(env[env["norm"] == norm], on=["model", "norm", "sample"])
    both = both[(both["d_star"] > 0) & np.isfinite(both["d_star"])]
    both = both.assign(ratio=both["best_distance"] / both["d_star"])
    both = both[both["ratio"] > 1 + 1e-9]
    out = both.sort_values(["model", "ratio", "sample"], ascending=[True, False, True]).groupby("model").head(k)
    extra = [c for c in BOUNDARY_COLUMNS if c in out.columns]
    return out[["model", "sample", "best_distance", "d_star", "ratio", "found_by", *extra]].rename(
        columns={"best_distance": "distance"})


def explain(run: Path, implementation: str, norm: str | None = None, images: int = WORST_IMAGES) -> list[str]:
    """The lines ``attackaudit explain`` prints."""
    from attackaudit import fidelity
    from .looks import recommend_looks
    from .tables import sample_distances

    table, manifests, _ = load_runs([Path(run)])
    impl = resolve_implementation(table["implementation"].astype(str).tolist(), implementation)
    rows = table[table["implementation"] == impl]
    norms = sorted(rows["norm"].astype(str).unique())
    if norm is not None:
        if norm not in norms:
            raise InputError(f"{impl} did not run under --norm {norm}; it ran under {', '.join(norms)}")
        norms = [norm]
    flags = fidelity.flags(table)
    board = fidelity.leaderboard(table)
    rec, _ = recommend_looks(table, flags, board, [Path(run)], manifests)  # a run's looks: its last look's verdicts
    local = fidelity.local_optimality(table)
    env = fidelity.envelope(table)
    dist = sample_distances(table)
    out = []
    for n in norms:
        part = rows[rows["norm"] == n]
        for version in sorted(part["library_version"].astype(str).unique()):
            family = str(part["family"].iloc[0])
            mine_board = board[(board["implementation"] == impl) & (board["library_version"] == version)
                               & (board["norm"] == n)]
            head = f"{impl} {version}".strip() + f" · {family} · {n}"
            if len(mine_board):
                head += (f": global ξ {_f(mine_board['optimality'].iloc[0])}, rank "
                         f"{_f(mine_board['rank'].iloc[0], '.0f')} of {int((board['norm'] == n).sum())} under {n}")
            out += [head, "=" * min(len(head), 100)]
            f = flags[(flags["implementation"] == impl) & (flags["library_version"] == version) & (flags["norm"] == n)]
            kinds = [severity(x) for x in f["flag"]]
            out.append(f"flags: {len(f)}" + (f" ({kinds.count('defect')} defect, {kinds.count('weakness')} weakness)"
                                             if len(f) else " (none)"))
            for r in f.itertuples(index=False):
                model = "all models" if r.model == "*" else r.model
                out.append(f"  {r.flag} ({severity(r.flag)}; {model}): {r.evidence}")
            out += trust_lines(rec, impl, version, family, n, sorted(set(f["flag"].astype(str))))
            loc = local[(local["implementation"] == impl) & (local["library_version"] == version) & (local["norm"] == n)]
            out.append("ξ per model: " + ("; ".join(f"{r.model} {_f(r.optimality)} ({int(r.n_success)} of "
                                                    f"{int(r.n_samples)} broken)" for r in loc.itertuples(index=False))
                                          or "none"))
            worst = behind_envelope(dist, env, impl, version, n, images, table)
            out.append(f"furthest behind the envelope (d* = the smallest distance any implementation found): "
                       + ("none: it matches the envelope on every image" if worst.empty else ""))
            for r in worst.itertuples(index=False):
                gap = ("failed" + boundary_text(r._asdict())) if not np.isfinite(r.ratio) else f"{r.ratio:.2f}× d*"
                out.append(f"  {r.model} image {r.sample}: {_f(r.distance, '.4g')} vs d* {_f(r.d_star, '.4g')} "
                           f"({gap}; d* by {r.found_by or '?'})")
            out.append("")
    return out[:-1] if out and out[-1] == "" else out
