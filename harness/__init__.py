"""attackaudit: same-named attacks from several libraries, on the same query-tracked models."""
from __future__ import annotations

__version__ = "0.1.0"

from .store import load_run  # noqa: E402

__all__ = ["load_run", "__version__"]
