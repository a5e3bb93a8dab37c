"""How ``trace2perfetto comm`` prints its tables: the ops (streamed step by step as ``comm_report``
hands them over), the slow-rank table, each in table, CSV or JSON form (``schemas/comm.schema.json``),
and the link matrix (``schemas/comm_matrix.schema.json``)."""

from __future__ import annotations

import csv
import sys

import orjson

from ..communication import TRANSPORTS, OpComm
from ..model import step_label
from ..select import format_ids
from . import comm_matrix as matrix
from .render import Rows, cell, clock_records, ms, print_clocks, print_table


def op_record(op: OpComm) -> dict:
    """One op as the JSON and CSV print it: communication.json's figures, in ms, with its instance's."""
    record = {
        "Rank": op.rank, "Graph": op.graph, "Step": op.step, "Group": op.group, "Op": op.name,
        "Start Timestamp(us)": op.start_ns / 1000, "Elapse Time(ms)": ms(op.elapse_ns),
        "Transit Time(ms)": ms(op.transit_ns), "Wait Time(ms)": ms(op.wait_ns),
        "Synchronization Time(ms)": ms(op.sync_ns), "Idle Time(ms)": ms(op.idle_ns),
        "Wait Time Ratio": op.wait_ratio, "Synchronization Time Ratio": op.sync_ratio,
        "Ranks": op.ranks, "Arrival Skew(ms)": ms(op.skew_ns), "Last Rank": op.last_rank,
        "Wait For Last Rank(ms)": ms(op.wait_for_last_ns),
    }
    if op.figures_from is not None:  # the plane tasks' figures say nothing: their source is the rule
        record["Figures From"] = op.figures_from
    record["Bandwidth"] = {
        name: {"Transit Size(MB)": t.size_bytes / 1e6, "Transit Time(ms)": ms(t.time_ns),
               "Bandwidth(GB/s)": t.gb_per_s, "Large Packet Ratio": t.large_packet_ratio(name),
               "Size Distribution": {str(size / 1e6): [count, ms(ns)]
                                     for size, (count, ns) in t.sizes.items()}}
        for name, t in op.transports.items()
    }
    return record


def figures_sources(ops: list[OpComm]) -> dict[str, list[int]]:
    """Where the ops' figures come from other than their plane tasks, and the ranks of each."""
    found: dict[str, set[int]] = {}
    for op in ops:
        if op.figures_from is not None:
            found.setdefault(op.figures_from, set()).add(op.rank)
    return {source: sorted(ranks) for source, ranks in found.items()}


_BANDWIDTH_FIELDS = ("Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)")


class OpsStream:
    """Writes the ops as ``comm_report`` hands them over, step by step: CSV rows (a column set for
    every transport, so the header is known first), or the JSON document's ``ops`` array."""

    def __init__(self, fmt: str) -> None:
        self.fmt, self.count = fmt, 0
        columns = [k for k in op_record(OpComm(0, None, None, "", "", 0, 0)) if k != "Bandwidth"]
        columns += [f"{name} {field}" for name in (*TRANSPORTS, "NCCL") for field in _BANDWIDTH_FIELDS]
        self.writer = csv.DictWriter(sys.stdout, columns, lineterminator="\n") if fmt == "csv" else None

    def __call__(self, ops: list) -> None:
        for op in ops:
            record = op_record(op)
            if self.writer is not None:
                if not self.count:
                    self.writer.writeheader()
                bandwidth = record.pop("Bandwidth")
                record.pop("Figures From", None)  # said on stderr (the CSV's columns are fixed)
                self.writer.writerow({**record, **{f"{name} {field}": figures.get(field)
                                                   for name, figures in bandwidth.items()
                                                   for field in _BANDWIDTH_FIELDS}})
            else:
                start = '{"ops": [\n  ' if not self.count else ",\n  "
                sys.stdout.write(start + orjson.dumps(record).decode())
            self.count += 1

    def close(self, report) -> None:
        if self.writer is not None:
            if not self.count:
                self.writer.writeheader()
            return
        tail = {"collectives": report.instances, "aligned": report.aligned,
                "clocks": clock_records(report.clocks)}
        rest = orjson.dumps(tail).decode()[1:]  # the document's other keys, after its ops
        sys.stdout.write(('{"ops": [],' if not self.count else "\n],") + rest + "\n")


def print_ops_table(report) -> None:
    records = [op_record(op) for op in report.ops]
    header = ["Rank", "Step", "Op", "Elapse", "Transit", "Wait", "Sync", "Idle", "Skew", "Last", "Waited",
              "Bandwidth (GB/s)"]
    rows = [header]
    for op, r in zip(report.ops, records, strict=True):
        links = [name for name, t in op.transports.items() if t.time_ns and name != "SDMA"]  # SDMA: their sum
        links = links or [name for name, t in op.transports.items() if t.time_ns]
        bandwidth = ", ".join(f"{name} {op.transports[name].gb_per_s:g}" for name in links) or "-"
        rows.append([str(op.rank), cell(op.step), op.name] + [
            "-" if r[k] is None else f"{r[k]:.3f}" for k in (
                "Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)",
                "Idle Time(ms)", "Arrival Skew(ms)")
        ] + [cell(op.last_rank), "-" if op.wait_for_last_ns is None else f"{op.wait_for_last_ns / 1e6:.3f}",
             bandwidth])
    print_table(rows)
    print(f"(ms; {report.instances} collectives matched across ranks; Skew: last arrival - first; "
          "Waited: this rank's wait for the last; - : not known from this input)")
    for source, ranks in figures_sources(report.ops).items():
        print(f"Transit, Wait, Sync, Idle and bandwidth of rank {format_ids(ranks)}: {source}, "
              "no plane tasks")
    print_clocks(report.clocks, report.aligned)


