"""The XSpace reader (``readers/xplane.py``) against the real JAX 0.8 capture of 8 MI300X
(``xplane-jax-conv``): what it must hold is computed here from the protobuf itself, decoded
whole with XLA's schema (the reader decodes it plane by plane)."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import real_data
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trace_processor import imported
from trace_check import read_perfetto

from converters import Diagnostics, Layer, Options, convert, discover, overlap_report, read_profile
from converters.analyses.ops import ops_report
from converters.cli import main
from converters.intervals import NOT_COMPUTE
from converters.model import decoded_args
from converters.readers import xplane_pb2

SAMPLE = "xplane-jax-conv"
_DEVICE = re.compile(r"^/device:GPU:(\d+)$")


def _sample() -> Path:
    return real_data(SAMPLE)


def _space(folder: Path):
    return xplane_pb2.XSpace.FromString((folder / "tw003.xplane.pb").read_bytes())


def _start_ns(space) -> int:
    env = next(p for p in space.planes if p.name == "Task Environment")
    return next(s.int64_value or s.uint64_value for s in env.stats
                if env.stat_metadata[s.metadata_id].name == "profile_start_time")


def _timed(space, plane):
    """(line name, event name, start ns epoch, duration ns, correlation id) of each of its events."""
    base = _start_ns(space)
    ids = {k: v.name for k, v in plane.stat_metadata.items()}
    for line in plane.lines:
        for e in line.events:
            stats = {ids[s.metadata_id]: s for s in e.stats}
            c = stats["correlation_id"].int64_value or stats["correlation_id"].uint64_value \
                if "correlation_id" in stats else None
            yield (line.name, plane.event_metadata[e.metadata_id].name,
                   base + line.timestamp_ns + e.offset_ps // 1000, e.duration_ps // 1000, c)


def _device_events(space) -> dict[int, list[tuple]]:
    return {int(m[1]): list(_timed(space, p)) for p in space.planes if (m := _DEVICE.match(p.name))}


def _host_events(space) -> list[tuple]:
    return [e for p in space.planes if p.name == "/host:CPU" for e in _timed(space, p)]


def test_every_device_and_host_event_lands_once_in_the_detail_records():
    space = _space(_sample())
    devices = _device_events(space)
    expected = Counter((rank, name, start, dur) for rank, events in devices.items()
                       for _, name, start, dur, _ in events)
    batches = list(read_profile(discover(_sample()), Options(kind="detail"), Diagnostics()))
    slices = [s for b in batches for s in b.slices]
    device = (Layer.STREAM, Layer.COMM_OP)
    drawn = Counter((s.rank, s.name, s.start_ns, s.dur_ns) for s in slices if s.layer in device)
    assert drawn == expected
    assert sum(expected.values()) == 235  # SOURCE.md's count
    host = Counter((name, start, dur) for _, name, start, dur, _ in _host_events(space))
    assert Counter((s.name, s.start_ns, s.dur_ns) for s in slices if s.layer is Layer.HOST) == host
    assert sum(host.values()) == 3415
    # a launch is on the rank of the device that ran its kernel
    kernel_rank = {c: rank for rank, events in devices.items() for *_, c in events if c is not None}
    for s in slices:
        if s.layer is Layer.HOST and "correlation_id" in _args(s):
            assert s.rank == kernel_rank.get(_args(s)["correlation_id"], 0), s


def test_the_detail_trace_loads_clean_with_every_kernel_and_an_arrow_per_launched_kernel(tmp_path):
    space = _space(_sample())
    devices = _device_events(space)
    launches = {c for *_, c in _host_events(space) if c is not None}
    out = tmp_path / "out.pftrace"
    result = convert(_sample(), out, kind="detail", max_bytes=None)
    decoded = read_perfetto(out.read_bytes())
    problems, (slices, _, flows) = imported(out, tmp_path)
    assert problems == []
    assert slices == len(decoded.slices) + len(decoded.instants) == result.slices
    on_streams = Counter((s.process.split(" ")[1], s.name) for s in decoded.slices if "Stream" in s.track[-1])
    files = Counter((str(rank), name) for rank, events in devices.items() for _, name, *_ in events)
    assert on_streams == files
    launched = sum(c in launches for events in devices.values() for *_, c in events)
    assert flows == decoded.flows == launched > 200


def test_ops_by_name_are_the_files_counts_and_times_of_its_compute_kernels():
    devices = _device_events(_space(_sample()))
    expected: dict[tuple[int, str], list[int]] = {}
    for rank, events in devices.items():
        for _, name, _, dur, _ in events:
            row = expected.setdefault((rank, name), [0, 0])
            row[0] += 1
            row[1] += dur
    assert sum(t for _, t in expected.values()) == 28_137_077  # SOURCE.md: duration_ps / 1000 summed
    assert expected.pop((0, "__amd_rocclr_copyBuffer.kd")) == [35, 563_521]  # a copy: ops counts compute
    rows = {(r.rank, r.name): [r.count, r.total_ns] for r in ops_report(_sample(), by="name")}
    assert rows == expected


def test_rocms_blit_kernels_are_copies_on_their_stream():
    batches = read_profile(discover(_sample()), Options(kind="detail"), Diagnostics())
    copies = [s for b in batches for s in b.slices if s.name.startswith("__amd_rocclr")]
    assert len(copies) == 35
    assert {(s.layer, s.task_type) for s in copies} == {(Layer.STREAM, "MEMCPY")}
    assert all(s.lane.startswith("GPU 0 Stream ") for s in copies)


def _union(intervals) -> int:
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total, reach = total + end - start, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


def test_overlap_gives_each_devices_computing_without_its_copies():
    devices = _device_events(_space(_sample()))
    rows = {r.rank: r for r in overlap_report(_sample())}
    assert sorted(rows) == sorted(devices)
    for rank, events in devices.items():
        compute = [(start, start + dur) for _, name, start, dur, _ in events
                   if not name.startswith("__amd_rocclr_copy")]  # ROCm's blit kernels are copies
        assert rows[rank].computing_ns == _union(compute), rank
        assert rows[rank].step is None  # no step annotation in the capture: the whole of it one step


def test_info_lists_a_rank_per_device_plane(capsys):
    assert main(["info", str(_sample())]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"^\s+\d+\s+xplane\s+\d\s+tw003", out, re.M)) == 8


def test_a_step_marker_makes_the_users_ranges_the_steps():
    rows = overlap_report(_sample(), step_marker="PjitFunction(forward_3d_conv)")
    assert {r.step for r in rows} >= {1, 2}
    assert all(r.rank in range(8) for r in rows)


@pytest.mark.parametrize("fraction", [0.02, 0.3, 0.5, 0.77, 0.999])
def test_an_xspace_cut_in_the_middle_is_a_clear_error_naming_the_file(tmp_path, capsys, fraction):
    data = (_sample() / "tw003.xplane.pb").read_bytes()
    folder = tmp_path / "cut"
    folder.mkdir()
    (folder / "tw003.xplane.pb").write_bytes(data[:int(len(data) * fraction)])
    for command in (["info", str(folder)], [str(folder), "-o", str(tmp_path / "out.pftrace")]):
        assert main(command) != 0
        err = capsys.readouterr().err
        assert "tw003.xplane.pb" in err and "cut" in err and "Traceback" not in err


def test_a_file_that_is_no_xspace_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "x.xplane.pb").write_bytes(b"\x08\x01 not a protobuf of planes")
    assert main(["info", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "x.xplane.pb" in err and "not an XSpace" in err and "Traceback" not in err


def test_the_sample_is_found_inside_a_jax_log_folder(tmp_path):
    run = tmp_path / "plugins" / "profile" / "2026_02_20_13_53_59"
    run.mkdir(parents=True)
    shutil.copy(_sample() / "tw003.xplane.pb", run)
    assert [r.rank for r in discover(tmp_path)] == list(range(8))



def test_a_lone_xspace_file_is_read_as_its_folder_is(tmp_path, capsys):
    """An XSpace passed alone (as it travels, attached to an issue): a rank per device plane, the
    same overlap table and the same trace as its folder gives."""
    lone = _sample() / "tw003.xplane.pb"
    assert [(r.rank, r.device, r.path) for r in discover(lone)] == [
        (r.rank, r.device, r.path) for r in discover(_sample())]
    tables = []
    for path in (lone, _sample()):
        assert main(["overlap", str(path), "--format", "csv"]) == 0
        tables.append(capsys.readouterr().out)
    assert tables[0] == tables[1] and len(tables[0].splitlines()) == 9
    traces = [tmp_path / "lone.pftrace", tmp_path / "folder.pftrace"]
    for path, out in zip((lone, _sample()), traces, strict=True):
        assert main([str(path), "-q", "-o", str(out)]) == 0
    assert traces[0].read_bytes() == traces[1].read_bytes()


def test_a_lone_xspace_without_a_device_plane_is_a_clear_error(tmp_path, capsys):
    space = xplane_pb2.XSpace(hostnames=["h"], planes=[xplane_pb2.XPlane(id=0, name="/host:CPU")])
    (tmp_path / "h.xplane.pb").write_bytes(space.SerializeToString())
    assert main(["info", str(tmp_path / "h.xplane.pb")]) != 0
    err = capsys.readouterr().err
    assert "h.xplane.pb" in err and "no device plane" in err and "Traceback" not in err

# -- a small XSpace written here with XLA's schema: what the real sample lacks ---------------------

def _write(folder: Path, *, steps: bool, environment: bool = True) -> None:
    """Two GPUs, one host thread: a TraceMe step range per step (``step_num``, as JAX's
    StepTraceAnnotation), a launch per kernel, an RCCL all-reduce on GPU 1 and a memcpy line."""
    space = xplane_pb2.XSpace(hostnames=["h"])
    host = xplane_pb2.XPlane(id=0, name="/host:CPU")
    host.stat_metadata[1].name = "correlation_id"
    host.stat_metadata[2].name = "step_num"
    host.event_metadata[1].name = "train"
    host.event_metadata[2].name = "hipModuleLaunchKernel"
    thread = host.lines.add(id=7, name="Host Threads/7", timestamp_ns=1000)
    correlation = 0
    planes = []
    for d in (0, 1):
        plane = space.planes.add(id=d, name=f"/device:GPU:{d}")
        plane.stat_metadata[1].name = "correlation_id"
        plane.event_metadata[1].name = "fusion.kd"
        plane.event_metadata[2].name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
        plane.event_metadata[3].name = "MemcpyD2D"
        plane.lines.add(id=1, name="Stream #1(Kernel)", timestamp_ns=1000)
        plane.lines.add(id=2, name="Stream #2(MemcpyD2D)", timestamp_ns=1000)
        planes.append(plane)
    for step in range(3):
        at = step * 100_000_000  # ps: steps of 100 µs
        if steps:
            ev = thread.events.add(metadata_id=1, offset_ps=at, duration_ps=90_000_000)
            ev.stats.add(metadata_id=2, int64_value=step + 10)
        for d, plane in enumerate(planes):
            for k, (meta, line) in enumerate(((1, 0), (2 if d == 1 else 1, 0), (3, 1))):
                correlation += 1
                launch = thread.events.add(metadata_id=2, offset_ps=at + 1_000_000 * (3 * d + k + 1),
                                           duration_ps=500_000)
                launch.stats.add(metadata_id=1, uint64_value=correlation)
                kernel = plane.lines[line].events.add(metadata_id=meta, duration_ps=4_000_000,
                                                      offset_ps=at + 20_000_000 + k * 5_000_000)
                kernel.stats.add(metadata_id=1, uint64_value=correlation)
    space.planes.append(host)
    if environment:
        env = space.planes.add(name="Task Environment")
        env.stat_metadata[1].name = "profile_start_time"
        env.stats.add(metadata_id=1, uint64_value=1_700_000_000_000_000_000)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "h.xplane.pb").write_bytes(space.SerializeToString())


def test_jax_step_annotations_are_the_steps_and_device_work_is_filed_at_its_launch(tmp_path):
    _write(tmp_path, steps=True)
    batches = list(read_profile(discover(tmp_path), Options(kind="detail"), Diagnostics()))
    by_rank = {(b.rank, b.step_id): b for b in batches}
    assert sorted(by_rank) == [(r, s) for r in (0, 1) for s in (10, 11, 12)]
    base = 1_700_000_000_000_000_000 + 1000
    for (_, step), b in by_rank.items():
        assert b.step.start_ns == base + (step - 10) * 100_000
        assert [s.name for s in b.slices if s.layer is Layer.STEP] == [f"Step {step}"]  # every rank's
        device = [s for s in b.slices if s.layer in (Layer.STREAM, Layer.COMM_OP)]
        assert len(device) == 3 and all(len(s.flows_in) == 1 for s in device)
        launches = [s for s in b.slices if s.flows_out]
        assert sorted(f for s in launches for f in s.flows_out) == \
            sorted(f for s in device for f in s.flows_in)


def test_rccl_kernels_are_collectives_and_memcpy_lines_copies(tmp_path):
    _write(tmp_path, steps=False)
    batches = read_profile(discover(tmp_path), Options(kind="detail"), Diagnostics())
    slices = [s for b in batches for s in b.slices]
    kinds = Counter((s.rank, s.layer, s.task_type) for s in slices if s.layer is not Layer.HOST)
    assert kinds == {(0, Layer.STREAM, "GPU kernel"): 6, (0, Layer.STREAM, "MEMCPY"): 3,
                     (1, Layer.STREAM, "GPU kernel"): 3, (1, Layer.COMM_OP, "allreduce"): 3,
                     (1, Layer.STREAM, "MEMCPY"): 3}
    # a launch is its kernel's rank's
    assert Counter(s.rank for s in slices if s.layer is Layer.HOST) == {0: 9, 1: 9}
    rows = {r.rank: r for r in overlap_report(tmp_path)}
    assert rows[1].communication_ns == 3 * 4_000 and rows[1].computing_ns == 3 * 4_000


def test_without_a_task_environment_the_times_are_the_files_own_and_said_so(tmp_path, capsys):
    _write(tmp_path, steps=False, environment=False)
    ranks = discover(tmp_path)
    assert all(not r.wall_clock and r.clock_offset_ns == 0 for r in ranks)
    assert main(["info", str(tmp_path)]) == 0


@pytest.mark.parametrize("kind", ["summary", "detail"])
@pytest.mark.parametrize("name", ["out.pftrace", "out.json"])
def test_both_kinds_and_writers_load_in_the_trace_processor_with_nothing_repaired(tmp_path, kind, name):
    out = tmp_path / name
    result = convert(_sample(), out, kind=kind, max_bytes=None)
    problems, (slices, _, _) = imported(out, tmp_path)
    assert problems == [] and slices == result.slices > 0


# -- CPU: what a read walks in Python ---------------------------------------------------------------

def test_a_read_walks_no_events_framing_in_python(tmp_path, monkeypatch):
    """Protobuf splits a line into its events (in C): the reader's own varint walk covers each
    plane's top-level fields alone, never its events (which cost a 30 MB XSpace ~70% more CPU)."""
    from converters.readers import xplane, xplane_wire
    from fixtures.xplane_gen import write_xspace

    made = write_xspace(tmp_path, devices=2, steps=40, kernels=4)
    varints = 0
    walk = xplane_wire._byte_reader.varint

    def counted(self):
        nonlocal varints
        varints += 1
        return walk(self)

    monkeypatch.setattr(xplane_wire._byte_reader, "varint", counted)
    for rank in discover(tmp_path):
        for _ in xplane.read(rank, Diagnostics()):
            pass
    events = sum(r.device_events + r.host_events for r in made.ranks)
    assert events > 1500
    assert varints < events / 10, f"{varints} varints walked in Python for {events} events"


