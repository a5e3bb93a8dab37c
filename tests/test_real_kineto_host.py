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
import pytest
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


# -- memory: allocations paired with their releases ------------------------------------------------

def _pairs_by_time(events: list[dict]) -> tuple[Counter, Counter]:
    """Each allocation of the ``[memory]`` events with its release, paired by device and address
    in time order, a release before an allocation at the same µs: (device, address, allocated at,
    released at or None) counted, and the releases that paired with none."""
    def device(args: dict) -> tuple:
        return args.get("Device Type"), args.get("Device Id")

    order = sorted((e for e in events if e.get("name") == "[memory]" and "Addr" in e["args"]),
                   key=lambda e: (Decimal(e["ts"]), e["args"]["Bytes"] > 0))
    live: dict[tuple, Decimal] = {}
    pairs: Counter = Counter()
    orphans: Counter = Counter()
    for e in order:
        key = (*device(e["args"]), e["args"]["Addr"])
        if e["args"]["Bytes"] > 0:
            assert key not in live, "an address allocated twice with no release between"
            live[key] = Decimal(e["ts"])
        elif key in live:
            pairs[(*key, live.pop(key), Decimal(e["ts"]))] += 1
        else:
            orphans[key] += 1
    for key, at in live.items():
        pairs[(*key, at, None)] += 1
    return pairs, orphans


def _reader_pairs(path: Path) -> Counter:
    from converters import Diagnostics
    from converters.model import Layer, Slice
    from converters.readers import kineto
    from converters.readers.common import jsonfile

    info = kineto.rank_info(path, jsonfile.first_bytes(path, 1 << 16))
    diag = Diagnostics()
    found: Counter = Counter()
    for r in kineto.memory(info, diag):
        if type(r) is Slice and r.layer is Layer.MEMORY:
            released = None if r.args.get("Released") is False else Decimal(r.start_ns + r.dur_ns) / 1000
            found[r.lane, int(r.name, 16), Decimal(r.start_ns) / 1000, released] += 1
    assert not diag.messages(), diag.messages()
    return found


def _as_lanes(pairs: Counter, base_us: Decimal = Decimal(0)) -> Counter:
    """The pairs as the reader's lanes, at epoch µs (``ts`` counts from ``baseTimeNanoseconds``)."""
    names = {0: "CPU", 1: "GPU", 6: "GPU"}
    lane = lambda kind, index: (names[kind] if kind == 0 else f"{names[kind]} {index}") + " allocations"  # noqa: E731
    return Counter({(lane(k, i), addr, at + base_us, None if gone is None else gone + base_us): n
                    for (k, i, addr, at, gone), n in pairs.items()})


def test_every_allocation_of_a_real_trace_is_paired_once_with_the_release_of_its_address():
    for path in _traces("kineto-h100-mi300-bert"):
        data = _trace(path)
        pairs, _ = _pairs_by_time(data["traceEvents"])
        assert sum(pairs.values()) == sum(1 for e in data["traceEvents"]
                                          if e.get("name") == "[memory]" and e["args"].get("Bytes", 0) > 0)
        base_us = Decimal(data.get("baseTimeNanoseconds", 0)) / 1000  # the file's, after the events
        assert _reader_pairs(path) == _as_lanes(pairs, base_us)


def _adversarial_trace(path: Path, seed: int) -> list[dict]:
    """A Kineto GPU trace whose caching allocator hands a block it just freed straight back, at the
    same µs, for thousands of steps: the events of each instant written in a random order."""
    import random

    rng = random.Random(seed)
    events: list[dict] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
                           "ts": 0, "dur": 200_000}]
    held: list[int] = []
    total = 0
    for ts in range(10, 190_000, 7):
        instant = []
        for addr in rng.sample(held, k=min(len(held), rng.randint(0, 3))):
            held.remove(addr)
            instant.append((addr, -4096))
        for _ in range(rng.randint(0, 3)):
            freed = [a for a, _ in instant if a not in held]
            addr = rng.choice(freed or [0x7F00_0000 + rng.randrange(64) * 4096])
            if addr not in held:
                held.append(addr)
                instant.append((addr, 4096))
        rng.shuffle(instant)
        for addr, size in instant:
            total += size
            events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1,
                           "tid": 1, "ts": ts, "args": {"Device Type": 1, "Device Id": 0, "Addr": addr,
                                                        "Bytes": size, "Total Allocated": total,
                                                        "Total Reserved": 1 << 30}})
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}],
                                "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": events}))
    return events


