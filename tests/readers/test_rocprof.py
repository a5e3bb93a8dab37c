"""The rocprofv3 JSON reader (``readers/rocprof.py``): on the real sample (rocprof-908, counted from
its JSON here, never by the reader), and on small files written here for what the sample lacks
(HIP API calls and their arrows, memory copies, rocTX steps) and for damage (a missing kernel
symbol, a cut file, garbage)."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import orjson
import pytest
from conftest import real_data
from test_trace_processor import imported
from trace_check import read_perfetto

from converters import convert, discover
from converters.analyses.comm import comm_report
from converters.analyses.info import info_report
from converters.analyses.ops import ops_report
from converters.analyses.overlap import overlap_report
from converters.cli import main
from converters.errors import Diagnostics, InputError
from converters.model import GPU_KERNEL, Layer
from converters.profile import Kind, Options, read_profile
from fixtures.rocprof_gen import write_rocprof

SAMPLE = "rocprof-908/908_results.json.gz"


def _real(tmp_path: Path) -> Path:
    source = real_data("rocprof-908") / "908_results.json.gz"
    (tmp_path / "in").mkdir()
    return Path(shutil.copy(source, tmp_path / "in"))


def _expected(path: Path) -> tuple[Counter, Counter]:
    """Dispatches and their time by kernel name, as the JSON's own kernel_symbols name them."""
    tool = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    [tool] = tool["rocprofiler-sdk-tool"]
    names = {k["kernel_id"]: k["formatted_kernel_name"] for k in tool["kernel_symbols"]}
    counts, times = Counter(), Counter()
    for r in tool["buffer_records"]["kernel_dispatch"]:
        name = names[r["dispatch_info"]["kernel_id"]]
        counts[name] += 1
        times[name] += r["end_timestamp"] - r["start_timestamp"]
    for r in tool["buffer_records"]["memory_copy"]:
        name = tool["strings"]["buffer_records"][r["kind"]]["operations"][r["operation"]]
        counts[name] += 1
        times[name] += r["end_timestamp"] - r["start_timestamp"]
    return counts, times


def test_real_every_dispatch_lands_once_and_ops_by_name_counts_them(tmp_path):
    path = _real(tmp_path)
    counts, times = _expected(path)
    assert sum(counts.values()) == 43_915  # SOURCE.md's figure
    [info] = discover(path.parent)
    assert (info.format, info.wall_clock, info.host) == ("rocprof", False, "smci350-zts-gtu-c6-25")
    out = tmp_path / "out.pftrace"
    result = convert(path, out, kind="detail", max_bytes=None)
    trace = read_perfetto(out.read_bytes())
    drawn = Counter(s.name for s in trace.slices if s.track[0] != "Overlap Analysis")
    assert drawn == counts, "every kernel dispatch once in the detail trace"
    problems, _ = imported(out, tmp_path)
    assert problems == [], problems
    assert not [w for w in result.warnings if "rocprof" in w or "left out" in w]
    # ops counts the kernels that compute; RCCL's are communication (comm counts them)
    computing = {name for name in counts if not name.startswith("ncclDevKernel_")}
    rows = ops_report(path, by="name")
    assert {r.name: r.count for r in rows} == {name: counts[name] for name in computing}
    assert {r.name: r.total_ns for r in rows} == {name: times[name] for name in computing}
    assert len(comm_report(path).ops) == sum(n for name, n in counts.items() if name not in computing) == 1310


def test_real_rccl_is_a_collective_and_overlap_computes(tmp_path):
    path = _real(tmp_path)
    [step] = overlap_report(path)
    assert step.computing_ns and step.computing_ns > 0
    # the generic RCCL kernel: 1,310 dispatches, 4,158,756,678 ns (SOURCE.md), communication of no known kind
    assert step.communication_ns == 4_158_756_678
    parts = list(read_profile(discover(path.parent), Options(kind=Kind.SUMMARY), Diagnostics()))
    assert [p.part[0] for p in parts] == list(range(len(parts)))  # one pseudo step, in parts
    slices = [s for p in parts for s in p.slices]
    comm = [s for s in slices if s.layer is Layer.COMM_OP]
    assert len(comm) == 1310 and {s.task_type for s in comm} == {"collective"}
    assert sum(s.dur_ns for s in comm) == 4_158_756_678
    assert {s.task_type for s in slices if s.layer is Layer.STREAM} == {GPU_KERNEL}
    [rank] = info_report(path).ranks
    assert sum(rank.records.values()) == 43_915 and rank.format == "rocprof"