@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_a_stream_of_kernels_and_copies_types_each_event_by_its_own_name_and_stats(tmp_path, kind):
    """CUPTI names a stream by every kind of work it ran (``Stream #7(Kernel,MemcpyH2D)``, as the
    TF GPU demo's ``Stream #135(MemcpyH2D)``): its kernels compute, its copies are copies."""
    space = xplane_pb2.XSpace(hostnames=["h"])
    plane = space.planes.add(id=0, name="/device:GPU:0")
    plane.stat_metadata[1].name = "memcpy_details"
    plane.stat_metadata[2].name = "memset_details"
    for i, name in enumerate(("fusion_1", "MemcpyH2D", "cutlass_gemm", "copy_thing", "Memset"), 1):
        plane.event_metadata[i].name = name
    line = plane.lines.add(id=7, name="Stream #7(Kernel,MemcpyH2D,Memset)", timestamp_ns=1000)
    for i in range(1, 6):
        event = line.events.add(metadata_id=i, offset_ps=i * 10_000_000, duration_ps=5_000_000)
        if i == 4:  # a copy by its stat alone
            event.stats.add(metadata_id=1, str_value="kind:1 size:4096 dest:0 async:1")
    (tmp_path / "h.xplane.pb").write_bytes(space.SerializeToString())
    batches = read_profile(discover(tmp_path), Options(kind=kind), Diagnostics())
    slices = [s for b in batches for s in b.slices]
    kinds = {s.name: s.task_type for s in slices if s.layer is Layer.STREAM}
    copies = {"MemcpyH2D": "MEMCPY", "copy_thing": "MEMCPY", "Memset": "MEMSET"}  # drawn in detail only
    kernels = {"fusion_1": "GPU kernel", "cutlass_gemm": "GPU kernel"}
    assert kinds == {**kernels, **(copies if kind == "detail" else {})}
    assert {s.lane for s in slices if s.layer is Layer.STREAM} == {"GPU 0 Stream 7"}


