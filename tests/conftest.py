import os

import pytest
import torch

os.environ.setdefault("TQDM_DISABLE", "1")
torch.set_num_threads(2)


@pytest.fixture(scope="session")
def cnn():
    from attackaudit.zoo import load_model

    return load_model("digits-cnn")


@pytest.fixture(scope="session")
def subset8():
    from attackaudit.data import load_subset

    return load_subset("digits", 8, 0)
