"""An inconclusive verdict that needs more images than the dataset has says so, in the report,
`explain` and the audit: the dataset's size comes from the run's manifest."""
from __future__ import annotations

import torch

from attackaudit.reports.answer import Answer, Member
from attackaudit.reports.text import trust_text
from attackaudit.sources.dataset_images import dataset_images
from attackaudit.sources.subset import dataset_size, digits

TOO_FEW = "cannot be decided on this dataset (needs ≈1220 images, it has 540)"


def test_the_dataset_size_is_the_pool_a_subset_is_drawn_from(tmp_path):
    assert dataset_size("digits") == len(digits("test")[1])
    path = tmp_path / "data.pt"
    torch.save({"inputs": torch.rand(7, 1, 8, 8), "labels": torch.arange(7) % 3}, path)
    assert dataset_size(f"tensors:{path}") == 7
    assert dataset_size(f"tensors:{tmp_path / 'moved.pt'}") is None  # a moved file: no size, no failure
    assert dataset_images([{"dataset": "digits"}, {"config": {"dataset": "digits"}}]) == dataset_size("digits")
    assert dataset_images([{"dataset": "digits"}, {"dataset": f"tensors:{path}"}]) is None  # two datasets
    assert dataset_images([{}]) is None
    # what the runner recorded wins: reading a run's verdicts needs no dataset and no torch
    assert dataset_images([{"dataset": "digits", "dataset_images": 12}]) == 12


def _members(decision: str) -> list[dict]:
    return [{"implementation": "a/pgd", "answer": "", "images_to_decide": None},
            {"implementation": "b/pgd", "answer": "inconclusive", "images_to_decide": 1220.0, "decision": decision},
            {"implementation": "c/pgd", "answer": "inconclusive", "images_to_decide": 300.0,
             "decision": "rerun with --samples 300 (planned for 80% power)"}]


def test_the_trust_cell_and_the_first_screen_use_the_deciding_member_s_words():
    row = {"verdict": "inconclusive", "images_to_decide": 1220.0, "trust_set": _members(TOO_FEW), "norm": "l2"}
    assert trust_text(row, {}).endswith(TOO_FEW)
    members = [Member(m["implementation"], "1", 0.9, (0.8, 1.0), m["answer"],
                      images_to_decide=float(m["images_to_decide"] or "nan"), decision=m.get("decision", ""))
               for m in _members(TOO_FEW)]
    answer = Answer("pgd", "l2", "inconclusive", members, ("a/pgd", "1"), 0.9, (0.8, 1.0), 3, {}, "")
    assert answer.rerun == TOO_FEW
    row["trust_set"] = _members("")  # rows without the decision text (older reports) keep the number
    assert trust_text(row, {}).endswith("rerun with --samples 1220")
