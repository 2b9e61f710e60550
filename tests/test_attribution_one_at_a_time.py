"""Attribution step 4's position rule holds for batches and subsets (B > 1) and hinted rows, not
for a lone row whose E is read off the previous one-row query. torchattacks 3.5.1's DeepFool walks
one image at a time, in turn, with one-row queries: such an E named the image before, and an
iterate out of every original's reach was charged to it (the demo's batch twin then 'found' a
batch dependence: 2 of 3 images, p 0.007). Real library, real digits MLP."""
import numpy as np
import pytest

from test_defect_classes import _run


@pytest.fixture(scope="module")
def deepfool() -> dict:
    pytest.importorskip("torchattacks")
    rows = _run(["torchattacks/DeepFool/l2"], ["digits-mlp", "digits-mlp~batch"])
    return {m: g.sort_values("sample").reset_index(drop=True) for m, g in rows.groupby("model")}


def test_an_image_at_a_time_walk_is_charged_to_its_own_image(deepfool):
    batch, rearranged = deepfool["digits-mlp"], deepfool["digits-mlp~batch"]
    # DeepFool handles each image alone: the batch around it changes nothing, counts included
    assert batch.forwards.tolist() == rearranged.forwards.tolist()
    np.testing.assert_array_equal(batch.best_distance.to_numpy(), rearranged.best_distance.to_numpy())
    # one forward per step of its own, the same for every image that took all its steps
    assert batch.forwards.max() == batch.forwards.mode().iat[0] and (batch.refused == 0).all()