# -- TPU planes (fixtures/xplane_gen.py, platform="tpu": the shape of xprof's real v6e capture) ----

def _tpu(tmp_path, **kw):
    from fixtures.xplane_gen import write_xspace

    made = write_xspace(tmp_path, platform="tpu", devices=4, steps=3, kernels=4, **kw)
    batches = list(read_profile(discover(tmp_path), Options(kind="detail"), Diagnostics()))
    return made, batches


def test_tpu_ops_are_on_device_lanes_typed_by_their_hlo_opcode_and_its_steps_line_gives_the_steps(tmp_path):
    made, batches = _tpu(tmp_path, step_annotations=False)
    slices = [s for b in batches for s in b.slices]
    for rank in range(4):
        kinds = Counter((s.layer, s.lane, s.task_type) for s in slices
                        if s.rank == rank and s.layer is not Layer.HOST)
        assert kinds == {
            (Layer.STREAM, f"TPU {rank} XLA Ops", "XLA op"): 4 * 3,  # the fusions, a convolution, a reduce
            (Layer.COMM_OP, "XLA collectives", "allreduce"): 3,
            (Layer.STREAM, f"TPU {rank} XLA Ops", "MEMCPY"): 2 * 3,  # copy-start, copy-done
            (Layer.STREAM, f"TPU {rank} Async XLA Ops", "MEMCPY"): 3,  # the copy in flight
            (Layer.STREAM, f"TPU {rank} XLA Modules", NOT_COMPUTE): 3,  # a range a module run
            (Layer.STREAM, f"TPU {rank} XLA TraceMe", NOT_COMPUTE): 3,
            (Layer.STREAM, f"TPU {rank} Framework Ops", NOT_COMPUTE): 7 * 3,  # repeats XLA Ops
            (Layer.STEP, "Steps", ""): 3,  # the Steps line's, the host having none
        }
        assert sorted(b.step_id for b in batches if b.rank == rank and b.step_id is not None) == [0, 1, 2]
    assert sum(1 for s in slices if s.layer is not Layer.STEP) == sum(
        r.device_events + r.host_events for r in made.ranks)  # nothing dropped
    computing, communication = Counter(), Counter()  # the ops run one after another: no overlap
    for row in overlap_report(tmp_path):
        computing[row.rank] += row.computing_ns
        communication[row.rank] += row.communication_ns
    assert computing == dict.fromkeys(range(4), 3 * 4 * 400_000)
    assert communication == dict.fromkeys(range(4), 3 * 400_000)