# -- small files ----------------------------------------------------------------------------------

def _file(folder: Path, steps: int = 3, missing_symbol: bool = False) -> tuple[Path, dict]:
    [made] = write_rocprof(folder, steps=steps, missing_symbol=missing_symbol).files
    return made.path, made.tool


def test_launches_copies_markers_and_steps(tmp_path):
    path, tool = _file(tmp_path / "in", steps=3)
    counts, _ = _expected(path)
    out = tmp_path / "out.pftrace"
    result = convert(path.parent, out, kind="detail", step_marker="step", max_bytes=None)
    trace = read_perfetto(out.read_bytes())
    shown = ("Overlap Analysis", "Step Trace", "Host")
    device = Counter(s.name for s in trace.slices if s.track[0] not in shown)
    assert device == counts
    assert trace.flows == 6, "each launch joined to its kernel by correlation id"
    host = Counter(s.name for s in trace.slices if s.track[0] == "Host")
    assert host == {"hipLaunchKernel": 6, "step": 3}
    problems, _ = imported(out, tmp_path)
    assert problems == []
    assert any("1 scratch_memory" in w for w in result.warnings), "records not drawn are counted"
    rows = overlap_report(path.parent, step_marker="step")
    assert [r.step for r in rows] == [1, 2, 3]
    assert all(r.computing_ns == 100_000 for r in rows), "a copy is no computation"
    assert all(r.communication_ns == 100_000 for r in rows)


@pytest.mark.parametrize("rccl", ["hip", "alone"])
@pytest.mark.parametrize("kind", [Kind.SUMMARY, Kind.DETAIL])
def test_rccl_kernels_are_typed_by_the_rccl_call_that_launched_them(tmp_path, rccl, kind):
    """``ncclDevKernel_Generic`` says no collective; the RCCL call whose launch dispatched it does
    (``ncclAllReduce``; a group's ``ncclSend`` + ``ncclRecv``, launched by ``ncclGroupEnd``: a
    sendrecv), joined by correlation id: the call's own (HIP not traced), or its ``hipLaunchKernel``'s
    inside it on the same thread. The generator writes each step's collective; records shuffled."""
    [made] = write_rocprof(tmp_path / "in", steps=4, rccl=rccl, shuffle=True, seed=3).files
    assert made.collectives == ["allreduce", "sendrecv", "allgather", "reducescatter"]
    options = Options(kind=kind, step_marker="step")
    steps = list(read_profile(discover(made.path.parent), options, Diagnostics()))
    ops = [[s for s in b.slices if s.layer is Layer.COMM_OP] for b in steps if b.step is not None]
    found = [[s.task_type for s in mine] for mine in ops]
    assert found == [[kind_] for kind_ in made.collectives]
    if kind is Kind.DETAIL:
        calls = [orjson.loads(s.args)["rccl call"] for mine in ops for s in mine]
        assert calls == ["ncclAllReduce", "ncclGroupEnd: ncclRecv+ncclSend", "ncclAllGather",
                         "ncclReduceScatter"]
        host = Counter(s.name for b in steps for s in b.slices if s.layer is Layer.HOST)
        assert host["ncclGroupStart"] == host["ncclSend"] == host["ncclAllReduce"] == 1, "the calls drawn"


def test_an_rccl_kernel_whose_call_is_not_in_the_file_stays_untyped(tmp_path):
    """Without its launching call (no --rccl-trace: the real sample) the generic kernel stays a
    collective of no known kind, never a guess."""
    [made] = write_rocprof(tmp_path / "in", steps=2).files
    [batch] = read_profile(discover(made.path.parent), Options(kind=Kind.DETAIL), Diagnostics())
    assert {s.task_type for s in batch.slices if s.layer is Layer.COMM_OP} == {"collective"}


