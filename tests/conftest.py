import os

import pytest
import torch
from hypothesis import settings

os.environ.setdefault("TQDM_DISABLE", "1")

#: ``ATTACKAUDIT_HYPOTHESIS=ci`` (set by .ci/run) runs the property tests with CI_EXAMPLE_FACTOR
#: times their examples: the default stays fast for a developer's edit-test loop
HYPOTHESIS_PROFILE = os.environ.get("ATTACKAUDIT_HYPOTHESIS", "default")
CI_EXAMPLE_FACTOR = 3
if HYPOTHESIS_PROFILE not in ("default", "ci"):
    raise pytest.UsageError(f"ATTACKAUDIT_HYPOTHESIS={HYPOTHESIS_PROFILE!r}: use default or ci")
# derandomized: CI runs one fixed, reproducible set of examples (3× the default), so a red CI can be
# replayed exactly; the default profile keeps exploring new examples on every developer run
settings.register_profile("ci", max_examples=settings.default.max_examples * CI_EXAMPLE_FACTOR, derandomize=True)
settings.load_profile(HYPOTHESIS_PROFILE)


def examples(default: int) -> int:
    """A property test's number of examples: ``default``, times CI_EXAMPLE_FACTOR under the ci profile
    (an explicit ``max_examples`` overrides the profile, so tests that set one call this)."""
    return default * CI_EXAMPLE_FACTOR if HYPOTHESIS_PROFILE == "ci" else default
# the zoo's models are tiny: one intra-op thread beats two (OpenMP overhead, busy CI machines)
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def cnn():
    from attackaudit.sources.zoo import load_model

    return load_model("digits-cnn")


@pytest.fixture(scope="session")
def subset8():
    from attackaudit.sources.subset import load_subset

    return load_subset("digits", 8, 0)


@pytest.fixture(scope="module")
def model():
    """The standard digits CNN every adapter test attacks."""
    from attackaudit.sources.zoo import load_model

    return load_model("digits-cnn")


@pytest.fixture(scope="module")
def data():
    """Six digits test samples: (N×1×8×8 inputs in [0, 1], N labels)."""
    from attackaudit.sources.subset import load_subset

    sub = load_subset("digits", 6, 0)
    return sub.inputs, sub.labels


def library_specs(library: str, module: str) -> dict:
    """One built-in library's catalogue by spec key; skips the calling test module when the
    library (imported as ``module``) is not installed."""
    pytest.importorskip(module)
    from attackaudit.adapters import load_library

    return {s.key: s for s in load_library(library).specs}