def test_tpu_host_step_annotations_win_and_the_devices_steps_line_is_then_drawn(tmp_path):
    _, batches = _tpu(tmp_path, step_annotations=True)
    assert sorted({b.step_id for b in batches if b.rank == 2} - {None}) == [1, 2, 3]  # the host's step_num
    steps_line = [s for b in batches for s in b.slices if s.lane == "TPU 2 Steps"]
    assert [s.name for s in sorted(steps_line, key=lambda s: s.start_ns)] == ["0", "1", "2"]
    assert {s.task_type for s in steps_line} == {NOT_COMPUTE}


def test_tpu_ops_show_as_xla_ops_in_the_op_statistics(tmp_path):
    _tpu(tmp_path, step_annotations=False)
    rows = ops_report(tmp_path, by="name")
    assert {r.core_type for r in rows} == {"XLA op"}
    assert {r.name for r in rows} == {"fusion", "convolution.1", "dot.2", "reduce.3"}


def test_a_plane_that_is_no_device_or_host_plane_is_said(tmp_path):
    from fixtures.xplane_gen import write_xspace

    made = write_xspace(tmp_path, platform="tpu", devices=1, steps=1)
    space = xplane_pb2.XSpace.FromString(made.paths[0].read_bytes())
    space.planes.add(id=99, name="/device:TPU:0 SparseCore 0")
    made.paths[0].write_bytes(space.SerializeToString())
    diag = Diagnostics()
    discover(tmp_path, diag)
    assert "SparseCore" in diag.examples["xplane_unread_plane"]


