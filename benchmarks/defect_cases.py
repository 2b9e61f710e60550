"""The defect corpus's entries (benchmarks/defects/*.toml, format in benchmarks/defects/README.md):
loading, validation, and the patched twin's source tree.

A ``Case`` is one real defect of a released attack library: the spec that has it, the flags that
must name it, the smallest run that shows it, the wrong source line, and either a source patch
(``fix``: exact text replacements applied to a copy of the release's package) or a ``control``
(the nearest sound implementation, where no honest patch exists).
"""
from __future__ import annotations

import importlib.metadata
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DEFECTS = Path(__file__).resolve().parent / "defects"
ROWS = DEFECTS / "rows"
#: the run settings an entry may give, with their defaults
RUN_DEFAULTS = {"models": ["digits-mlp-tiny"], "samples": 8, "budget": 400, "steps_scale": 0.2, "seed": 0,
                "targeted": False, "siblings": []}


class CaseError(ValueError):
    """An entry that is malformed or no longer matches its release (one line naming it)."""


@dataclass(frozen=True)
class Patch:
    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Case:
    id: str
    library: str
    dist: str
    release: str
    spec: str
    flags: tuple[str, ...]
    summary: str
    source_file: str
    source_line: str
    run: dict
    since: str = ""
    fast: bool = False
    in_every_run: bool = False
    fix_why: str = ""
    patches: tuple[Patch, ...] = ()
    control: str = ""
    control_why: str = ""
    #: the release audit's verdict (fidelity.diff) of the patched twin as the old release against
    #: the defect as the new one, with ε-use evidence (fidelity/eps_use.py); "" when not judged
    audit: str = ""
    #: why no rule separates the defect from its patched twin at any setting tried (the entry stays,
    #: shown in the table, but does not count toward any rule's recall); "" for a separable case
    inseparable: str = ""
    path: Path = field(default=Path("."), compare=False)

    @property
    def implementation(self) -> str:
        """``library/name`` of ``spec`` (the key without its norm)."""
        return self.spec.rsplit("/", 1)[0]

    @property
    def norm(self) -> str:
        return self.spec.rsplit("/", 1)[1]


def _need(data: dict, key: str, kind: type, where: str):
    if key not in data:
        raise CaseError(f"{where}: missing key {key!r} (see benchmarks/defects/README.md)")
    if not isinstance(data[key], kind):
        raise CaseError(f"{where}: {key!r} must be a {kind.__name__}, got {type(data[key]).__name__}")
    return data[key]


def load_case(path: str | Path) -> Case:
    """One entry, validated for form (not yet against its release: ``check_source``)."""
    from attackaudit.fidelity.flags import FLAGS

    path = Path(path)
    where = f"defect entry {path.name}"
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise CaseError(f"{where} is not valid TOML: {exc}") from None
    if _need(data, "id", str, where) != path.stem:
        raise CaseError(f"{where}: id {data['id']!r} must equal the file name {path.stem!r}")
    flags = tuple(_need(data, "flags", list, where))
    unknown = [f for f in flags if f not in FLAGS]
    if not flags or unknown:
        raise CaseError(f"{where}: flags must name at least one of fidelity.flags.FLAGS, got {unknown or 'none'}")
    spec = _need(data, "spec", str, where)
    if spec.count("/") < 2:
        raise CaseError(f"{where}: spec {spec!r} must be a spec key library/name/norm")
    source = _need(data, "source", dict, where)
    run = _need(data, "run", dict, where)
    extra = set(run) - set(RUN_DEFAULTS)
    if extra:
        raise CaseError(f"{where}: unknown [run] key(s) {sorted(extra)}; known: {sorted(RUN_DEFAULTS)}")
    fix, control = data.get("fix"), data.get("control")
    if (fix is None) == (control is None):
        raise CaseError(f"{where}: give exactly one of [fix] (a source patch) or [control] (why none is possible)")
    patches = tuple(Patch(_need(p, "file", str, where), _need(p, "old", str, where), _need(p, "new", str, where))
                    for p in (fix or {}).get("patch", []))
    if fix is not None and not patches:
        raise CaseError(f"{where}: [fix] needs at least one [[fix.patch]]")
    audit = data.get("audit", "")
    if audit not in ("", "regressed", "improved"):
        raise CaseError(f"{where}: audit must be \"regressed\" or \"improved\", not {audit!r}")
    if audit and fix is None:
        raise CaseError(f"{where}: audit needs a [fix]: the patched twin is the release it is audited against")
    return Case(id=data["id"], library=_need(data, "library", str, where), dist=_need(data, "dist", str, where),
                release=_need(data, "release", str, where), spec=spec, flags=flags,
                summary=_need(data, "summary", str, where), source_file=_need(source, "file", str, where),
                source_line=_need(source, "line", str, where), run=RUN_DEFAULTS | run,
                since=data.get("since", ""), fast=bool(data.get("fast", False)),
                in_every_run=bool(data.get("in_every_run", False)),
                fix_why=(fix or {}).get("why", ""), patches=patches,
                control=(control or {}).get("spec", ""), control_why=(control or {}).get("why", ""), audit=audit,
                inseparable=_text(data, "inseparable", where), path=path)


