"""``bench/real_traces.py`` (make bench's Chrome-trace profiles at a real job's shape): a real
sample tiled k times reads, in our reader and in Perfetto's trace processor, as k copies of the
sample: k times each operator's count and time, k times the steps (numbered on), k times each
event of the file, the header and process names once."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from conftest import real_data

from bench import real_traces
from converters.cli import main

COPIES = 2
STEP = re.compile(r"Profiler?Step#\d+")


def _case(fmt: str, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the sample's own folder, the tiled one, the tiled trace file) of one format, tiled
    ``COPIES`` times."""
    name, write = {"kineto": (real_traces.KINETO, real_traces.write_kineto),
                   "kineto_serving": (real_traces.KINETO_SERVING, real_traces.write_kineto_serving),
                   "torch_npu": (real_traces.TORCH_NPU, real_traces.write_torch_npu),
                   "paddle": (real_traces.PADDLE, real_traces.write_paddle)}[fmt]
    real = real_data(name).parent  # the quick tier: Kineto's ResNet-50 is not among its samples
    sample = real / name / ("rank0_ascend_pt" if fmt == "torch_npu" else "")
    one = tmp_path / "one"
    assert write(one, real, 0) == 1  # one copy: sized to the sample
    size = sum(p.stat().st_size for p in one.rglob("*") if p.name.endswith((".json", ".json.gz")))
    tiled = tmp_path / "tiled"
    assert write(tiled, real, int(size * (COPIES - 0.5))) == COPIES
    (trace,) = [p for p in tiled.rglob("*.json") if not p.name.startswith("profiler_")]
    return sample, tiled, trace


def _json(argv: list[str], capsys) -> object:
    assert main([*argv, "--format", "json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


def _events(path: Path) -> Counter:
    """Each event of the file by its phase, category and name (a step's number left out, and the
    flow id torch_npu writes in an arrow's name: "HostToDevice936"), counted."""
    _, events = real_traces.load_sample(path)
    return Counter((e.get("ph"), e.get("cat"), _name(e)) for e in events)


def _name(event: dict) -> str:
    name = STEP.sub("Step#", str(event.get("name")))
    return name.rstrip("0123456789") if event.get("ph") in ("s", "t", "f") else name


@pytest.mark.parametrize("fmt", ["kineto", "kineto_serving", "torch_npu", "paddle"])
def test_a_tiled_real_trace_reads_as_that_many_copies_of_its_sample(fmt, tmp_path, capsys):
    sample, tiled, trace = _case(fmt, tmp_path)
    ops = {which: _json(["ops", str(root), "--by", "name"], capsys)
           for which, root in (("one", sample), ("k", tiled))}
    once = {row["Name"]: row for row in ops["one"]}
    assert len(once) > 10
    assert {row["Name"]: row["Count"] for row in ops["k"]} == {
        name: COPIES * row["Count"] for name, row in once.items()}
    for row in ops["k"]:
        assert row["Total Time(us)"] == pytest.approx(COPIES * once[row["Name"]]["Total Time(us)"], abs=0.01)
    (first,), (tiled_rank,) = (_json(["info", str(root)], capsys)["ranks"] for root in (sample, tiled))
    steps = [s["step"] for s in first["steps"]]
    if fmt == "kineto_serving":  # a capture no step bounds, tiled: still none
        assert not steps and not tiled_rank["steps"]
    else:
        assert steps and [s["step"] for s in tiled_rank["steps"]] == list(
            range(steps[0], steps[0] + COPIES * len(steps)))
    source = next(p for p in sample.rglob("*") if p.name.endswith((
        "trace_view.json", ".pt.trace.json.gz", "eager_trace.json.gz", ".paddle_trace.json")))
    events = _events(source)
    metadata = Counter({key: n for key, n in events.items() if key[0] == "M" or key == (None, None, "None")})
    assert _events(trace) == Counter({key: n * (1 if key in metadata else COPIES)
                                      for key, n in events.items()})
    header, _ = real_traces.load_sample(trace)
    assert header == real_traces.load_sample(source)[0]


def test_the_trace_processor_loads_a_tiled_trace_as_that_many_copies(tmp_path):
    """k times the slices, arrows (a copy's flow ids its own) and counter values, and no error but
    the sample's own: slices of one thread overlapping (moved to an overflow track, nothing lost;
    where a copy's first ones meet the last one's open slices, a few more)."""
    from test_trace_processor import trace_processor

    sample, _, trace = _case("torch_npu", tmp_path)
    query = tmp_path / "q.sql"
    query.write_text("select count(*) from slice union all select count(*) from flow union all "
                     "select count(*) from counter union all select coalesce(sum(value), 0) from stats "
                     "where severity in ('error', 'data_loss') "
                     "and name != 'slice_spill_overlapping_complete_event';\n")

    def counts(path: Path) -> list[int]:
        done = subprocess.run([str(trace_processor()), "-q", str(query), str(path)], capture_output=True,
                              text=True, check=True)
        return [int(line) for line in done.stdout.split()[1:]]

    slices, flows, counters, problems = counts(sample / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    assert slices > 3000 and flows > 500 and counters > 3000
    assert counts(trace) == [COPIES * slices, COPIES * flows, COPIES * counters, problems]