@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_a_tpu_trace_loads_clean_in_the_trace_processor(tmp_path, kind):
    from fixtures.xplane_gen import write_xspace

    write_xspace(tmp_path / "in", platform="tpu", devices=2, steps=3, step_annotations=False)
    out = tmp_path / "out.pftrace"
    result = convert(tmp_path / "in", out, kind=kind, max_bytes=None)
    problems, (slices, _, _) = imported(out, tmp_path)
    assert problems == [] and slices == result.slices > 0


@pytest.mark.parametrize(("category", "name", "expected"), [
    ("loop fusion", "fusion.3", (Layer.STREAM, "XLA op")),
    ("reduce", "reduce.7", (Layer.STREAM, "XLA op")),  # XLA's reduce computes: no collective
    ("convolution", "dot.2", (Layer.STREAM, "XLA op")),
    ("all-reduce", "all-reduce.1", (Layer.COMM_OP, "allreduce")),
    ("all-reduce fusion", "fusion.9", (Layer.COMM_OP, "allreduce")),
    ("all-reduce-scatter fusion", "fusion.10", (Layer.COMM_OP, "reducescatter")),
    (None, "all-gather-done.2", (Layer.COMM_OP, "allgather")),  # no category: the name's opcode
    ("async-done", "all-to-all-done", (Layer.COMM_OP, "alltoall")),
    ("collective-permute-done", "collective-permute-done.1", (Layer.COMM_OP, "sendrecv")),
    ("megacore fusion", "fusion.4", (Layer.COMM_OP, "collective")),
    ("host send", "send.1", (Layer.COMM_OP, "send")),
    ("copy-done", "copy-done.2", (Layer.STREAM, "MEMCPY")),
    ("async-done", "async-done.1", (Layer.STREAM, NOT_COMPUTE)),
])
def test_an_xla_op_is_typed_by_its_hlo_opcode(category, name, expected):
    from converters.model import RankInfo
    from converters.readers import xplane

    rank = RankInfo(rank=0, format="xplane", path=Path("t.xplane.pb"), device=0)
    plane = xplane._Device("TPU", False, {} if category is None else {5: category})
    event = xplane._Event("XLA Ops", name, 0, 10, {}, (), 5)
    made = xplane._xla_op(rank, plane, "XLA Ops", event, detail=True)
    assert (made.layer, made.task_type) == expected
    assert _args(made)["hlo_category"] == category if category else "hlo_category" not in _args(made)


# -- a real TPU capture: xprof's tpu_inference_2.xplane.pb (JAX, TPU v6e, 4 chips; Apache-2.0),
# kept in fixtures/public (its SOURCE.md). What it must hold is counted from the protobuf here. --

TPU_SAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "public" / "xplane-tpu-v6e"
_TPU = re.compile(r"^/device:TPU:(\d+)$")
_TPU_COMPUTES = {"loop fusion", "broadcast"}  # the capture's hlo_category values that compute


def _tpu_ops(space, plane) -> dict[str, list[int]]:
    """The durations (ns) of the plane's ``XLA Ops`` events by their op's ``hlo_category``."""
    ids = {k: v.name for k, v in plane.stat_metadata.items()}
    category = {mid: next((s.str_value or plane.stat_metadata[s.ref_value].name for s in m.stats
                           if ids.get(s.metadata_id) == "hlo_category"), None)
                for mid, m in plane.event_metadata.items()}
    found: dict[str, list[int]] = {}
    for line in plane.lines:
        if line.name == "XLA Ops":
            for e in line.events:
                found.setdefault(category[e.metadata_id], []).append(e.duration_ps // 1000)
    return found


def test_a_real_tpu_capture_draws_every_event_once_and_overlap_is_its_ops_sums(tmp_path):
    folder = TPU_SAMPLE
    space = xplane_pb2.XSpace.FromString((folder / "tpu_inference_2.xplane.pb").read_bytes())
    planes = {int(m[1]): p for p in space.planes if (m := _TPU.match(p.name))}
    assert sorted(planes) == [0, 1, 2, 3]
    expected = Counter((rank, start, dur) for rank, p in planes.items()
                       for _, _, start, dur, _ in _timed(space, p))
    read = read_profile(discover(folder), Options(kind="detail"), Diagnostics())
    slices = [s for b in read for s in b.slices]
    device = (Layer.STREAM, Layer.COMM_OP)
    drawn = Counter((s.rank, s.start_ns, s.dur_ns) for s in slices if s.layer in device)
    assert drawn == expected and sum(expected.values()) == 7453
    host = [e for p in space.planes if p.name == "/host:CPU" for e in p.lines for e in e.events]
    assert sum(s.layer is Layer.HOST for s in slices) == len(host) == 19270
    rows = {r.rank: r for r in overlap_report(folder)}
    for rank, plane in planes.items():
        ops = _tpu_ops(space, plane)
        computes = sum(sum(ops.get(c, [])) for c in _TPU_COMPUTES)
        assert abs(rows[rank].computing_ns - computes) <= len(ops["loop fusion"])  # ps cut to ns per op
        assert abs(rows[rank].communication_ns - sum(ops["all-reduce"])) <= len(ops["all-reduce"])
    out = tmp_path / "tpu.pftrace"
    convert(folder, out, kind="detail", max_bytes=None)
    problems, (count, _, _) = imported(out, tmp_path)
    decoded = read_perfetto(out.read_bytes())
    assert problems == [] and count == len(decoded.slices) + len(decoded.instants)


def _args(s) -> dict:
    """A slice's args as a dict: the model holds them as one or as its JSON text."""
    return decoded_args(s.args) if isinstance(s.args, bytes) else s.args or {}


# -- a line's events decoded in C (readers/c/xplane.c) as protobuf decodes them ----------------------

_STAT_NAMES = {1: "correlation_id", 2: "step_num", 3: "hlo_op", 7: "stream", -4: "negative"}
_KEYS = {1: "correlation_id", 2: "step_num"}
_IDS = st.sampled_from([1, 2, 3, 7, 9, -4, 2**40])
_STAT_VALUES = st.one_of(
    st.none(), st.floats().map(lambda v: ("double_value", v)),
    st.integers(0, 2**64 - 1).map(lambda v: ("uint64_value", v)),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: ("int64_value", v)),
    st.text(max_size=6).map(lambda v: ("str_value", v)),
    st.binary(max_size=4).map(lambda v: ("bytes_value", v)),
    st.sampled_from([1, 3, 7, 8, 2**64 - 1]).map(lambda v: ("ref_value", v)))


