"""docs/architecture.md cannot drift: it names every Python file of dsgraph/, partition/, train/,
predict/ and benchmarks/ (``__init__.py`` and ``__main__.py`` included) and every configs/*.yaml
once, as a list item ``- `path`: its job``, and every backticked repository path in it exists."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("dsgraph", "partition", "train", "predict", "benchmarks")
# Backticked paths under these folders are checked for existence.
ROOTS = (*PACKAGES, "configs", "docs", "tests")


def _listed() -> Counter:
    """The paths the doc lists as ``- `path`: ...`` items, with how often each is listed."""
    return Counter(re.findall(r"^- `([^`]+)`:", DOC.read_text(), flags=re.MULTILINE))


def _expected() -> set[str]:
    files = {p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
             if "__pycache__" not in p.parts}
    files |= set((ROOT / "configs").glob("*.yaml"))
    return {p.relative_to(ROOT).as_posix() for p in files}


def test_every_module_and_config_is_listed_once():
    listed = _listed()
    missing = sorted(_expected() - set(listed))
    assert not missing, f"docs/architecture.md lists no line for: {', '.join(missing)}"
    twice = sorted(p for p, n in listed.items() if n > 1)
    assert not twice, f"docs/architecture.md lists more than once: {', '.join(twice)}"


def test_every_path_named_exists():
    named = set(re.findall(r"`([^`\s]+)`", DOC.read_text()))
    paths = {n for n in named if n.split("/")[0] in ROOTS and "/" in n}
    gone = sorted(p for p in paths if not (ROOT / p).exists())
    assert not gone, f"docs/architecture.md names paths that do not exist: {', '.join(gone)}"
    assert len(paths) > 200  # the convention is followed: the paths are backticked


def test_only_modules_and_configs_are_list_items():
    """A list item is a module or a config (a listed folder or a typo would pass unseen)."""
    stray = sorted(set(_listed()) - _expected())
    assert not stray, f"docs/architecture.md lists what is not a module or config: {stray}"
