"""Real PyTorch traces as a user meets them beyond the training GPU: the operators of a CPU run
(``kineto-gloo-2rank``), the allocations of ``profile_memory=True`` (``kineto-1.8-resnet50``) and
serving traces without ``ProfilerStep#N`` (``kineto-b200-vllm``, ``--step-marker``). Expected
figures are computed here from the raw JSON (exact decimals), never by the code under test.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import jsonschema
from conftest import real_data

from converters.cli import main

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "ops.schema.json").read_text())


def _trace(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


def _traces(name: str) -> list[Path]:
    return sorted(p for p in real_data(name).iterdir() if p.name.endswith((".json", ".json.gz")))


def _ns(us: Decimal | int) -> int:
    return int(Decimal(us) * 1000)


def _self_ns(events: list[dict]) -> dict[int, int]:
    """Each CPU op's self time, as ``key_averages()`` counts it: its time less that of the CPU ops
    directly inside it on its thread (by the events' index)."""
    by_thread: dict[object, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        by_thread[e["pid"], e["tid"]].append(i)
    own = {}
    for indices in by_thread.values():
        indices.sort(key=lambda i: (_ns(events[i]["ts"]), -_ns(events[i]["dur"])))
        stack: list[int] = []
        for i in indices:
            start, end = _ns(events[i]["ts"]), _ns(events[i]["ts"]) + _ns(events[i]["dur"])
            while stack and _ns(events[stack[-1]]["ts"]) + _ns(events[stack[-1]]["dur"]) <= start:
                stack.pop()
            own[i] = end - start
            if stack:
                own[stack[-1]] -= end - start
            stack.append(i)
    return own


def test_a_cpu_run_lists_every_aten_op_with_its_count_total_and_self_time(capsys):
    expected: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for path in _traces("kineto-gloo-2rank"):
        data = _trace(path)
        rank = data["distributedInfo"]["rank"]
        ops = [e for e in data["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
        own = _self_ns(ops)
        for i, e in enumerate(ops):
            if e["name"].startswith("aten::"):
                figures = expected[rank, e["name"]]
                figures[0] += 1
                figures[1] += _ns(e["dur"])
                figures[2] += own[i]
    assert len(expected) > 40 and sum(f[0] for f in expected.values()) > 700
    assert main(["ops", str(real_data("kineto-gloo-2rank")), "--by", "name", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    found = {(r["Rank"], r["Name"]): [r["Count"], round(Decimal(str(r["Total Time(us)"])) * 1000),
                                      round(Decimal(str(r["Self Time(us)"])) * 1000)]
             for r in rows if r["Name"].startswith("aten::")}
    assert found == dict(expected)
    assert {r["Core Type"] for r in rows} == {"CPU"}
    jsonschema.validate(rows, SCHEMA)