@st.composite
def _xevent(draw) -> bytes:
    event = xplane_pb2.XEvent(metadata_id=draw(st.integers(-(2**63), 2**63 - 1)),
                              duration_ps=draw(st.integers(-(2**63), 2**63 - 1)))
    if draw(st.booleans()):
        event.offset_ps = draw(st.integers(-(2**63), 2**63 - 1))
    else:
        event.num_occurrences = draw(st.integers(0, 9))
    for _ in range(draw(st.integers(0, 4))):
        stat = event.stats.add(metadata_id=draw(_IDS))
        if (value := draw(_STAT_VALUES)) is not None:
            setattr(stat, *value)
    data = event.SerializeToString()
    # protobuf's wire allows more: fields again (the last wins), unknown fields, a oneof set twice
    extra = draw(st.sampled_from([b"", b"\x08\x05", b"\x10\x07", b"\x28\x02", b"\x78\x01", b"\x82\x01\x01z",
                                  b"\x2d\x00\x00\x00\x00", b"\x22\x02\x08\x01", b"\x22\x03\x2a\x01\xff"]))
    return data + extra


@settings(max_examples=400, deadline=None)
@given(st.lists(_xevent(), max_size=5), st.booleans(), st.data())
def test_a_lines_events_decoded_in_c_are_protobufs(events, keyed, data):
    """``_core.xevents`` gives what protobuf's decoding gives each event (``xplane._by_protobuf``):
    its id, whether it is counted without times, its times, its stats by name (or its key stats),
    whatever the wire holds; where it cannot read the wire as protobuf would, None (protobuf then
    decodes the batch, or says what is wrong with it)."""
    from converters.errors import InputError
    from converters.readers import _core, xplane, xplane_wire

    if events and data.draw(st.booleans()):  # damaged: cut short, or a byte changed
        at = data.draw(st.integers(0, len(events) - 1))
        raw = events[at]
        if raw and data.draw(st.booleans()):
            events[at] = raw[:data.draw(st.integers(0, len(raw) - 1))]
        elif raw:
            i = data.draw(st.integers(0, len(raw) - 1))
            events[at] = raw[:i] + bytes([data.draw(st.integers(0, 255))]) + raw[i + 1:]
    keys = _KEYS if keyed else None
    found = _core.xevents(events, _STAT_NAMES, keys)
    try:
        expected = xplane._by_protobuf(Path("x.xplane.pb"), xplane_wire.Frame(1, 0, 0), events, _STAT_NAMES,
                                       keys)
    except InputError:
        assert found is None
        return
    if found is not None:
        assert repr(found) == repr(expected)  # repr: NaN is no NaN's equal


def test_a_line_of_plain_events_is_decoded_in_c():
    """Events as XLA writes them never take protobuf's path."""
    event = xplane_pb2.XEvent(metadata_id=5, offset_ps=1_500, duration_ps=2_000)
    event.stats.add(metadata_id=1, int64_value=42)
    event.stats.add(metadata_id=3, str_value="fusion.1")
    event.stats.add(metadata_id=7, ref_value=3)
    found = _core_xevents([event.SerializeToString()], None)
    stats = {"correlation_id": 42, "hlo_op": "fusion.1", "stream": "hlo_op"}  # a ref by the name it points at
    assert found == [(5, False, 1_500, 2_000, stats, event.SerializeToString())]
    assert _core_xevents([event.SerializeToString()], _KEYS)[0][4] == {"correlation_id": 42}


def _core_xevents(events, keys):
    from converters.readers import _core

    return _core.xevents(events, _STAT_NAMES, keys)


# -- a line read a piece at a time (xplane_wire.lines, readers/c/xplane.c line_fields) --------------