def test_a_block_freed_and_allocated_again_at_one_instant_pairs_release_first(tmp_path, capsys):
    path = tmp_path / "worker0.1.pt.trace.json"
    events = _adversarial_trace(path, seed=3)
    pairs, orphans = _pairs_by_time(events)
    assert not orphans and sum(pairs.values()) > 10_000
    assert main(["memory", "--allocations", str(path), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    base = Decimal(1_700_000_000_000_000)  # µs
    found = Counter((int(r["Name"], 16), Decimal(r["Allocation Time(us)"]) - base,
                     None if r["Release Time(us)"] is None else Decimal(r["Release Time(us)"]) - base)
                    for r in rows)
    assert found == Counter({(addr, at, gone): n for (_, _, addr, at, gone), n in pairs.items()})


# -- --step-marker: the user's own annotation as the step --------------------------------------------

def _marker_steps(folder: Path, marker: str) -> dict[int, list[tuple[int, int]]]:
    """Per rank, the (start, end) in ns of each read step with ``marker``, in the order read."""
    from converters import Diagnostics, Options, discover, read_profile

    found: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for batch in read_profile(discover(folder), Options(step_marker=marker), Diagnostics()):
        assert batch.step is not None and batch.step_id == len(found[batch.rank]) + 1
        found[batch.rank].append((batch.step.start_ns, batch.step.end_ns))
    return dict(found)


def _marked_ranges(path: Path, is_marker) -> tuple[int, list[tuple[int, int]]]:
    """A trace's rank and the (start, end) in ns of its host ranges ``is_marker`` takes, in time order."""
    data = _trace(path)
    base = int(data.get("baseTimeNanoseconds", 0))
    ranges = sorted((base + _ns(e["ts"]), base + _ns(e["ts"]) + _ns(e["dur"])) for e in data["traceEvents"]
                    if e.get("ph") == "X" and is_marker(e) and e.get("cat") != "gpu_user_annotation")
    return data.get("distributedInfo", {}).get("rank", 0), ranges


def test_a_record_function_range_is_the_step_numbered_in_time_order():
    folder = real_data("kineto-gloo-2rank")
    expected = dict(_marked_ranges(path, lambda e: e["name"] == "explicit_allreduce_loss")
                    for path in _traces("kineto-gloo-2rank"))
    assert [len(r) for r in expected.values()] == [3, 3]
    assert _marker_steps(folder, "explicit_allreduce_loss") == expected


def test_a_serving_trace_takes_its_execute_model_python_function_as_the_step(capsys):
    path = _traces("kineto-b200-vllm")[0]
    _, expected = _marked_ranges(path, lambda e: e["name"].endswith("): execute_model"))
    assert len(expected) == 1
    assert _marker_steps(real_data("kineto-b200-vllm"), "execute_model") == {0: expected}
    assert main(["overlap", str(real_data("kineto-b200-vllm")), "--step-marker", "execute_model",
                 "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["Rank"], r["Step"]) for r in rows] == [(0, 1)]


def test_steps_are_numbered_in_time_order_whatever_the_order_of_the_file(tmp_path):
    for path in _traces("kineto-gloo-2rank"):
        data = _trace(path)
        data["traceEvents"].reverse()
        (tmp_path / path.name).write_text(json.dumps(data, default=str))
    assert _marker_steps(tmp_path, "explicit_allreduce_loss") == _marker_steps(
        real_data("kineto-gloo-2rank"), "explicit_allreduce_loss")


def test_with_a_marker_every_event_is_still_drawn_and_the_profilers_steps_are_host_ranges():
    from converters import Diagnostics, Kind, Layer, Options, discover, read_profile

    def drawn(marker: str | None) -> Counter:
        options = Options(kind=Kind.DETAIL, step_marker=marker)
        return Counter((s.rank, s.lane, s.name, s.start_ns, s.dur_ns) for batch in read_profile(
            discover(real_data("kineto-gloo-2rank")), options, Diagnostics())
            for s in batch.slices if s.layer is not Layer.STEP)

    plain, marked = drawn(None), drawn("explicit_allreduce_loss")
    extra = marked - plain
    assert not plain - marked and {name for _, _, name, _, _ in extra} == {"ProfilerStep#2", "ProfilerStep#3",
                                                                           "ProfilerStep#4"}
    assert sum(extra.values()) == 6


def test_a_marker_no_rank_holds_is_an_error_naming_it_and_what_the_trace_holds(capsys):
    assert main(["ops", str(real_data("kineto-gloo-2rank")), "--step-marker", "explicit_allreduce"]) == 2
    err = capsys.readouterr().err
    assert "'explicit_allreduce'" in err and "'explicit_allreduce_loss' (3)" in err and "Traceback" not in err


def test_a_marker_on_a_format_with_steps_of_its_own_only_is_a_usage_error(capsys):
    assert main(["overlap", str(real_data("msprof-2rank")), "--step-marker", "x"]) == 2
    assert "--step-marker" in capsys.readouterr().err


def test_nested_or_overlapping_marker_ranges_are_one_step():
    from converters.readers.common.markers import numbered

    assert numbered([(50, 10), (0, 40), (10, 5), (30, 20), (100, 0)]) == [(0, 40), (50, 10), (100, 0)]


def test_a_trace_converted_with_a_marker_loads_clean_in_the_trace_processor(tmp_path, out_dir):
    from test_trace_processor import imported

    out = out_dir / "vllm.pftrace"
    assert main(["convert", str(real_data("kineto-b200-vllm")), "--kind", "detail", "--step-marker",
                 "execute_model", "-o", str(out), "-q"]) == 0
    problems, (slices, _, _) = imported(out, tmp_path)
    assert problems == [] and slices > 20_000


@pytest.mark.parametrize("command", ["info", "overlap", "ops", "comm", "critical"])
def test_every_command_takes_the_step_marker(command, capsys):
    folder = str(real_data("kineto-gloo-2rank"))
    assert main([command, folder, "--step-marker", "explicit_allreduce_loss", "--format", "json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)


def test_pipeline_takes_the_step_marker(capsys):
    """The ``ProfilerStep#N`` ranges named as the marker are the same steps, numbered 1, 2, ...: the
    same stages, schedules and bubbles, step by step."""
    folder = str(real_data("pp-gpipe-2stage-dev"))
    rows = {}
    for marker in ([], ["--step-marker", "ProfilerStep*"]):
        assert main(["pipeline", folder, "--format", "json", "-q", *marker]) == 0
        rows[bool(marker)] = json.loads(capsys.readouterr().out)
    assert rows[False] and len(rows[False]) == len(rows[True])
    steps = sorted({row["Step"] for row in rows[False]})
    for plain, marked in zip(rows[False], rows[True], strict=True):
        assert marked["Step"] == steps.index(plain["Step"]) + 1
        assert {**marked, "Step": None} == {**plain, "Step": None}


def test_memory_says_the_step_marker_does_not_apply(capsys):
    assert main(["memory", str(real_data("kineto-gloo-2rank")), "--step-marker", "x"]) == 2
    assert "--step-marker" in capsys.readouterr().err
