"""``make bench``: trace2perfetto against its peer and the parse-only floor, in one run.

Profiles come from the fixture generators (8 ranks, HCCL planes): MindSpore 2.0-2.2 per-iteration
timeline files and CANN 7/8 ``msprof_*.json`` (two graphs), MindSpore 1.x folders with host_info,
torch_npu's database and text forms, PyTorch Kineto GPU traces (Holistic Trace Analysis beside
them) and Paddle's two exports. Each measured command runs in a child process; its peak RSS is
the largest sum of the RSS of it and its children (trace2perfetto reads ranks in worker
processes), sampled every 5 ms.

- floor: ``orjson.loads`` of every JSON file of the profile, the least any converter must do;
- trace2perfetto: summary, detail under the default 20 MiB cap, detail uncapped, as Perfetto
  protobuf and as Chrome JSON; the analyses ``comm``, ``ops``, ``report``, ``memory`` and
  ``comm --matrix`` (the Kineto traces carry ``[memory]`` events, profile_memory=True);
- MindInsight 2.3.1 ``MsprofTimelineAnalyser.get_merged_timeline`` (``bench/peers.py``), summary
  and detail; its output is JSON, so it is compared with trace2perfetto's JSON output;
- issue 28's targets, side by side in one table at the end ("Issue 28 targets", ``targets_table``):
  torch_npu detail and summary MB/s per core, the trace processor loading our detail trace against
  the vendor's JSON, raw profile to a loaded trace, the database form's detail MB/s per core, and
  ``info`` on a ~200 KB profile against starting Python (``startup``).

Results replace the generated part of BENCHMARKS.md (``--no-write`` only prints them).
With TRACE2PERFETTO_REALDATA set, issue 44's cases follow: Chrome traces tiled from real samples
(``bench/real_traces.py``: torch_npu 500 MB, Kineto 1 GB, Paddle 200 MB; ~100 MB with ``--quick``),
summary and uncapped detail and the raw file to a loaded trace, with their targets in a table of
their own ("Issue 44 targets: real shapes"). ``--only real`` measures only those (printed only);
``--only issue28`` only what issue 28's table needs (the torch_npu and database profiles, summary
and detail only, the detail load, the start-up; with ``--quick``, the ~100 MB ones). ``--repeat N``
keeps, of N runs of each command, the one of least CPU s: on a shared machine one run can cost 1.5x
another (a conversion's input read cold, a neighbour's cache traffic).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
FLOOR = (  # JSON (and HCCL .trace) parsed, text tables split into fields, database rows fetched
    "import orjson, sys, pathlib, sqlite3\n"
    "for p in sorted(pathlib.Path(sys.argv[1]).rglob('*')):\n"
    "    if p.suffix in ('.json', '.trace'):\n"
    "        orjson.loads(p.read_bytes())\n"
    "    elif p.suffix == '.db':\n"
    "        db = sqlite3.connect(f'file:{p}?mode=ro&immutable=1', uri=True)\n"
    "        for (t,) in db.execute(\"SELECT name FROM sqlite_master WHERE type='table'\").fetchall():\n"
    "            for _ in db.execute(f'SELECT * FROM \"{t}\"'):\n"
    "                pass\n"
    "    elif p.suffix == '.pb':\n"
    "        from converters.readers.paddle_nodetree_pb2 import NodeTreesProto\n"
    "        NodeTreesProto.FromString(p.read_bytes())\n"
    "    elif p.suffix in ('.csv', '.txt'):\n"
    "        with open(p, encoding='utf-8', errors='replace') as f:\n"
    "            for line in f:\n"
    "                line.split(',')\n"
)
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


@dataclass
class Run:
    label: str
    seconds: float
    peak_rss_mib: float
    output_bytes: int
    cpu_seconds: float = 0.0  # user + system time of the process and the children it waited for


def _tree_rss_kib(root: int) -> int:
    """RSS of ``root`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


# Bytecode cached as an installed package has it (pip compiles it on install): this machine sets
# PYTHONDONTWRITEBYTECODE, under which every run of an editable install would compile the package again
# (~0.05 CPU s a run). ``compile_package`` writes it before the first measurement: left to the first
# run, its compiling (0.13 CPU s on torch_npu's ~100 MB) was counted in the capped summary's figure.
INSTALLED = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
INSTALLED["PYTHONPYCACHEPREFIX"] = str(BUILD / "pycache")


def compile_package() -> None:
    """The package's bytecode into ``INSTALLED``'s cache, as pip's install compiles it."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "converters")], env=INSTALLED,
                   check=True, stdout=subprocess.DEVNULL)


REPEATS = 1  # runs of each measured command (--repeat): the one of least CPU s is kept


def measure(label: str, argv: list[str], output: Path | None = None,
            env: dict[str, str] | None = None) -> Run:
    """Wall time and peak RSS (process tree) of ``argv`` (in ``env``, or ``INSTALLED``'s): of the
    ``REPEATS`` runs, the one of least CPU s, as a shared machine's load only ever adds to it."""
    return min((_measured(label, argv, output, INSTALLED if env is None else env) for _ in range(REPEATS)),
               key=lambda run: run.cpu_seconds)


def _measured(label: str, argv: list[str], output: Path | None, env: dict[str, str]) -> Run:
    if output is not None:
        # A conversion replaces the file it writes, and the kernel frees the old one's blocks in
        # the rename: 0.13 CPU s for a 95 MB .json on ext4, the previous run's cost, not this one's.
        output.unlink(missing_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
        peak = 0
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, _tree_rss_kib(child.pid))
            time.sleep(0.005)
        seconds = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{label} failed: {err.read().decode()[-2000:]}")
    size = output.stat().st_size if output and output.exists() else 0
    return Run(label, seconds, peak / 1024, size, usage.ru_utime + usage.ru_stime)


def generated(name: str, write=None, **options) -> Path:
    """A generated profile under build/bench, made once (``write``: a fixture writer, msprof's
    by default)."""
    root = BUILD / name
    if not (root / ".done").exists():
        from fixtures.msprof_gen import write_msprof_profile

        started = time.perf_counter()
        print(f"bench: generating {name} ...", file=sys.stderr, flush=True)
        (write or write_msprof_profile)(root, **options)
        (root / ".done").write_text("")
        print(f"bench: generated {name} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return root


def input_stats(root: Path) -> tuple[int, int]:
    """(bytes, records) of the profile: JSON events counted as '"ph"' keys (one per event),
    text tables as lines past their header."""
    size = events = 0
    for path in root.rglob("*"):
        if path.suffix == ".db":  # a database's records: its device tasks and host API rows
            import sqlite3

            size += path.stat().st_size
            db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
            events += sum(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for (t,) in db.execute(
                "SELECT name FROM sqlite_master WHERE name IN ('TASK', 'CANN_API', 'COMMUNICATION_OP', "
                "'PYTORCH_API', 'MSTX_EVENTS')"))
            db.close()
            continue
        if path.suffix == ".pb":  # Paddle's protobuf: its host, runtime and device nodes
            from converters.readers.paddle_nodetree_pb2 import NodeTreesProto

            size += path.stat().st_size
            trees = NodeTreesProto.FromString(path.read_bytes())
            events += sum(1 + sum(1 + len(r.device_nodes) for r in node.runtime_nodes)
                          for tree in trees.thread_trees for node in tree.host_nodes)
            continue
        if path.suffix not in (".json", ".trace", ".csv", ".txt"):
            continue
        size += path.stat().st_size
        with open(path, "rb") as f:
            if path.suffix in (".csv", ".txt"):
                events -= 1
            while block := f.read(1 << 24):
                events += block.count(b'"ph"') if path.suffix in (".json", ".trace") else block.count(b"\n")
    return size, events


def analyses(root: Path) -> list[Run]:
    """The communication analysis (its own command, reading detail, and the clock alignment's extra
    read), ``ops``, ``report``, ``memory`` (a profile without memory records: the cost of finding
    none) and the link matrix."""
    runs = []
    out = BUILD / "out-aligned.pftrace"
    runs.append(measure("trace2perfetto detail --align collectives, uncapped, pftrace",
                        [sys.executable, "-m", "converters", str(root), "--kind", "detail", "--max-size", "0",
                         "--align", "collectives", "-o", str(out)], out))
    runs.append(measure("trace2perfetto comm --format json (every op of every rank)",
                        [sys.executable, "-m", "converters", "comm", str(root), "--format", "json"]))
    runs.append(measure("trace2perfetto ops --format csv (per op type and rank)",
                        [sys.executable, "-m", "converters", "ops", str(root), "--format", "csv"]))
    out = BUILD / "report.html"
    runs.append(measure("trace2perfetto report (HTML)",
                        [sys.executable, "-m", "converters", "report", str(root), "-o", str(out)], out))
    runs.append(measure("trace2perfetto memory --format csv (peaks per rank and component)",
                        [sys.executable, "-m", "converters", "memory", str(root), "--format", "csv"]))
    runs.append(measure("trace2perfetto comm --matrix --format csv (every link of every op)",
                        [sys.executable, "-m", "converters", "comm", str(root), "--matrix", "--format",
                         "csv"]))
    return runs


@dataclass
class Measured:
    """What one profile's measurements leave for issue 28's table: its input bytes and runs by key
    (``summary.pftrace20M``, ``detail.pftrace0``, ...; ``vendor load``, ``load detail.pftrace0``)."""

    size: int = 0
    runs: dict[str, Run] = field(default_factory=dict)


LEAN = (("summary", "20M", ".pftrace"), ("detail", "0", ".pftrace"))  # what issue 28's table needs


def bench_profile(name: str, root: Path, peer: bool, measured: Measured | None = None,
                  lean: bool = False) -> list[str]:
    """Every measurement of one profile (``lean``: the floor and ``LEAN``'s conversions only), as
    a table; its runs go to ``measured`` too."""
    size, events = input_stats(root)
    print(f"bench: {name}", file=sys.stderr, flush=True)
    floor = measure("floor: parse every file (orjson.loads, or split text lines)",
                    [sys.executable, "-c", FLOOR, str(root)])
    runs = [floor]
    ours: dict[str, Run] = {}
    every = (("summary", "20M", ".pftrace"), ("detail", "20M", ".pftrace"), ("detail", "0", ".pftrace"),
             ("summary", "0", ".json"), ("detail", "0", ".json"))
    ways = LEAN if lean else every
    for kind, cap, suffix in ways:
        out = BUILD / f"out-{kind}-{cap}{suffix}"
        argv = [sys.executable, "-m", "converters", str(root), "--kind", kind, "--max-size", cap,
                "-o", str(out)]
        capped = "capped 20M" if cap != "0" else "uncapped"
        run = measure(f"trace2perfetto {kind}, {capped}, {suffix[1:]}", argv, out)
        ours[f"{kind}{suffix}{cap}"] = run
        runs.append(run)
    if measured is not None:
        measured.size = size
        measured.runs.update(ours)
    if not lean:
        runs += analyses(root)
    peers: dict[str, Run] = {}
    if peer:
        from bench.peers import run_mindinsight

        for kind in ("summary", "detail"):
            out = BUILD / f"mindinsight-{kind}.json"
            result = run_mindinsight(root, kind, out)
            peers[kind] = Run(f"MindInsight 2.3.1 {kind} (JSON)", result["seconds"],
                              result["peak_rss_mib"], result["output_bytes"], result["cpu_seconds"])
            runs.append(peers[kind])
    rows = [f"\n### {name}\n", f"{size / 1e6:,.0f} MB of input, {events:,} records (events, rows).\n",
            "| run | wall s | CPU s | events/s | MB/s | MB/s per core | peak RSS MiB | output MiB "
            "| x floor |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        rows.append(f"| {r.label} | {r.seconds:.2f} | {r.cpu_seconds:.2f} | {events / r.seconds:,.0f} | "
                    f"{size / 1e6 / r.seconds:,.0f} | {size / 1e6 / r.cpu_seconds:,.0f} | "
                    f"{r.peak_rss_mib:,.0f} | {r.output_bytes / 2**20:,.1f} | "
                    f"{r.seconds / floor.seconds:.2f} |")
    if peers:
        rows.append("")
        for kind in ("summary", "detail"):
            mine, peer = ours[f"{kind}.json0"], peers[kind]
            rows.append(f"- {kind}: MindInsight / trace2perfetto (both JSON, uncapped) = "
                        f"**{peer.cpu_seconds / mine.cpu_seconds:.1f}x** per core (CPU s), "
                        f"{peer.seconds / mine.seconds:.1f}x wall; peak RSS "
                        f"{peer.peak_rss_mib:,.0f} vs {mine.peak_rss_mib:,.0f} MiB")
    return rows


# as the tests find it: $TRACE2PERFETTO_TRACE_PROCESSOR (a worktree's), else shared/tools beside the checkout
TRACE_PROCESSOR = Path(os.environ.get("TRACE2PERFETTO_TRACE_PROCESSOR")
                       or ROOT.parent / "shared" / "tools" / "trace_processor_shell")


def to_loaded_trace(name: str, root: Path, measured: Measured | None = None, lean: bool = False,
                    raw: str = "trace_view.json") -> list[str]:
    """Raw profile to a trace loaded in Perfetto's trace processor (the UI's engine), against
    loading the vendor's own files (``raw``: torch_npu's trace_view.json, one load per rank, as the
    UI would); ``lean``: the uncapped detail .pftrace and .json only. The loads and that conversion
    go to ``measured`` too."""
    if not TRACE_PROCESSOR.exists():
        return [f"\n(no {TRACE_PROCESSOR}: the load comparison is skipped)"]
    query = BUILD / "count.sql"
    query.write_text("select count(*) from slice;\n")

    def load(label: str, trace: Path) -> Run:
        return measure(label, [str(TRACE_PROCESSOR), "-q", str(query), str(trace)])

    vendor = [load("vendor", p) for p in sorted(root.rglob(raw))]
    vendor_s = sum(r.seconds for r in vendor)
    if measured is not None:
        measured.runs["vendor load"] = Run("vendor load", vendor_s, max(r.peak_rss_mib for r in vendor), 0,
                                           sum(r.cpu_seconds for r in vendor))
    rows = [f"\n#### {name}: raw profile to a loaded trace\n",
            "| way | convert s | load s | total s | x vendor |", "|---|---:|---:|---:|---:|",
            f"| trace processor loads each rank's {raw} ({len(vendor)} loads) | - | "
            f"{vendor_s:.2f} | {vendor_s:.2f} | 1.00 |"]
    ways = (("detail", ".pftrace", "0"), ("detail", ".json", "0"), ("detail", ".pftrace", "20M"),
            ("summary", ".pftrace", "0"))
    for kind, suffix, cap in ways[:2] if lean else ways:
        out = BUILD / f"loaded-{kind}-{cap}{suffix}"
        made = measure("convert", [sys.executable, "-m", "converters", str(root), "--kind", kind,
                                   "--max-size", cap, "-o", str(out)], out)
        loaded = load("load", out)
        if measured is not None:
            measured.runs.update({f"convert {kind}{suffix}{cap}": made, f"load {kind}{suffix}{cap}": loaded})
        total = made.seconds + loaded.seconds
        how = f"uncapped {suffix[1:]}" if cap == "0" else f"{suffix[1:]}, the default 20 MiB cap"
        rows.append(f"| trace2perfetto {kind} ({how}), then one load | "
                    f"{made.seconds:.2f} | {loaded.seconds:.2f} | {total:.2f} | {total / vendor_s:.2f} |")
    return rows


STARTS = 10  # runs of each start-up command: their minimum, as the machine's load varies them by up to 2x


def startup() -> tuple[str, float, float]:
    """What ``info`` on a ~200 KB profile costs against starting Python: (the profile, in words;
    both CPU s, the minimum of ``STARTS`` runs each). The real Paddle sample (170 KB) where
    TRACE2PERFETTO_REALDATA is set, else a generated Paddle CPU profile of that size. Bytecode is
    cached as an installed package has it (``INSTALLED``)."""
    real = os.environ.get("TRACE2PERFETTO_REALDATA")
    if real and (Path(real) / "paddle-cpu-chrome").is_dir():
        root, what = Path(real) / "paddle-cpu-chrome", "the real sample paddle-cpu-chrome"
    else:
        root = generated("gen-paddle-cpu-small", _write_small_paddle)
        what = "a generated Paddle CPU profile (TRACE2PERFETTO_REALDATA unset)"

    def least(argv: list[str]) -> float:
        measure("warm-up", argv)  # writes the bytecode
        return min(measure("start", argv).cpu_seconds for _ in range(STARTS))

    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    info = least([sys.executable, "-m", "converters", "info", str(root)])
    return f"{what}, {size / 1e3:,.0f} KB", info, least([sys.executable, "-c", "pass"])


def _write_small_paddle(root: Path) -> None:
    from fixtures.paddle_gen import generate_profile

    generate_profile(root, form="chrome", steps=5, gpu=False, seed=1)


@dataclass
class Target:
    """One row of issue 28's table: what, its figure in this run (None: not measured) and its target."""

    what: str
    figure: float | None
    target: float
    at_least: bool  # a speed (MB/s per core): at least the target; a ratio: at most
    unit: str = "x"  # of an at-most figure: a ratio (x), or MiB

    def row(self) -> str:
        ratio = self.unit == "x"
        at_most = f"{self.target:.1f}x" if ratio else f"{self.target:g}{self.unit}"
        goal = f">= {self.target:g}" if self.at_least else f"<= {at_most}"
        if self.figure is None:
            return f"| {self.what} | - | {goal} | not measured |"
        figure = f"{self.figure:,.0f}" if self.at_least or not ratio else f"{self.figure:.2f}x"
        met = self.figure >= self.target if self.at_least else self.figure <= self.target
        return f"| {self.what} | {figure} | {goal} | {'met' if met else 'not met'} |"


def torch_npu_targets(name: str, measured: Measured) -> list[Target]:
    """The torch_npu rows of issue 28's table for one profile, in CPU seconds."""
    runs, mb = measured.runs, measured.size / 1e6
    detail, summary = (mb / runs[key].cpu_seconds for key in ("detail.pftrace0", "summary.pftrace20M"))
    return [
        Target(f"torch_npu detail, MB/s per core ({name})", detail, 120, True),
        Target(f"torch_npu summary, MB/s per core ({name})", summary, 300, True),
        *(row for suffix in (".pftrace", ".json") for row in _load_targets(name, runs, suffix)),
    ]


def _load_targets(name: str, runs: dict[str, Run], suffix: str) -> list[Target]:
    """The trace processor's rows for our uncapped detail trace written as ``suffix`` (None
    without the trace processor): the .json rows say what a user who wants the fastest load gets."""
    vendor, loaded, made = (runs.get(key) for key in ("vendor load", f"load detail{suffix}0",
                                                      f"convert detail{suffix}0"))
    loads = vendor is not None and loaded is not None and made is not None
    return [
        Target(f"trace processor's CPU loading our detail {suffix} / loading the vendor's JSON ({name})",
               loaded.cpu_seconds / vendor.cpu_seconds if loads else None, 1.0, False),
        Target(f"raw profile to a loaded trace (our conversion to {suffix} + load) / the vendor's load "
               f"({name})",
               (made.cpu_seconds + loaded.cpu_seconds) / vendor.cpu_seconds if loads else None, 2.0, False),
    ]


def targets_table(targets: list[Target], title: str = "Issue 28 targets") -> list[str]:
    """Issue 28's table (or ``title``'s), each row with its target and whether this run met it."""
    return [f"\n### {title}\n",
            "CPU seconds (user + system of each process and the workers it waited for), this run's "
            "measurements above; the trace processor's rows need its binary (TRACE_PROCESSOR).\n",
            "| what | this run | target | |", "|---|---:|---:|---|", *(t.row() for t in targets)]


HTA = ("import sys, time\n"
       "from hta.trace_analysis import TraceAnalysis\n"
       "started = time.perf_counter()\n"
       "analysis = TraceAnalysis(trace_dir=sys.argv[1])\n"
       "loaded = time.perf_counter()\n"
       "analysis.get_comm_comp_overlap(visualize=False)\n"
       "analysis.get_temporal_breakdown(visualize=False)\n"
       "print(loaded - started, time.perf_counter() - loaded)\n")


def against_hta(name: str, root: Path) -> list[str]:
    """Holistic Trace Analysis (the reference tool for Kineto traces, a test extra of ours) on the
    same traces: loading them and its overlap and time breakdown, against our ``overlap``."""
    try:
        import hta  # noqa: F401
    except ImportError:
        return ["\n(HolisticTraceAnalysis is not installed: the comparison with it is skipped)"]
    theirs = measure("HTA: TraceAnalysis load + get_comm_comp_overlap + get_temporal_breakdown",
                     [sys.executable, "-c", HTA, str(root)])
    ours = measure("trace2perfetto overlap (the same figures per step)",
                   [sys.executable, "-m", "converters", "overlap", str(root), "--format", "csv"])
    rows = [f"\n#### {name}: against Holistic Trace Analysis\n",
            "| run | wall s | CPU s | peak RSS MiB |", "|---|---:|---:|---:|"]
    rows += [f"| {r.label} | {r.seconds:.2f} | {r.cpu_seconds:.2f} | {r.peak_rss_mib:,.0f} |"
             for r in (theirs, ours)]
    rows.append(f"\n- HTA / trace2perfetto overlap: **{theirs.cpu_seconds / ours.cpu_seconds:.1f}x** per "
                f"core (CPU s), {theirs.seconds / ours.seconds:.1f}x wall, peak RSS "
                f"{theirs.peak_rss_mib:,.0f} vs {ours.peak_rss_mib:,.0f} MiB")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the ~100 MB profiles")
    parser.add_argument("--no-peer", action="store_true", help="skip MindInsight")
    parser.add_argument("--no-write", action="store_true", help="print, do not update BENCHMARKS.md")
    parser.add_argument("--only", choices=("issue28", "real"),
                        help="issue28: only what the table of issue 28's targets needs; real: only the real-"
                             "shape Chrome traces (bench/real_traces.py) and issue 44's table (printed only)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run each measured command N times and keep the one of least CPU s (default 1)")
    args = parser.parse_args(argv)
    global REPEATS
    REPEATS = max(1, args.repeat)
    lean = args.only is not None
    BUILD.mkdir(parents=True, exist_ok=True)
    compile_package()
    started = time.perf_counter()
    lines: list[str] = [] if lean else everything_else(args.quick, args.no_peer)
    database: list[Target] = []
    for name, slug, write, options in _database_plan(args.quick) if args.only != "real" else ():
        root = generated(slug, write, **options)
        measured = Measured()
        lines += bench_profile(name, root, False, measured, lean)
        per_core = measured.size / 1e6 / measured.runs["detail.pftrace0"].cpu_seconds
        database.append(Target(f"database form (`ascend_pytorch_profiler_N.db`) detail, MB/s per core "
                               f"({name})", per_core, 40, True))
    torch_npu: list[list[Target]] = []
    for name, options in _torch_npu_plan(args.quick) if args.only != "real" else ():
        slug = f"gen-torch-npu-{options['ranks']}x{options['steps']}"
        root = generated(slug, _write_torch_npu, **options)
        measured = Measured()
        lines += bench_profile(name, root, False, measured, lean)
        lines += to_loaded_trace(name, root, measured, lean)
        torch_npu.append(torch_npu_targets(name, measured))
    if not lean:
        lines += after_torch_npu(args.quick, args.no_peer)
    profile, info, python = startup()
    started_up = Target(f"`info` on {profile} / starting Python (`python -c pass`): {info:.3f} / "
                        f"{python:.3f} CPU s, the least of {STARTS} runs each", info / python, 4.0, False)
    real, real_lines = real_shapes(args.quick)
    # in the order: each torch_npu figure for every profile, then the database form, the start-up
    by_figure = [t for rows in zip(*torch_npu, strict=True) for t in rows]
    if args.only != "real":
        lines += targets_table([*by_figure, *database, started_up])
    lines += real_lines + targets_table([*real, started_up], "Issue 44 targets: real shapes")
    only = f" --only {args.only}" if lean else ""
    command = (f"python -m bench.run{' --quick' if args.quick else ''}{only}"
               f"{f' --repeat {REPEATS}' if REPEATS > 1 else ''}")
    header = [
        f"Command: `make bench` (`{command}`), "
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; "
        f"took {time.perf_counter() - started:.0f} s.",
    ]
    text = "\n".join(header + lines)
    print(text)
    if not args.no_write and not lean:
        path = ROOT / "BENCHMARKS.md"
        old = path.read_text() if path.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
        before, _, rest = old.partition(BEGIN)
        _, _, after = rest.partition(END)
        path.write_text(f"{before}{BEGIN}\n{text}\n{END}{after}")


def real_shapes(quick: bool) -> tuple[list[Target], list[str]]:
    """Issue 44's rows and the tables behind them: Chrome traces tiled from real samples
    (``bench/real_traces.py``; none without TRACE2PERFETTO_REALDATA), their summary and uncapped
    detail, and the raw file to a loaded trace, against the trace processor loading the raw file."""
    if not (real := os.environ.get("TRACE2PERFETTO_REALDATA")):
        return [], ["\n(TRACE2PERFETTO_REALDATA unset: the real-shape traces are skipped)"]
    targets, lines = [], []
    for name, write, mb, raw, (detail, summary) in _real_plan(quick):
        slug = f"real-{write.__name__.removeprefix('write_')}-{mb}"
        root = generated(slug, lambda r, w=write, b=mb: w(r, Path(real), b * 1_000_000))
        measured = Measured()
        lines += bench_profile(name, root, False, measured, lean=True)
        lines += to_loaded_trace(name, root, measured, lean=True, raw=raw)
        runs, size = measured.runs, measured.size / 1e6
        if detail is None:  # no target of its own (Paddle): its figures are in its tables
            continue
        targets += [Target(f"{what}, MB/s per core ({name})", size / runs[key].cpu_seconds, goal, True)
                    for what, key, goal in (("detail", "detail.pftrace0", detail),
                                            ("summary", "summary.pftrace20M", summary))]
        targets += [t for suffix in (".json", ".pftrace") for t in _load_targets(name, runs, suffix)
                    if t.what.startswith("raw")]
        targets.append(Target(f"peak RSS of our conversions ({name})",
                              max(r.peak_rss_mib for k, r in runs.items() if "load" not in k), 300,
                              False, " MiB"))
    return targets, lines


def _real_plan(quick: bool) -> list[tuple[str, object, int, str, tuple[int | None, int | None]]]:
    """(name, writer of ``bench/real_traces.py``, MB, the raw file's name, the targets (detail,
    summary MB/s per core)) of each real-shape trace; ``quick``: ~100 MB each."""
    from bench import real_traces as rt

    kineto, serving, torch_npu, paddle = (100, 50, 100, 50) if quick else (1000, 300, 500, 200)
    return [
        (f"~{torch_npu} MB, torch_npu trace_view.json tiled from {rt.TORCH_NPU} rank 0 (1 rank)",
         rt.write_torch_npu, torch_npu, "trace_view.json", (120, 300)),
        (f"~{kineto} MB, Kineto trace tiled from {rt.KINETO} (1 rank)", rt.write_kineto, kineto,
         "*.pt.trace.json", (100, 250)),
        (f"~{serving} MB, Kineto serving trace tiled from {rt.KINETO_SERVING} (1 rank, no step, no metadata)",
         rt.write_kineto_serving, serving, "*.pt.trace.json", (100, 250)),
        (f"~{paddle} MB, Paddle chrome export tiled from {rt.PADDLE} (1 rank)", rt.write_paddle, paddle,
         "*.paddle_trace.json", (None, None)),
    ]


def everything_else(quick: bool, no_peer: bool) -> list[str]:
    """The profiles measured before the database and torch_npu ones: MindSpore 2.x and CANN
    layouts (MindInsight beside them), MindSpore 1.x folders."""
    common = dict(ranks=8, graphs=(2, 4), tasks_per_step=700, seed=1)
    plan = [
        ("~100 MB, MindSpore 2.0-2.2 timeline layout (8 ranks, 2 graphs, 10 steps)",
         dict(steps=10, layout="timeline"), True),
        ("~100 MB, CANN 7/8 msprof_*.json layout (8 ranks, 2 graphs, 18 steps)",
         dict(steps=18, layout="cann8"), True),
    ]
    if not quick:
        plan += [
            ("~1 GB, CANN 7/8 msprof_*.json layout (8 ranks, 2 graphs, 180 steps)",
             dict(steps=180, layout="cann8"), True),
            ("~2 GB, MindSpore 2.0-2.2 timeline layout (8 ranks, 2 graphs, 140 steps)",
             dict(steps=140, layout="timeline"), False),
        ]
    lines = []
    for name, options, peer in plan:
        slug = re.sub(r"\W+", "-", name.split(",")[0] + "-" + options["layout"]).strip("-")
        root = generated(f"gen-{slug}-{options['steps']}", **common, **options)
        lines += bench_profile(name, root, peer and not no_peer)
    for name, options in _legacy_plan(quick):
        root = generated(f"gen-mindspore1x-{options['steps']}", _write_legacy, **options)
        lines += bench_profile(name, root, False)
    return lines


def after_torch_npu(quick: bool, no_peer: bool) -> list[str]:
    """The profiles measured after the torch_npu ones: Kineto (HTA beside it), Paddle, the scaling
    to many ranks, the real msprof sample."""
    lines = []
    for name, options in _kineto_plan(quick):
        slug = f"gen-kineto-{options['ranks']}x{options['target_mb']}-memory"  # [memory] events in them
        root = generated(slug, _write_kineto, **options)
        lines += bench_profile(name, root, False)
        lines += against_hta(name, root)
    for name, options in _paddle_plan(quick):
        root = generated(f"gen-paddle-{options['form']}-{options['target_mb']}", _write_paddle, **options)
        lines += bench_profile(name, root, False)
    lines += scaling(quick)
    real = ROOT.parent / "shared" / "data" / "real" / "msprof-2rank"
    if real.is_dir():
        lines += bench_profile("real sample msprof-2rank", real, not no_peer)
    return lines


def _legacy_plan(quick: bool) -> list[tuple[str, dict]]:
    """MindSpore 1.x folders (no peer: MindSpore 1.x converted them in-process, and its wheels
    need Python <= 3.9), with host_info of every rank (MindSpore 2.1+ writes it; here it shows
    the host reader at size too)."""
    common = dict(ranks=8, ops_per_step=3000, streams=3, comm_ops=4, planes=4, seed=1)
    plan = [("~100 MB, MindSpore 1.x profiler folder + host_info (8 ranks, 12 steps)",
             dict(common, steps=12))]
    if not quick:
        plan.append(("~1 GB, MindSpore 1.x profiler folder + host_info (8 ranks, 120 steps)",
                     dict(common, steps=120)))
    return plan


def _database_plan(quick: bool) -> list[tuple[str, str, object, dict]]:
    """torch_npu's database form (no peer: MindInsight reads no database): (name, folder under
    build/bench, writer, its options). Generated, and with TRACE2PERFETTO_REALDATA set, at a real
    job's shape (``bench/real_db.py``: the generated one has device tasks only, 2-3x denser)."""
    plan = [("~100 MB, torch_npu database form (8 ranks, 8 steps of 10,000 tasks)", "gen-database-8",
             _write_databases, dict(steps=8))]
    if real := os.environ.get("TRACE2PERFETTO_REALDATA"):
        plan.append(("~95 MB, torch_npu database form at a real job's shape (8 ranks: ascend-pt-db's "
                     "two tiled 20 times)", "real-database-8x20", _write_tiled_databases,
                     dict(real=Path(real), tiles=20)))
    if not quick:
        plan.append(("~500 MB, torch_npu database form (8 ranks, 46 steps of 10,000 tasks)",
                     "gen-database-46", _write_databases, dict(steps=46)))
    return plan


def _torch_npu_plan(quick: bool) -> list[tuple[str, dict]]:
    """torch_npu's text form (trace_view.json; no peer: MindInsight reads none), ~100 MB per rank
    for 8 ranks, and one rank of ~1 GB."""
    plan = [("~100 MB per rank, torch_npu trace_view.json (8 ranks, 27 steps)", dict(ranks=8, steps=27))]
    if not quick:
        plan.append(("~1 GB, torch_npu trace_view.json (1 rank, 270 steps)", dict(ranks=1, steps=270)))
    return plan


def _kineto_plan(quick: bool) -> list[tuple[str, dict]]:
    """PyTorch's profiler on GPUs (NCCL, 8 ranks), HTA beside it."""
    plan = [("~100 MB, PyTorch Kineto GPU traces (8 ranks x 12 MB)", dict(ranks=8, target_mb=12))]
    if not quick:
        plan.append(("~1 GB, PyTorch Kineto GPU traces (8 ranks x 125 MB)", dict(ranks=8, target_mb=125)))
    return plan


def _write_kineto(root: Path, ranks: int, target_mb: int) -> None:
    from fixtures.kineto_gen import write_kineto_traces

    write_kineto_traces(root, ranks=ranks, steps=1, target_mb=target_mb, seed=1, memory_events=True)


def _paddle_plan(quick: bool) -> list[tuple[str, dict]]:
    """Paddle's profiler on GPUs (2 ranks), both exports (no peer: Paddle's own tools only print
    its summary)."""
    if quick:
        return []
    return [("~200 MB, Paddle GPU chrome export (2 ranks x 100 MB)", dict(form="chrome", target_mb=100)),
            ("~100 MB, Paddle GPU protobuf export (2 ranks x 50 MB)", dict(form="protobuf", target_mb=50))]


def _write_paddle(root: Path, form: str, target_mb: int) -> None:
    from fixtures.paddle_gen import generate_profile

    generate_profile(root, form=form, steps=2, target_mb=target_mb, gpu=True, ranks=2, seed=1)


def _write_torch_npu(root: Path, ranks: int, steps: int) -> None:
    from fixtures.ascend_pt_gen import write_ascend_pt_profile

    write_ascend_pt_profile(root, ranks=ranks, steps=steps, tasks_per_step=1000, planes=8, seed=1,
                            with_kernel_details=False)


def _write_databases(root: Path, steps: int) -> None:
    from fixtures.ascend_db_gen import write_ascend_db

    for rank in range(8):
        folder = root / f"rank{rank}_ascend_pt"
        write_ascend_db(folder / "ASCEND_PROFILER_OUTPUT", rank=rank, steps=steps, tasks_per_step=10_000,
                        planes=8, seed=rank)
        (folder / f"profiler_info_{rank}.json").write_text(f'{{"rank_id": {rank}}}')


def _write_tiled_databases(root: Path, real: Path, tiles: int) -> None:
    from bench.real_db import write_tiled_databases

    write_tiled_databases(root, real, ranks=8, tiles=tiles)


def _write_legacy(root: Path, **options) -> None:
    from fixtures.host_info_gen import write_host_info
    from fixtures.mindspore1x_gen import write_mindspore1x_profile

    profile = write_mindspore1x_profile(root, **options)
    for rank in profile.ranks:  # host stages over the same wall-clock span as the device steps
        (step, start, _), (_, _, end) = rank.step_bounds_ns[0], rank.step_bounds_ns[-1]
        write_host_info(root, rank=rank.rank, start_ns=start + rank.epoch_offset_ns,
                        steps=options["steps"] * 20, seed=step, truth=False,
                        step_ns=max((end - start) // (options["steps"] * 20), 1_000_000))



_DRIVER = (  # the command, then its own peak RSS (the driver alone: pool workers are its children);
    # VmHWM, as ru_maxrss keeps the peak of the process it was forked from
    "import re, sys\n"
    "from converters.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "peak = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)\n"
    "print(f'driver {peak}', file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _driven(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, the driver's own peak RSS in MiB) of ``trace2perfetto argv``."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _DRIVER, *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=True)
    seconds = time.perf_counter() - started
    return seconds, int(re.search(r"driver (\d+)", done.stderr).group(1)) / 1024


def scaling(quick: bool) -> list[str]:
    """512 generated ranks: the local process pool against 1, 2 and 4 Dask workers (``dask
    scheduler`` and ``dask worker`` processes on 127.0.0.1, one thread each), summary and overlap."""
    from fixtures.many_ranks import write_many_ranks

    ranks = 128 if quick else 512
    root = generated(f"gen-many-{ranks}", lambda r, **o: write_many_ranks(r / "job", **o), ranks=ranks,
                     steps=4, tasks_per_step=300) / "job"
    size, events = input_stats(root)
    out = str(BUILD / "many.pftrace")
    commands = {"summary": [str(root), "--kind", "summary", "--max-size", "0", "-o", out],
                "overlap": ["overlap", str(root), "--format", "csv"]}
    rows = [f"\n### Scaling: {ranks} generated ranks (torch_npu, {size / 1e6:,.0f} MB as read, "
            f"{events:,} events)\n",
            "| where the ranks' work runs | summary wall s | overlap wall s | driver peak RSS MiB |",
            "|---|---:|---:|---:|"]
    local = {name: _driven(argv) for name, argv in commands.items()}
    rows.append(f"| this machine's process pool ({os.cpu_count()} workers) | {local['summary'][0]:.1f} | "
                f"{local['overlap'][0]:.1f} | {max(v[1] for v in local.values()):.0f} |")
    dask = Path(sys.executable).parent / "dask"
    for workers in (1, 2, 4):
        port = 18786 + workers
        scheduler = subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                      "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        worker = subprocess.Popen([str(dask), "worker", f"tcp://127.0.0.1:{port}", "--nworkers", str(workers),
                                   "--nthreads", "1", "--no-dashboard"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            from distributed import Client

            with Client(f"tcp://127.0.0.1:{port}", timeout="30s") as client:
                client.wait_for_workers(workers, timeout=60)
            runs = {name: _driven([*argv, "--cluster", f"tcp://127.0.0.1:{port}"])
                    for name, argv in commands.items()}
        finally:
            for process in (worker, scheduler):
                process.terminate()
                process.wait(30)
        label = f"Dask, {workers} worker process{'es' if workers > 1 else ''}"
        rows.append(f"| {label} | {runs['summary'][0]:.1f} | {runs['overlap'][0]:.1f} | "
                    f"{max(v[1] for v in runs.values()):.0f} |")
    return rows


if __name__ == "__main__":
    main()
