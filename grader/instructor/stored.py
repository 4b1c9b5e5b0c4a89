"""Stored gradings, as the instructor's commands (rescore, whatif) read them, and what each item measured.

A stored grading is a folder holding ``grading.json`` (with the results.json, summary.md and side files the
grading wrote beside it). :func:`find_gradings` takes any of:

- a grading.json file, or a grading's folder (``python -m grader grade --out DIR``): one grading;
- a batch's output folder (``python -m grader batch --out DIR``): ``DIR/submissions/<folder>/``, one folder per
  submission (its grading.json, results.json, batch_status.json, intake.json), with ``grades.csv`` and
  ``batch.json`` beside ``submissions/``;
- a folder of grading folders (``DIR/<name>/grading.json``, e.g. tests/fixtures/gradings/).

:func:`measured_value` reads an item's measured value from its stored :class:`~grader.model.ItemResult`
(``values``), and :func:`threshold_of` its threshold from the item, where its kind's entry says
(grader/rubric/kinds.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.evidence.rubric import Item
from grader.model import ItemResult
from grader.rubric.errors import ConfigError
from grader.rubric.kinds import REGISTRY, Registry

GRADING_FILE = "grading.json"
SUBMISSIONS = "submissions"  # a batch's folder of submission folders (grader/deploy/batch/run.py)


class Layout:
    GRADING = "grading"  # one grading's folder
    BATCH = "batch"  # a batch's output folder: submissions/<folder>/
    SET = "set"  # a folder of grading folders


@dataclass
class Collection:
    """The gradings found under one path: their folders by name, in name order."""

    layout: str
    root: Path  # the path given (a grading.json's folder when a file was given)
    folders: dict[str, Path] = field(default_factory=dict)  # name -> folder holding grading.json
    ungraded: dict[str, Path] = field(default_factory=dict)  # a batch's submission folders without one

    @property
    def subs_dir(self) -> Path:
        """Where the submission folders are (a batch's submissions/, a set's own folder)."""
        return self.root / SUBMISSIONS if self.layout == Layout.BATCH else self.root


def _has_grading(d: Path) -> bool:
    return (d / GRADING_FILE).is_file() and not (d / GRADING_FILE).is_symlink()


def _subfolders(d: Path) -> list[Path]:
    return sorted(c for c in d.iterdir() if c.is_dir() and not c.is_symlink() and not c.name.startswith("."))


def find_gradings(path: Path) -> Collection:
    """The gradings under ``path`` (see the module docstring). ConfigError when there are none."""
    path = Path(path)
    if path.is_file() and path.name == GRADING_FILE:
        return Collection(Layout.GRADING, path.parent, {path.parent.name: path.parent})
    if not path.is_dir():
        raise ConfigError(str(path), "is neither a folder nor a grading.json",
                          "a grading's folder, a batch's output folder or a folder of grading folders")
    if _has_grading(path):
        return Collection(Layout.GRADING, path, {path.name: path})
    layout, base = (Layout.BATCH, path / SUBMISSIONS) if (path / SUBMISSIONS).is_dir() else (Layout.SET, path)
    found = Collection(layout, path)
    for d in _subfolders(base):
        if _has_grading(d):
            found.folders[d.name] = d
        elif layout == Layout.BATCH and not d.name.endswith(".partial"):
            found.ungraded[d.name] = d
    if not found.folders:
        raise ConfigError(str(path), f"holds no {GRADING_FILE} (nor {SUBMISSIONS}/*/{GRADING_FILE}, */{GRADING_FILE})",
                          "a grading's folder, a batch's output folder or a folder of grading folders")
    return found


# ---------------------------------------------------------------------------------------------
# What an item measured, and what it is measured against
# ---------------------------------------------------------------------------------------------
# Where a kind's number sits in ItemResult.values, and its level in the item, is the kind's entry
# (grader/rubric/kinds.py: Kind.measured_key, Kind.level_param).
def is_threshold_item(item: Item, registry: Registry = REGISTRY) -> bool:
    kind = registry.get(item.kind)
    return kind is not None and kind.threshold_kind


def measured_value(item: Item, result: ItemResult | None, registry: Registry = REGISTRY) -> float | None:
    """The number ``item`` was graded on, from its stored result; None when nothing was measured (not timed,
    not profiled, no GPU) or the item is not graded by a number."""
    kind = registry.get(item.kind)
    return kind.measured(result) if kind is not None else None


def threshold_of(item: Item, result: ItemResult | None = None, registry: Registry = REGISTRY) -> float | None:
    """The level ``item`` must reach: its ``min`` (speed kinds), its ``value`` (ncu; an expression in N is read from
    a stored result's ``threshold``); None when unknown."""
    kind = registry.get(item.kind)
    return kind.threshold(item, result) if kind is not None else None