_LINE_FIELD = st.one_of(
    st.binary(max_size=12).map(lambda event: b"\x22" + bytes([len(event)]) + event),  # an event
    st.sampled_from([b"\x08\x07", b"\x12\x03abc", b"\x18\x80\x01", b"\x48\x05", b"\x50\x02",
                     b"\x5a\x01z", b"\x12\x00", b"\x61" + bytes(8), b"\x7d" + bytes(4),
                     b"\xa2\x06\x02hi"]))  # the head's fields, unknown ones


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE_FIELD, max_size=12), st.integers(1, 9), st.integers(1, 4), st.data())
def test_a_line_read_a_piece_at_a_time_is_protobufs_line(tmp_path_factory, fields, piece, batch, data):
    """A line's head (its fields but events) and its events' bytes, in batches, read from the file a
    few bytes at a time, are what protobuf's decoding of the whole line gives, fields in any order
    and again; a line whose wire C leaves to protobuf (a group, a field 0, events of another wire
    type, a field cut) is protobuf's, whole: the same, or protobuf's error."""
    from converters.errors import InputError
    from converters.readers import xplane_wire

    wire = b"".join(fields)
    if wire and data.draw(st.booleans()):  # damaged: cut short, or a byte changed
        i = data.draw(st.integers(0, len(wire) - 1))
        byte = bytes([data.draw(st.integers(0, 255))])
        wire = wire[:i] if data.draw(st.booleans()) else wire[:i] + byte + wire[i + 1:]
    path = tmp_path_factory.mktemp("line") / "x.xplane.pb"
    path.write_bytes(b"\x00" * 3 + wire)
    frame = xplane_wire.Frame(1, 3, len(wire))
    frames = xplane_wire.line_frames()
    try:
        whole = frames.FromString(wire)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError
        whole = None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(xplane_wire, "_PIECE", piece)
        patch.setattr(xplane_wire, "EVENT_BATCH", batch)
        try:
            found = list(xplane_wire.lines(path, frame, [frame]))
        except InputError:
            assert whole is None
            return
    assert whole is not None
    events = list(whole.events)
    whole.ClearField("events")
    assert [head for head, _ in found] == [whole] * len(found)
    assert [list(b) for _, b in found] == [events[i:i + batch] for i in range(0, max(len(events), 1), batch)]


_IDS_64 = (st.integers(-3, 40) | st.integers(-(2**63), 2**64 - 1)
           | st.sampled_from([-1, 2**64 - 1, 2**63, -(2**63)]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["kernel", "launch", "count", "at", "in"]), _IDS_64,
                          st.integers(-(2**62), 2**62)), max_size=3000))
def test_the_launches_table_in_c_keeps_what_a_counter_and_a_dict_keep(calls):
    """``_core.Launches`` (xplane's per-launch bookkeeping, 24 bytes a slot): each id's kernel count
    as a Counter counts it, its launch's time as a dict keeps the last one set where it ran kernels,
    int64 and uint64 ids told apart, through every growth of its table."""
    from collections import Counter

    from converters.readers import _core

    table, kernels, times = _core.Launches(), Counter(), {}
    for call, c, at in calls:
        if call == "kernel":
            assert table.kernel(c) == kernels[c]
            kernels[c] += 1
        elif call == "launch":
            assert table.launch(c, at) == (c in kernels)
            if c in kernels:
                times[c] = at
        elif call == "count":
            assert table.count(c) == kernels.get(c, 0)
        elif call == "at":
            assert table.launched_at(c) == times.get(c)
        else:
            assert (c in table) == (c in kernels)
    for c in range(-2000, 3000, 3):  # the table grown to 8,192 slots: what it held is kept
        table.kernel(c)
        kernels[c] += 1
    assert all(table.count(c) == n and table.launched_at(c) == times.get(c) for c, n in kernels.items())
    assert len(table) == len(kernels)
    with pytest.raises(OverflowError):
        table.kernel(2**64)


# -- a batch's events made into records in C (xdevice, xhost, xfiled) by the reader's rules ----------

_NAMES = {1: "fusion.kd", 2: "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 3: "MemcpyD2D", 4: "Memset",
          5: "__amd_rocclr_copyBuffer.kd", 6: "hipModuleLaunchKernel", 7: "train", 8: "train_step", 9: ""}
_STATS = {1: "correlation_id", 2: "step_num", 3: "memcpy_details", 4: "kernel_details", 5: "flops",
          6: "Stream"}
_CORRELATIONS = st.sampled_from([1, 2, 3, 4, 5, 2**63 + 1, -3])


def _seldom(rare, usual, odds: int = 10):
    """``rare`` once in ``odds`` draws, else ``usual``: a batch holding one is the rule's, whole."""
    return st.integers(1, odds).flatmap(lambda i: rare if i == 1 else usual)


# ps; a few values often, so that records start where steps start and launches coincide
_TIMES = _seldom(st.sampled_from([-(10**6) - 1, 2**63 - 1, -(2**63)]),
                 st.sampled_from([0, 999, 1_000, 2_000, 5_000]) | st.integers(0, 10**9), 4)
_LINE_TIMES = _seldom(st.just(2**62 + 5), st.sampled_from([0, 1, 3]) | st.integers(0, 10**6))  # ns


