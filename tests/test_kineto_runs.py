"""Kineto's ranks and runs as the files say them, whatever the order of their keys and whatever
wrote their header (issue 39): ``distributedInfo`` and ``baseTimeNanoseconds`` after
``traceEvents``, traces without Kineto's header, a harness's own keys first, and two runs of
one worker in one folder. Expected values come from the raw JSON."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import real_data
from test_trace_processor import imported

from converters import convert, discover
from converters.cli import main
from converters.errors import UsageError

BERT = ("h100_bert-small.json.gz", "mi300_bert-small.json.gz")


def _load(path: Path) -> dict:
    with gzip.open(path) as f:
        return json.load(f)


def _write(path: Path, document: dict) -> None:
    """``document`` as JSON in its keys' order, gzipped where the name says."""
    data = json.dumps(document).encode()
    path.write_bytes(gzip.compress(data, 1) if path.name.endswith(".gz") else data)


def _output(capsys, *argv: str) -> list:
    assert main([*argv, "--format", "json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


def _without_paths(value):
    if isinstance(value, dict):
        return {k: _without_paths(v) for k, v in value.items() if k not in ("path", "paths", "Path")}
    if isinstance(value, list):
        return [_without_paths(v) for v in value]
    return value


def test_distributed_info_after_the_events_gives_the_same_ranks_and_figures(tmp_path, capsys):
    """A reordered copy of kineto-2rank: every key but the events after them (valid JSON: key
    order means nothing), and each rank's file under the other's name. Same ranks, same figures."""
    original = real_data("kineto-2rank")
    reordered = tmp_path / "reordered"
    reordered.mkdir()
    names = sorted(p.name for p in original.glob("*.json.gz"))
    ranks = {}
    for name, other in zip(names, names[::-1], strict=True):
        document = _load(original / name)
        ranks[other] = document["distributedInfo"]["rank"]
        moved = {"traceEvents": document.pop("traceEvents"), **document}
        _write(reordered / other, moved)
    assert list(json.loads(gzip.decompress((reordered / names[0]).read_bytes()))) [0] == "traceEvents"

    found = discover(reordered)
    assert {info.path.name: info.rank for info in found} == ranks
    for command in (["overlap"], ["comm"]):
        before = _output(capsys, *command, str(original))
        after = _output(capsys, *command, str(reordered))
        assert _without_paths(after) == _without_paths(before)
    assert main(["info", str(reordered)]) == 0
    assert "without distributedInfo" not in capsys.readouterr().err


def test_the_clock_base_after_the_events_is_read(tmp_path):
    """kineto-rocm-mi300's baseTimeNanoseconds comes after its events: its times are µs since it."""
    path = real_data("kineto-rocm-mi300") / "resnet_act_checkpoint.json.gz"
    document = _load(path)
    first_ts = next(e["ts"] for e in document["traceEvents"] if "ts" in e)
    (info,) = discover(path.parent)
    assert info.clock_offset_ns == document["baseTimeNanoseconds"]
    assert info.start_ns == document["baseTimeNanoseconds"] + round(Decimal(str(first_ts)) * 1000)


def test_a_trace_without_kinetos_header_is_known_by_its_events(tmp_path):
    """A copy of a real trace without schemaVersion, deviceProperties and distributedInfo (older
    exports, as HTA reads them), under a name that is not the handler's: read, and read whole."""
    path = real_data("kineto-rocm-mi300") / "resnet_act_checkpoint.json.gz"
    document = _load(path)
    for key in ("schemaVersion", "deviceProperties", "distributedInfo"):
        document.pop(key)
    copy = tmp_path / "bare" / "resnet.json.gz"
    copy.parent.mkdir()
    _write(copy, document)
    (info,) = discover(copy.parent)
    assert info.path == copy
    assert discover(copy)[0].path == copy
    out = tmp_path / "bare.pftrace"
    convert(copy.parent, out, kind="detail", max_bytes=None)
    problems, (slices, _, _) = imported(out, tmp_path)
    assert problems == []
    kernels = sum(1 for e in document["traceEvents"] if e.get("cat") == "kernel")
    assert slices >= kernels


@pytest.mark.parametrize("name", BERT)
def test_a_harness_header_before_kinetos_keys_reads_alone_with_every_kernel(name, tmp_path, capsys):
    """kineto-h100-mi300-bert: a benchmark harness's ``metadata`` first, Kineto's keys after the
    events. Each file converts alone, and ``ops --by name`` lists each of its kernels with the
    trace's count and time sum."""
    path = real_data("kineto-h100-mi300-bert") / name
    document = _load(path)
    count: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel" and event.get("ph") == "X":
            count[event["name"]] += 1
            total[event["name"]] += Decimal(str(event["dur"]))
    (info,) = discover(path)
    assert info.clock_offset_ns == document["baseTimeNanoseconds"]
    assert info.device_name == document["deviceProperties"][0]["name"]
    rows = {row["Name"]: row for row in _output(capsys, "ops", "--by", "name", str(path))}
    for kernel, n in count.items():
        assert rows[kernel]["Count"] == n, kernel
        assert Decimal(str(rows[kernel]["Total Time(us)"])) == total[kernel], kernel
    out = tmp_path / "bert.pftrace"
    convert(path, out)
    assert imported(out, tmp_path)[0] == []
    info_json = _output(capsys, "info", str(path))
    assert info_json["ranks"][0]["device_name"] == document["deviceProperties"][0]["name"]


def test_the_bert_folder_is_two_runs_named_both(capsys):
    """The two bert traces are one model on two machines, nine days apart (their clock base says
    so once read): two runs, never one 2-rank job; the error names both and the way out."""
    folder = real_data("kineto-h100-mi300-bert")
    assert main(["info", str(folder)]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in BERT) and "pass the folder of one run" in err


def _one_worker(folder: Path, at_ms: int, first_step: int) -> Path:
    """A trace of worker0 as tensorboard_trace_handler names it, without distributedInfo."""
    from fixtures.kineto_gen import write_kineto_traces

    made = write_kineto_traces(folder / f"made{at_ms}", ranks=1, steps=2, first_step=first_step, gzip=True)
    document = _load(made.paths[0])
    document.pop("distributedInfo", None)
    path = folder / f"worker0.{at_ms}.pt.trace.json.gz"
    _write(path, document)
    shutil.rmtree(folder / f"made{at_ms}")
    return path


def test_two_runs_of_one_worker_are_refused_naming_both(tmp_path, capsys):
    """``worker0.<ms>.pt.trace.json.gz`` twice, minutes apart, no step in common: two runs of one
    process, not a 2-rank job; an error names both files and the way out, and each reads alone."""
    first = _one_worker(tmp_path, 1_700_000_000_000, 1)
    second = _one_worker(tmp_path, 1_700_000_477_000, 10)
    with pytest.raises(UsageError) as raised:
        discover(tmp_path)
    assert first.name in str(raised.value) and second.name in str(raised.value)
    assert "pass one of the files" in str(raised.value)
    assert main(["overlap", str(tmp_path)]) == 2
    assert first.name in capsys.readouterr().err
    assert [info.rank for info in discover(first)] == [0]


def test_other_profilers_json_with_kinetos_categories_is_not_taken_for_kineto(tmp_path):
    """torch_npu's trace_view.json holds cpu_op and python_function events too (in an array), and
    Paddle writes an object with a schemaVersion of its own (text): under any name, neither is
    recognised as Kineto's by its events."""
    from converters.readers import kineto

    npu = real_data("ascend-pt-2rank") / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    paddle = next(real_data("paddle-cpu-chrome").glob("*.paddle_trace.json"))
    for source, name in ((npu, "trace.json"), (paddle, "trace.json"), (paddle, "trace.pt.json")):
        (tmp_path / name).write_bytes(source.read_bytes())
        assert kineto.lone_file(tmp_path / name, None) is None, (source, name)
        (tmp_path / name).unlink()
