"""The report compared with a baseline run (``report --baseline DIR``): ``diff``'s step phases and
op types of the baseline (BASE) against the profile the report is about (NEW), with the same
noise rule (docs/analysis.md §10)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...errors import Diagnostics, as_text
from ...executor import LOCAL, Where
from .. import diff

TYPES_SHOWN = 10  # op types listed in the HTML: the largest regressions (all of them in the JSON)


@dataclass
class Baseline:
    """What changed from the baseline: per step phase, and per op type (largest regression first)."""

    path: str
    steps: list[diff.DiffRow]
    types: list[diff.DiffRow]


def compare_with(baseline: str | os.PathLike[str], path: str | os.PathLike[str], *,
                 ranks: Iterable[int] | None, steps: Iterable[int] | None, graphs: Iterable[int] | None,
                 diag: Diagnostics, where: Where = LOCAL, step_marker: str | None = None) -> Baseline:
    """The baseline (all its ranks and steps) against the report's profile (its selection); both
    with the report's ``step_marker``."""
    base, new = diff.Side(baseline, step_marker=step_marker), diff.Side(path, ranks, steps, step_marker)
    return Baseline(as_text(baseline),
                    diff.diff_report(base, new, by="step", graphs=graphs, diag=diag, where=where),
                    diff.diff_report(base, new, by="type", graphs=graphs, diag=diag, where=where))


def baseline_json(found: Baseline) -> dict[str, Any]:
    """The comparison as the report's JSON carries it: ``diff``'s records (µs)."""
    return {"path": found.path, "steps": [diff.record(row) for row in found.steps],
            "types": [diff.record(row) for row in found.types]}
