import os

import pytest
import torch

os.environ.setdefault("TQDM_DISABLE", "1")
# the zoo's models are tiny: one intra-op thread beats two (OpenMP overhead, busy CI machines)
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def cnn():
    from attackaudit.zoo import load_model

    return load_model("digits-cnn")


@pytest.fixture(scope="session")
def subset8():
    from attackaudit.data import load_subset

    return load_subset("digits", 8, 0)


@pytest.fixture(scope="module")
def model():
    """The standard digits CNN every adapter test attacks."""
    from attackaudit.zoo import load_model

    return load_model("digits-cnn")


@pytest.fixture(scope="module")
def data():
    """Six digits test samples: (N×1×8×8 inputs in [0, 1], N labels)."""
    from attackaudit.data import load_subset

    sub = load_subset("digits", 6, 0)
    return sub.inputs, sub.labels


def library_specs(library: str, module: str) -> dict:
    """One built-in library's catalogue by spec key; skips the calling test module when the
    library (imported as ``module``) is not installed."""
    pytest.importorskip(module)
    from attackaudit.adapters import load_library

    return {s.key: s for s in load_library(library).specs}
