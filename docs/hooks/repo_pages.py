"""mkdocs hook: two READMEs outside docs/ as pages of the site.

`fidelity/README.md` (the analysis in full) and `benchmarks/README.md` (the timings) live beside
the code they describe, not in docs/; the site shows them as ``fidelity.md`` and ``benchmarks.md``
(mkdocs.yml's nav), read from where they are, so there is one copy of each. The docs pages name
them by their repository paths, which work on the repository too.
"""
from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

#: page of the site → the repository file it shows
PAGES = {"fidelity.md": "fidelity/README.md", "benchmarks.md": "benchmarks/README.md"}


def on_files(files, config):
    """Add each of ``PAGES`` to the site's files, its source the repository file."""
    root = Path(config.config_file_path).resolve().parent
    for page, source in PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(root / source)))
    return files
