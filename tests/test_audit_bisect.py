"""``audit.bisect`` against a linear scan: on any release history with one change per
implementation, and any set of releases that cannot be prepared, bisection names the same first
release as a scan of every testable release, measures each release at most once, and measures
about log2(n) of them when none is skipped."""
from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from attackaudit.audit.command import bisect
from attackaudit.audit.env import AuditEnvError


@st.composite
def histories(draw):
    n = draw(st.integers(2, 60))
    releases = [f"1.{i}.0" for i in range(n)]
    # per implementation, the index of the first release with the final verdict
    changes = draw(st.dictionaries(st.sampled_from([("lib/a", "l2"), ("lib/b", "linf"), ("lib/c", "l1")]),
                                   st.integers(1, n - 1), min_size=1))
    skipped = draw(st.sets(st.integers(1, n - 2), max_size=n // 3)) if n > 2 else set()
    return releases, changes, skipped


@settings(max_examples=200, deadline=None)
@given(histories())
def test_bisect_agrees_with_a_linear_scan(history):
    releases, changes, skipped = history
    verdicts = {key: ("regressed" if i % 2 else "new") for i, key in enumerate(sorted(changes))}
    measured: list[str] = []

    def measure(version: str) -> dict:
        i = releases.index(version)
        measured.append(version)
        if i in skipped:
            raise AuditEnvError(f"cannot install {version}")
        return {key: {"optimality": 0.5, "asr": 0.5, "verdict": verdicts[key] if i >= k else "unchanged"}
                for key, k in changes.items()}

    found, evidence = bisect(releases, verdicts, measure, echo=lambda line: None)
    assert len(measured) == len(set(measured))  # one run per release, shared by every implementation
    assert set(evidence) == set(measured)
    testable = [i for i in range(len(releases)) if i not in skipped]
    for change in found:
        k = changes[(change["implementation"], change["norm"])]
        hi = min(i for i in testable if i >= k)
        lo = max(i for i in testable if i < k)
        assert change["first_release"] == releases[hi]
        assert change["last_release_before"] == releases[lo]
        assert change["untestable_between"] == releases[lo + 1:hi]
        assert change["verdict"] == verdicts[(change["implementation"], change["norm"])]
    if not skipped and len(changes) == 1:
        assert len(measured) <= math.ceil(math.log2(len(releases) - 1))