def test_a_missing_kernel_symbol_is_said_with_the_file(tmp_path):
    path, _ = _file(tmp_path / "in", missing_symbol=True)
    diag = Diagnostics()
    [batch] = read_profile(discover(path.parent), Options(kind=Kind.DETAIL), diag)
    assert "kernel 3" in {s.name for s in batch.slices}
    message = diag.examples["missing_kernel_symbol"]
    assert str(path) in message and "kernel ids 3" in message and "1 dispatches" in message


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_a_cut_file_gives_its_records_up_to_the_cut_with_a_warning(tmp_path, fraction):
    path, tool = _file(tmp_path / "in", steps=20)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    diag = Diagnostics()
    batches = list(read_profile(discover(path.parent), Options(kind=Kind.DETAIL), diag))
    drawn = [s.start_ns for b in batches for s in b.slices if s.layer in (Layer.STREAM, Layer.COMM_OP)
             and s.lane != "GPU 0 Copies"]
    written = [r["start_timestamp"] for r in tool["buffer_records"]["kernel_dispatch"]]
    assert sorted(drawn) == written[: len(drawn)], "the whole records before the cut, each once"
    message = diag.examples["truncated_file"]
    assert str(path) in message and "cut off at byte" in message


@pytest.mark.parametrize("damage", [(b'"kernel_dispatch": [', b'"kernel_dispatch": [}'),
                                    (b'"gemm()"', b'"gemm\x00{]]()"'), (b'"hip_api": [', b'"hip_api": [{1,'),
                                    (b'"hostname": "box"', b'"hostname": "b\\ud800ox"'),
                                    (b'"handle": 101', b'"handle": "NaN"'),
                                    (b'"kernel_id": 1\n', b'"kernel_id": [1]\n'),
                                    (b'"operations": [', b'"operations": {"1": 2}, "x": [')])