def _text(data: dict, key: str, where: str) -> str:
    """An optional string key ("" when absent)."""
    value = data.get(key, "")
    if not isinstance(value, str):
        raise CaseError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return value


def load_cases(ids: list[str] | None = None) -> list[Case]:
    """Every entry of benchmarks/defects/ (or those ``ids``), sorted by id."""
    paths = sorted(DEFECTS.glob("*.toml"))
    cases = [load_case(p) for p in paths if not ids or p.stem in ids]
    missing = set(ids or []) - {c.id for c in cases}
    if missing:
        raise CaseError(f"no defect entry {sorted(missing)} in {DEFECTS}")
    return cases


def package_root(site_packages: str | Path | None, dist: str) -> tuple[Path, list[str]]:
    """(the site-packages directory holding ``dist``, its top-level package names), from the
    distribution's record; ``site_packages`` None: the running environment."""
    if site_packages is None:
        d = importlib.metadata.distribution(dist)
    else:
        d = next(iter(importlib.metadata.distributions(name=dist, path=[str(site_packages)])), None)
        if d is None:
            raise CaseError(f"{dist} is not installed in {site_packages}")
    root = Path(d.locate_file(""))
    tops = sorted({Path(f).parts[0] for f in d.files or [] if not Path(f).parts[0].endswith((".dist-info", ".pth"))
                   and (root / Path(f).parts[0]).is_dir() and Path(f).parts[0] != "__pycache__"})
    return root, tops


def check_source(case: Case, root: Path) -> None:
    """The entry's wrong line and every patch's ``old`` text must be in the release at ``root``."""
    text = (root / case.source_file).read_text() if (root / case.source_file).is_file() else None
    if text is None or case.source_line not in text:
        raise CaseError(f"defect entry {case.id}: its [source] line is not in {case.dist} {case.release}'s "
                        f"{case.source_file}")
    for p in case.patches:
        body = (root / p.file).read_text() if (root / p.file).is_file() else ""
        if body.count(p.old) != 1:
            raise CaseError(f"defect entry {case.id}: a [[fix.patch]] old text occurs {body.count(p.old)} times in "
                            f"{p.file} of {case.dist} {case.release}, not once")


def patched_tree(case: Case, root: Path, tops: list[str], out: Path, version: str) -> Path:
    """A source tree at ``out``: the release's packages ``tops`` copied from ``root`` with the
    case's patches applied, and a pyproject.toml naming ``dist`` ``version`` (no dependencies:
    the overlay runs on the project's). Its content hash names the candidate."""
    check_source(case, root)
    if out.exists():
        shutil.rmtree(out)
    for top in tops:
        shutil.copytree(root / top, out / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for p in case.patches:
        target = out / p.file
        target.write_text(target.read_text().replace(p.old, p.new))
    include = ", ".join(f'"{t}*"' for t in tops)
    (out / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{case.dist}"\nversion = "{version}"\n'
        f'[tool.setuptools.packages.find]\ninclude = [{include}]\n'
        '[tool.setuptools.package-data]\n"*" = ["*"]\n')
    return out
