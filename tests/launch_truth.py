"""The truth of a Kineto trace's device work by launch, read here from the raw file (never by the
converter): each kernel joined to its launch by the ``correlation`` id, filed under the step
whose ``ProfilerStep#N`` host window holds the launch (the latest-starting one, where windows
overlap), and a collective where its launch lies in a ``record_param_comms`` / ``nccl:*`` /
``c10d::*`` op on the launch's thread or its name starts with ``nccl`` or is torch SymmetricMemory's
all-reduce (``...::multimem_all_reduce_kernel<...>``, launched by no communication op: an all-reduce
by its name alone)."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

_OLD = {"Kernel": "kernel", "Runtime": "cuda_runtime", "Operator": "cpu_op", "Memcpy": "gpu_memcpy",
        "Memset": "gpu_memset"}
_COMM_OPS = ("record_param_comms", "nccl:", "c10d::")
_SYMM_ALL_REDUCE = "::multimem_all_reduce_kernel<"


@dataclass
class Kernel:
    name: str
    start_ns: int
    end_ns: int
    step: int | None  # the ProfilerStep#N that launched it; None: no step did, or no launch is recorded
    collective: str | None  # the innermost record_param_comms' "Collective name" around its launch
    # ("allreduce" for a SymmetricMemory all-reduce kernel)
    comm: bool  # a collective's kernel: launched in a communication op, or named nccl*
    cat: str = "kernel"  # or gpu_memcpy, gpu_memset


@dataclass
class Truth:
    steps: dict[int, tuple[int, int]]  # N -> host window (ns)
    kernels: list[Kernel] = field(default_factory=list)

    def computing_ns(self) -> dict[int, int]:
        """Per step, the union of the compute kernels it launched."""
        by_step: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for k in self.kernels:
            if k.step is not None and not k.comm and k.cat == "kernel":
                by_step[k.step].append((k.start_ns, k.end_ns))
        return {n: _union_ns(by_step.get(n, [])) for n in self.steps}

    def computing_all_ns(self) -> int:
        """The union of every compute kernel, launched in a step or not (a trace without steps)."""
        return _union_ns([(k.start_ns, k.end_ns) for k in self.kernels if not k.comm and k.cat == "kernel"])


def _union_ns(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _ns(value) -> int:
    return int(Decimal(str(value)) * 1000)


def read(path: Path) -> Truth:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    cat = lambda e: _OLD.get(e.get("cat"), e.get("cat"))  # noqa: E731
    complete = [e for e in events if e.get("ph") == "X" and "ts" in e]
    steps = {int(e["name"][13:]): (_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0))) for e in complete
             if str(e.get("name", "")).startswith("ProfilerStep#")
             and cat(e) in ("user_annotation", "cpu_op")}
    launches = {e["args"]["correlation"]: e for e in complete
                if cat(e) in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    ops = defaultdict(list)
    for e in complete:
        if cat(e) in ("cpu_op", "user_annotation") and str(e.get("name", "")).startswith(_COMM_OPS):
            ops[e.get("tid")].append(e)
    order = sorted(steps.items(), key=lambda item: item[1][0])
    truth = Truth(steps)
    for e in complete:
        if cat(e) not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        launch = launches.get((e.get("args") or {}).get("correlation"))
        step = around = None
        if launch is not None:
            at = _ns(launch["ts"])
            step = next((n for n, (a, b) in reversed(order) if a <= at < b), None)
            around = sorted((op for op in ops[launch.get("tid")]
                             if _ns(op["ts"]) <= at < _ns(op["ts"]) + _ns(op.get("dur", 0))),
                            key=lambda op: -_ns(op["ts"]))
        named = next((op["args"]["Collective name"] for op in around or ()
                      if op["name"] == "record_param_comms" and "Collective name" in (op.get("args") or {})),
                     None)
        symm = cat(e) == "kernel" and _SYMM_ALL_REDUCE in e["name"]
        if symm:
            named = "allreduce"
        comm = cat(e) == "kernel" and (bool(around) or e["name"].startswith("nccl") or symm)
        start = _ns(e["ts"])
        truth.kernels.append(Kernel(e["name"], start, start + _ns(e.get("dur", 0)), step,
                                    named if cat(e) == "kernel" else None, comm, cat(e)))
    return truth