def test_garbage_is_an_error_naming_the_file_or_a_counted_warning_never_a_traceback(tmp_path, capsys, damage):
    path, _ = _file(tmp_path / "in")
    data = path.read_bytes().replace(b'"kernel_dispatch": [\n', b'"kernel_dispatch": [')
    data = data.replace(b'"hip_api": [\n', b'"hip_api": [')
    assert damage[0] in data
    path.write_bytes(data.replace(damage[0], damage[1], 1))
    code = main(["ops", "--by", "name", str(path.parent)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err and str(path) in err, err
    assert code != 0 or "warning" in err


def test_cli_commands_on_a_small_file(tmp_path, capsys):
    path, _ = _file(tmp_path / "in")
    for command in (["info"], ["overlap"], ["ops", "--by", "name"], ["comm"], ["critical"]):
        assert main([*command, str(path)]) == 0, (command, capsys.readouterr().err[-500:])
        assert "gemm()" in capsys.readouterr().out or command[0] in ("info", "overlap", "comm")


def test_a_string_that_never_ends_is_an_error_in_bounded_memory(tmp_path, monkeypatch):
    from converters.readers import rocprof

    monkeypatch.setattr(rocprof, "MAX_RECORD_BYTES", 1 << 16)
    path, _ = _file(tmp_path / "in")
    data = path.read_bytes()
    at = data.index(b'"kernel_dispatch": [') + 20
    path.write_bytes(data[:at] + b'{"x": "' + b"x" * (3 << 20) + data[at:].replace(b'"', b""))  # never closed
    with pytest.raises(InputError, match="never writes") as e:
        list(read_profile(discover(path.parent), Options(kind=Kind.DETAIL), Diagnostics()))
    assert e.value.path == path


def test_nesting_no_profiler_writes_is_an_error_not_a_memory_blowup(tmp_path):
    path, _ = _file(tmp_path / "in")
    data = path.read_bytes()
    at = data.index(b'"kernel_dispatch": [') + 20
    path.write_bytes(data[:at] + b'{"a": ' * 100_000 + data[at:])
    with pytest.raises(InputError, match="nested deeper") as e:
        list(read_profile(discover(path.parent), Options(kind=Kind.DETAIL), Diagnostics()))
    assert e.value.path == path


class _CountingTokens:
    """The reader's tokenizer, counting the tokens it visits (by ``search`` or ``finditer``)."""

    def __init__(self, pattern) -> None:
        self.pattern, self.tokens = pattern, 0

    def search(self, *args):
        self.tokens += 1
        return self.pattern.search(*args)

    def finditer(self, *args):
        for m in self.pattern.finditer(*args):
            self.tokens += 1
            yield m


def test_the_records_of_an_array_are_decoded_in_runs_not_tokenized_one_by_one(tmp_path, monkeypatch):
    """What makes reading 9x faster (docs/benchmarks-journal.md, "rocprofv3 reading"): the Python
    tokenizer walks the structure between the arrays, not each record (a dozen tokens or more)."""
    from converters.readers import rocprof

    [made] = write_rocprof(tmp_path / "in", steps=2000, shuffle=True, rccl="hip").files
    records = sum(len(v) for v in made.tool["buffer_records"].values())
    counting = _CountingTokens(rocprof._TOKEN)
    monkeypatch.setattr(rocprof, "_TOKEN", counting)
    read = sum(len(items) for name, items in rocprof._sections(made.path, Diagnostics()) if name)
    assert read == records + len(made.tool["agents"]) + len(made.tool["kernel_symbols"]) + 34 + 2000
    assert counting.tokens < records / 20, (counting.tokens, records)


def _damaged(text: bytes, old: bytes, new: bytes, every: int) -> bytes:
    """``text`` with every ``every``-th ``old`` made ``new``."""
    parts = text.split(old)
    return parts[0] + b"".join((new if n % every == 0 else old) + part for n, part in enumerate(parts[1:], 1))


def _inputs(folder: Path) -> dict[str, bytes]:
    """Files where a run of records may or may not be decoded at once: cut, damaged, odd."""
    [made] = write_rocprof(folder, steps=300, shuffle=True, rccl="hip", indent=None).files
    text = made.path.read_bytes()
    deep = b'{"n": ' * 70 + b"1" + b"}" * 70
    return {
        "whole": text, "cut": text[: len(text) * 2 // 3],
        "cut in a string": text[: text.rindex(b'"start_timestamp') + 5],
        "trailing commas": _damaged(text, b'"thread_id": 7,', b'"thread_id": 7,,', 37),
        "a bracket lost": _damaged(text, b'"kernel_id": 1}}', b'"kernel_id": 1}', 300),
        "a bad escape": _damaged(text, b'"hipLaunchKernel"', b'"hip\\qLaunchKernel"', 1),
        "boundaries in strings": text.replace(b'"gemm()"', b'"g}, {e}\\"},{mm"').replace(
            b'"thread_id": 7', b'"thread_id": 7, "s": "}, {"', 1000),
        "no commas": _damaged(text, b'}, {"kind": 11', b'} {"kind": 11', 9),
        "form feeds": _damaged(text, b'}, {"kind": 5', b'}\x0c, {"kind": 5', 7),
        "too deep": text.replace(b'"hip_api": [', b'"hip_api": [' + deep + b", "),
        "deep enough": text.replace(b'"hip_api": [', b'"hip_api": [' + deep[12 * 6:-12] + b", "),
        "not objects": text.replace(b'"hip_api": [', b'"hip_api": [1, [{"a": 2}, {"b": [3]}], [], {}, "x", '),
        "big integers": _damaged(text, b'"thread_id": 7', b'"thread_id": 7' + b"0" * 30, 50),
        "objects in arrays inside": text.replace(b'"thread_id": 7', b'"thread_id": 7, "c": [{"x": 1}, {"y": '
                                                 b'[{"z": "\xc3\xa9"}, {}]}]'),
    }


@pytest.mark.parametrize("chunk", [1 << 20, 4096, 333])
def test_runs_yield_the_batches_warnings_and_errors_the_tokenizer_does(tmp_path, monkeypatch, chunk):
    """The tokenizer alone (runs off) is the reference: it reads each record as the reader always did."""
    from converters.readers import rocprof

    def sections(path: Path) -> tuple[list, list, str | None]:
        warned: list[tuple[str, str]] = []
        diag = Diagnostics()
        diag.warn = lambda kind, message, subject=None: warned.append((kind, message))
        got = []
        try:
            got = [(name, items) for name, items in rocprof._sections(path, diag, chunk)]
        except InputError as e:
            return got, warned, str(e)
        return got, warned, None

    for name, data in _inputs(tmp_path / "made").items():
        path = tmp_path / "1000_results.json"
        path.write_bytes(data)
        with monkeypatch.context() as m:
            m.setattr(rocprof._Runs, "take", lambda self, buf, at, room, array: None)
            alone = sections(path)
        assert sections(path) == alone, name
