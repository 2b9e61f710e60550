"""mkdocs hook: the package ``attackaudit`` laid out as one folder, for mkdocstrings to read.

pyproject.toml's ``package-dir`` builds ``attackaudit`` from four folders: harness/ is the package,
adapters/, fidelity/ and reports/ are its sub-packages. No folder of the repository is named
``attackaudit``, so griffe (mkdocstrings' reader, which parses the source without importing it)
finds neither the package nor those sub-packages. Before mkdocstrings reads anything, this hook
lays out the tree the installed package has, as symbolic links into the source folders, in the
folder mkdocs.yml gives the python handler as ``paths`` (build/api-tree). Nothing is imported, so
the reference builds without torch.
"""
from __future__ import annotations

import os
import tomllib
from pathlib import Path

from mkdocs.plugins import event_priority

PACKAGE = "attackaudit"


def package_dirs(root: Path) -> dict[str, Path]:
    """pyproject.toml's ``package-dir``: dotted package → its source folder."""
    data = tomllib.loads((root / "pyproject.toml").read_text())
    return {name: root / folder for name, folder in data["tool"]["setuptools"]["package-dir"].items()}


def wanted_links(root: Path, tree: Path) -> dict[Path, Path]:
    """Link path under ``tree`` → the source file or folder it points to."""
    dirs = package_dirs(root)
    top = tree / PACKAGE
    links = {top / child.name: child for child in dirs.pop(PACKAGE).iterdir() if child.name != "__pycache__"}
    for name, folder in dirs.items():
        parts = name.split(".")[1:]
        if len(parts) != 1:  # a sub-package of a sub-package would sit inside a linked folder
            raise ValueError(f"package-dir {name}: only direct sub-packages of {PACKAGE} are laid out")
        links[top / parts[0]] = folder
    return links


def lay_out(root: Path, tree: Path) -> None:
    """Make ``tree``/attackaudit hold exactly the wanted links (idempotent, safe to run twice at once)."""
    links = wanted_links(root, tree)
    (tree / PACKAGE).mkdir(parents=True, exist_ok=True)
    for path in (tree / PACKAGE).iterdir():
        if links.get(path) != (Path(os.readlink(path)) if path.is_symlink() else None):
            path.unlink(missing_ok=True)  # a file gone from the source, or a link to elsewhere
    for path, target in links.items():
        try:
            path.symlink_to(target, target_is_directory=target.is_dir())
        except FileExistsError:  # this build's earlier run, or another build now
            pass


@event_priority(100)  # before mkdocstrings' own on_config, which makes the handler read its paths
def on_config(config):
    """Lay out the tree where the python handler's first ``paths`` entry says."""
    root = Path(config.config_file_path).resolve().parent
    handler = config.plugins["mkdocstrings"].config.handlers["python"]
    lay_out(root, root / handler["paths"][0])
    return config
