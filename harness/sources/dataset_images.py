"""How many images a run's dataset has, read from its manifests: torch-free at import, so the
report and the notebook's answers load it without torch. Here, not in the store, because for runs
that predate the record it opens the dataset (``data.dataset_size``), which is the sources' work:
the store stays below the sources."""
from __future__ import annotations


def dataset_images(manifests: list[dict]) -> int | None:
    """The size of the dataset the runs of ``manifests`` drew from (``dataset_images``, which the
    runner records; opened again for runs that predate it); None when they name none or several,
    or it cannot be opened."""
    recorded = {m.get("dataset_images") for m in manifests}
    if len(recorded) == 1 and isinstance(next(iter(recorded)), int):
        return next(iter(recorded))
    names = {str(m.get("dataset") or (m.get("config") or {}).get("dataset") or "") for m in manifests}
    names.discard("")
    if len(names) != 1:
        return None
    from attackaudit.sources.subset import dataset_size  # torch: only for runs that predate the record

    return dataset_size(names.pop())