def print_slow_ranks(report, fmt: str) -> None:
    ranks = [{"Rank": r.rank, "Host": r.host, "Steps": r.steps, "Wait Caused(ms)": ms(r.wait_caused_ns),
              "Wait Suffered(ms)": ms(r.wait_suffered_ns), "Last Arrivals": r.last_arrivals,
              "Mean Step(ms)": ms(r.mean_step_ns), "Mean Computing(ms)": ms(r.mean_computing_ns),
              "Mean Communication(ms)": ms(r.mean_communication_ns)} for r in report.slow_ranks]
    steps = [{"Rank": t.rank, "Graph": t.graph, "Step": t.step, "Step Time(ms)": ms(t.step_ns),
              "Computing(ms)": ms(t.computing_ns), "Communication(ms)": ms(t.communication_ns),
              "Wait Suffered(ms)": ms(t.wait_suffered_ns), "Wait Caused(ms)": ms(t.wait_caused_ns)}
             for t in report.steps]
    spread = [{"Graph": s.graph, "Step": s.step, "Ranks": s.ranks, "Fastest(ms)": ms(s.min_ns),
               "Slowest(ms)": ms(s.max_ns), "Slowest Rank": s.slowest_rank} for s in report.spread]
    if fmt == "json":
        document = {"slow_ranks": ranks, "steps": steps, "spread": spread, "aligned": report.aligned,
                    "clocks": clock_records(report.clocks)}
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if fmt == "csv":
        writer = csv.DictWriter(sys.stdout, list(ranks[0]) if ranks else ["Rank"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(ranks)
        return
    header = list(ranks[0]) if ranks else ["Rank"]
    print_table([header] + [[cell(v) for v in r.values()] for r in ranks])
    print("(ms; Wait Caused, Wait Suffered and Last Arrivals: totals over the kept steps; Mean: per step; "
          "ranks ordered by the wait they caused the others in collectives)")
    for s in spread:
        label = "step -" if s["Step"] is None else step_label(s["Graph"], s["Step"]).lower()
        print(f"{label}: step time {s['Fastest(ms)']:.3f}-{s['Slowest(ms)']:.3f} ms across "
              f"{s['Ranks']} ranks, slowest rank {s['Slowest Rank']}")
    print_clocks(report.clocks, report.aligned)


class MatrixPrinter:
    """``comm --matrix`` on stdout: the rows stream out rank by rank as ``comm_matrix`` hands them
    over (``add``: CSV rows, table rows, the JSON document's ``matrix`` array), the slowest links
    after them (``close``: the JSON's other keys, the table's footer)."""

    def __init__(self, fmt: str) -> None:
        self.json = fmt == "json"
        self.fmt = fmt
        self.written = 0
        self.rows = Rows("csv" if fmt == "csv" else "table", list(matrix.COLUMNS),
                         "(MB = 10^6 bytes; top1: the op with the highest bandwidth on the link, middle, "
                         "bottom1-3: the lowest; total: all the ops of the type)")

    def add(self, found: list) -> None:
        if not self.json:
            self.rows.add(map(matrix.record, found))
            return
        for row in found:
            record = orjson.dumps(matrix.json_record(row)).decode()
            sys.stdout.write(('{"matrix": [\n  ' if not self.written else ",\n  ") + record)
            self.written += 1

    def close(self, report: matrix.MatrixReport) -> None:
        slowest = [matrix.slow_record(link) for link in report.slowest]
        if self.json:
            tail = {"slowest_links": slowest, "plane_tasks": report.plane_tasks}
            if report.from_profiler:  # ranks without plane tasks: their profiler's matrix, as written
                tail["from_profiler"] = {str(rank): source for rank, source in report.from_profiler.items()}
            tail = orjson.dumps(tail).decode()[1:]
            sys.stdout.write(("\n]," if self.written else '{"matrix": [],') + tail + "\n")
            return
        by_source: dict[str, list[int]] = {}
        for rank, source in report.from_profiler.items():
            by_source.setdefault(source, []).append(rank)
        self.rows.note += "".join(f"\nrank {format_ids(ranks)}: no plane tasks; the rows of the profiler's "
                                  f"own {source}, as written" for source, ranks in by_source.items())
        self.rows.close()
        if self.fmt == "table" and slowest:
            print("slowest links (bandwidth against the median of their transport's links, over the kept "
                  "steps):")
            print_table([list(slowest[0])] + [[cell(v) for v in link.values()] for link in slowest[:5]])
