"""griffe extension (mkdocs.yml, the python handler's ``extensions``): Sphinx roles as code.

A few docstrings name another object Sphinx's way (:class:`Result`, :func:`spec_problem`); Markdown
has no such role and would print the colons. Each role becomes the name in code, as ``help()``
readers see it; the source is not changed.
"""
from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|obj|exc):`~?([^`]+)`")


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite ``:role:`name``` to ```name``` in every docstring griffe reads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
