"""attackaudit: same-named attacks from several libraries, on the same query-tracked models."""
from __future__ import annotations

__version__ = "0.1.0"

from .store import load_run  # noqa: E402

#: the plugin contract, also importable from here (``attackaudit.adapters`` is its home; loaded on
#: first use, so that ``import attackaudit`` stays free of torch)
_PLUGIN_API = ("AttackSpec", "MinimalAttack", "FixedEpsAttack")

__all__ = ["load_run", "__version__", *_PLUGIN_API]


def __getattr__(name: str):
    if name in _PLUGIN_API:
        from . import adapters

        return getattr(adapters, name)
    raise AttributeError(f"module 'attackaudit' has no attribute {name!r}")