@st.composite
def _stat(draw, plane) -> tuple[int, tuple[str, object]]:
    key = draw(st.sampled_from(sorted(_STATS)))
    value = draw(st.one_of(
        _CORRELATIONS.map(lambda v: ("uint64_value", v) if v >= 2**63 else ("int64_value", v)),
        st.integers(0, 2**31 + 1).map(lambda v: ("uint64_value", v)),
        st.sampled_from([("str_value", "copy 4 KiB"), ("double_value", 1.5), ("double_value", float("nan")),
                         ("ref_value", 4), ("ref_value", 99)])))
    return key, value


def _add_events(draw, line, plane, host: bool) -> None:
    for _ in range(draw(st.integers(0, 6))):
        event = line.events.add(metadata_id=draw(_seldom(st.just(42), st.sampled_from(sorted(_NAMES)), 30)),
                                duration_ps=draw(_TIMES))
        if draw(st.integers(0, 29)):
            event.offset_ps = draw(_TIMES)
        else:
            event.num_occurrences = 2  # counted without times
        for _ in range(draw(st.integers(0, 3))):
            key, value = draw(_stat(plane))
            setattr(event.stats.add(metadata_id=key), *value)
        if not host and draw(st.booleans()):  # the work of a launch
            event.stats.add(metadata_id=1).uint64_value = draw(st.integers(1, 5))
        elif host and draw(st.booleans()):  # a launch, or a step's range
            if draw(st.booleans()):
                event.stats.add(metadata_id=1).uint64_value = draw(st.integers(1, 5))
            else:
                event.stats.add(metadata_id=2).int64_value = draw(st.sampled_from([0, 3, 2**31, -1]))


@st.composite
def _drawn_space(draw) -> bytes:
    space = xplane_pb2.XSpace(hostnames=["h"])
    for d in range(draw(st.integers(1, 2))):
        plane = space.planes.add(id=d, name=f"/device:GPU:{d}")
        for i, name in _NAMES.items():
            plane.event_metadata[i].name = name
        for i, name in _STATS.items():
            plane.stat_metadata[i].name = name
        for line_name in draw(st.lists(st.sampled_from(["Stream #1(Kernel)", "Stream #7(Kernel,MemcpyH2D)",
                                                         "XLA Ops", "Steps"]), min_size=1, max_size=3)):
            _add_events(draw, plane.lines.add(name=line_name, timestamp_ns=draw(_LINE_TIMES)), plane,
                        False)
    host = space.planes.add(id=9, name="/host:CPU")
    for i, name in _NAMES.items():
        host.event_metadata[i].name = name
    for i, name in _STATS.items():
        host.stat_metadata[i].name = name
    for t in range(draw(st.integers(1, 2))):
        line = host.lines.add(id=t, name=f"Host Threads/{t}", timestamp_ns=draw(_LINE_TIMES))
        if draw(st.booleans()):
            line.display_name = f"python {t}"
        _add_events(draw, line, host, True)
    return space.SerializeToString()


def _read_all(folder: Path, kind: str, marker: str | None):
    from converters.readers import xplane

    diag = Diagnostics()
    found = []
    for rank in xplane.rank_infos(folder, diag):
        for b in xplane.read(rank, diag, detail=kind == "detail", step_marker=marker):
            found.append((b.rank, b.step_id, b.step, repr(sorted(b.slices, key=repr)), b.samples))
    return found, diag.messages()


@settings(max_examples=150, deadline=None)
@given(_drawn_space(), st.sampled_from(["summary", "detail"]), st.sampled_from([None, "train", "train*"]))
def test_a_batch_made_into_records_in_c_is_what_the_readers_rules_make(tmp_path_factory, data, kind, marker):
    """``_core.xdevice``, ``xhost``, ``xkernels`` and ``xfiled`` make what ``_device_work``,
    ``_host_work``, ``_correlations`` and ``_filed`` make in Python, on XSpaces of any mix:
    kernels, collectives, copies by name or stats, lines that are no stream, a ``Steps`` line,
    launches of this device, of another and of none, JAX's step ranges (numbers out of range too)
    or the user's marker, ids past 63 bits, events without times, past the model's times, without
    a name (a batch of those is the rule's, whole)."""
    from converters.readers import xplane

    folder = tmp_path_factory.mktemp("xspace")
    (folder / "h.xplane.pb").write_bytes(data)
    with_c = _read_all(folder, kind, marker)
    saved = xplane.xdevice, xplane.xhost, xplane.xkernels, xplane.xfiled
    try:
        xplane.xdevice = xplane.xhost = xplane.xkernels = lambda *a: None
        xplane.xfiled = xplane._filed
        by_rule = _read_all(folder, kind, marker)
    finally:
        xplane.xdevice, xplane.xhost, xplane.xkernels, xplane.xfiled = saved
    assert with_c == by_rule


@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_plain_batches_are_made_into_records_in_c(tmp_path, monkeypatch, kind):
    """What XLA writes takes the C path, every batch: the rule's Python runs per event only on
    batches C leaves to it."""
    from converters.readers import xplane

    _write(tmp_path, steps=True)
    left = []

    def counted(real):
        def call(*args):
            found = real(*args)
            left.append(found is None)
            return found
        return call

    monkeypatch.setattr(xplane, "xdevice", counted(xplane.xdevice))
    monkeypatch.setattr(xplane, "xhost", counted(xplane.xhost))
    monkeypatch.setattr(xplane, "xkernels", counted(xplane.xkernels))
    monkeypatch.setattr(xplane, "_device_slice", None)  # the rule's per-event path: never reached
    list(read_profile(discover(tmp_path), Options(kind=kind), Diagnostics()))
    assert left and not any(left)
