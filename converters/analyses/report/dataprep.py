"""The report's data preparation (docs/analysis.md, "Data preparation"): per step the data queue and
the host's CPU use, per pipeline operator its workers, queue and CPU use, from the MindData
counters the reader gives at each step's start (``readers/minddata.py``; MindSpore 1.x only).

It reads the steps' facts (``StepFacts.data``: MindData lane -> value at the step's start) only.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ...model import minddata_figure
from .types import StepFacts

QUEUE = "Data queue"
_OP = re.compile(r"^Op (-?\d+) (.+)$")


@dataclass(frozen=True, slots=True)
class DataStep:
    """One step of one rank: the data queue at its start and the CPU use (user + sys, %) of its
    monitor ticks; None where not recorded."""

    rank: int
    graph: int | None
    step: int | None
    queue_size: float | None
    queue_capacity: float | None
    machine_cpu: float | None
    process_cpu: float | None

    @property
    def queue_empty(self) -> bool | None:
        return None if self.queue_size is None else self.queue_size == 0


@dataclass(frozen=True, slots=True)
class DataOp:
    """One pipeline operator of one rank over the kept steps: its workers and queue capacity, the
    mean of its per-step queue sizes and CPU use (user + sys, %); None where not recorded."""

    rank: int
    op_id: int
    op_type: str
    workers: float | None
    queue_capacity: float | None
    mean_queue_size: float | None
    mean_cpu: float | None

    @property
    def queue_usage(self) -> float | None:
        if self.mean_queue_size is None or not self.queue_capacity:
            return None
        return self.mean_queue_size / self.queue_capacity


def figures(data: dict[str, float]) -> dict[str, dict[str, float]]:
    """subject -> metric -> value, of one step's MindData counters."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for lane, value in data.items():
        found = minddata_figure(lane)
        if found:
            out[found[0]][found[1]] = value
    return out


def queue_at_start(data: dict[str, float]) -> tuple[float, float | None] | None:
    """(size, capacity) of the data queue at the step's start, where recorded."""
    queue = figures(data).get(QUEUE, {})
    return (queue["size"], queue.get("capacity")) if "size" in queue else None


def _busy(metrics: dict[str, float], prefix: str = "") -> float | None:
    parts = [metrics.get(f"{prefix}user %"), metrics.get(f"{prefix}sys %")]
    return None if all(p is None for p in parts) else sum(p for p in parts if p is not None)


def data_steps(facts: list[StepFacts]) -> list[DataStep]:
    """The steps with MindData counters, in the order given."""
    out = []
    for f in facts:
        if not f.data:
            continue
        found = figures(f.data)
        queue = found.get(QUEUE, {})
        out.append(DataStep(f.rank, f.graph, f.step, queue.get("size"), queue.get("capacity"),
                            _busy(found.get("Machine CPU", {})), _busy(found.get("Process CPU", {}))))
    return out


def data_ops(facts: list[StepFacts]) -> list[DataOp]:
    """The pipeline operators of every rank, by rank and operator id."""
    per_op: dict[tuple[int, int, str], list[dict[str, float]]] = defaultdict(list)
    for f in facts:
        for subject, metrics in figures(f.data).items():
            found = _OP.match(subject)
            if found:
                per_op[f.rank, int(found.group(1)), found.group(2)].append(metrics)
    out = []
    for (rank, op_id, op_type), steps in sorted(per_op.items()):
        sizes = [m["queue size"] for m in steps if "queue size" in m]
        cpu = [busy for m in steps if (busy := _busy(m, "CPU ")) is not None]
        out.append(DataOp(rank, op_id, op_type, _last(steps, "workers"), _last(steps, "queue capacity"),
                          sum(sizes) / len(sizes) if sizes else None, sum(cpu) / len(cpu) if cpu else None))
    return out


def _last(steps: list[dict[str, float]], metric: str) -> float | None:
    return next((m[metric] for m in reversed(steps) if metric in m), None)


def data_json(facts: list[StepFacts]) -> dict[str, Any] | None:
    """The report JSON's ``data_preparation``; None where no rank records MindData."""
    steps = data_steps(facts)
    if not steps:
        return None
    return {
        "steps": [{"rank": s.rank, "graph": s.graph, "step": s.step, "queue_size": s.queue_size,
                   "queue_capacity": s.queue_capacity, "queue_empty": s.queue_empty,
                   "machine_cpu_percent": s.machine_cpu, "process_cpu_percent": s.process_cpu}
                  for s in steps],
        "empty_queue_steps": sum(1 for s in steps if s.queue_empty),
        "queue_steps": sum(1 for s in steps if s.queue_empty is not None),
        "operators": [{"rank": o.rank, "op_id": o.op_id, "op_type": o.op_type, "workers": o.workers,
                       "queue_capacity": o.queue_capacity, "mean_queue_size": o.mean_queue_size,
                       "queue_usage": None if o.queue_usage is None else round(o.queue_usage, 4),
                       "mean_cpu_percent": o.mean_cpu} for o in data_ops(facts)],
    }
