"""attackaudit: same-named attacks from several libraries, on the same query-tracked models."""
from __future__ import annotations

__version__ = "0.1.0"

from attackaudit.results.store import load_run  # noqa: E402

#: the plugin contract, also importable from here (``attackaudit.adapters`` is its home; loaded on
#: first use, so that ``import attackaudit`` stays free of torch)
_PLUGIN_API = ("AttackSpec", "MinimalAttack", "FixedEpsAttack")
#: the notebook API (``harness/api.py``), loaded on first use; torch only when ``compare`` runs
_NOTEBOOK_API = ("compare", "open", "Result")

__all__ = ["load_run", "__version__", *_PLUGIN_API, *_NOTEBOOK_API]


def __getattr__(name: str):
    if name in _PLUGIN_API:
        import attackaudit.adapters as adapters

        return getattr(adapters, name)
    if name in _NOTEBOOK_API:
        import attackaudit.api as api

        return getattr(api, name)
    raise AttributeError(f"module 'attackaudit' has no attribute {name!r}")
