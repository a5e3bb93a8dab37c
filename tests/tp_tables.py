"""What Perfetto's trace processor imports from a trace, as comparable text: two encodings of one
content (interned or inline strings, absolute or incremental timestamps, explicit or default
tracks, any packet sequences) must give the same tables.

``tables(trace, workdir)`` returns, per table, sorted lines: every slice (its track's name and the
names of the two tracks above it, its thread's and process's names, ts, dur, name, category,
depth and its args flattened, key=type:value), every flow (the slices it joins, by the same
description), every counter value (track names, ts, value), thread and process names, and the
stats rows of severity error or data_loss. Track ids, uuids and arg set ids are left out: they
number things, they are not what the trace says.

``plain(data)`` re-encodes a trace with nothing left to sequence state: every name and string
written where it is used (interned ids resolved per sequence, since its last clear), no interned
data, no sequence flags. Our encoding and its plain form must import the same.

As a script, it compares two traces (e.g. main's and a branch's output of one input) and exits 1
with the first differences when they import differently:

    .venv/bin/python tests/tp_tables.py before.pftrace after.pftrace
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Names are written as hex: the shell's CSV does not quote what they hold. One row per line.
_SLICE_KEY = """
  hex(coalesce(t1.name, '')) || '/' || hex(coalesce(t2.name, '')) || '/' || hex(coalesce(t3.name, ''))
  || '/' || hex(coalesce(th.name, '')) || '/' || hex(coalesce(p.name, ''))
  || ' ' || s.ts || ' ' || s.dur || ' ' || hex(s.name) || ' ' || hex(coalesce(s.category, ''))
  || ' ' || s.depth
"""
_QUERIES = {
    "slice": f"""
create perfetto table keyed as
select s.id, {_SLICE_KEY} as key, s.arg_set_id from slice s
  join track t1 on t1.id = s.track_id left join track t2 on t2.id = t1.parent_id
  left join track t3 on t3.id = t2.parent_id
  left join thread_track tt on tt.id = s.track_id left join thread th using (utid)
  left join process_track pt on pt.id = s.track_id
  left join process p on p.upid = coalesce(th.upid, pt.upid);
create perfetto table flat_args as
select arg_set_id, group_concat(item, ';') as items from (
    select arg_set_id, hex(key) || '=' || value_type || ':' || hex(coalesce(display_value, '')) as item
    from args order by arg_set_id, key, id)
  group by arg_set_id;
select k.key || ' ' || coalesce(a.items, '') as line
  from keyed k left join flat_args a using (arg_set_id);""",
    "flow": """
select o.key || ' -> ' || i.key as line from flow f join keyed o on o.id = f.slice_out
  join keyed i on i.id = f.slice_in;""",
    "counter": """
select hex(coalesce(t1.name, '')) || '/' || hex(coalesce(t2.name, '')) || ' ' || c.ts || ' ' || c.value
    as line
  from counter c join track t1 on t1.id = c.track_id left join track t2 on t2.id = t1.parent_id;""",
    "names": """
select 'thread ' || hex(coalesce(name, '')) as line from thread
union all select 'process ' || hex(coalesce(name, '')) from process;""",
    "stats": """
select name || ' ' || coalesce(idx, '') || ' ' || severity || ' ' || value as line from stats
  where severity in ('error', 'data_loss') and value > 0;""",
}


def trace_processor() -> Path:
    """$TRACE2PERFETTO_TRACE_PROCESSOR, else shared/tools beside this checkout."""
    given = os.environ.get("TRACE2PERFETTO_TRACE_PROCESSOR")
    default = Path(__file__).resolve().parents[2] / "shared/tools/trace_processor_shell"
    return Path(given) if given else default


def tables(trace: Path, workdir: Path) -> dict[str, list[str]]:
    """The tables the trace processor imports from ``trace``, each as sorted lines (see above)."""
    query = workdir / "tp_tables.sql"
    query.write_text("\n".join(_QUERIES.values()) + "\n")
    done = subprocess.run([str(trace_processor()), "-q", str(query), str(trace)], capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"trace processor failed on {trace}: {done.stderr[-2000:]}")
    results = done.stdout.rstrip("\n").split("\n\n")
    if len(results) < len(_QUERIES):  # a result that has no row prints its header only
        raise RuntimeError(f"expected {len(_QUERIES)} results from {trace}, got {len(results)}")
    found = {}
    for name, result in zip(_QUERIES, results[-len(_QUERIES):], strict=True):
        lines = result.split("\n")[1:]  # the header
        found[name] = sorted(line.strip('"') for line in lines if line)
    return found


# InternedData field -> what refers to its entries: (message kind, iid field, inline field)
_REFERENCES = {
    "event_names": ("event", "name_iid", "name"),
    "debug_annotation_names": ("annotation", "name_iid", "name"),
    "debug_annotation_string_values": ("annotation", "string_value_iid", "string_value"),
}
_CLEARED = 1  # TracePacket.SEQ_INCREMENTAL_STATE_CLEARED


def plain(data: bytes) -> bytes:
    """``data`` (a Perfetto trace) with every interned reference replaced by its string."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace.FromString(data)
    interned: dict[int, dict[str, dict[int, str]]] = {}
    for packet in trace.packet:
        sequence = packet.trusted_packet_sequence_id
        if packet.sequence_flags & _CLEARED or sequence not in interned:
            interned[sequence] = {table: {} for table in _REFERENCES}
        tables = interned[sequence]
        for table in _REFERENCES:
            for entry in getattr(packet.interned_data, table):
                tables[table][entry.iid] = entry.str.decode() if table.endswith("values") else entry.name
        packet.ClearField("interned_data")
        packet.ClearField("sequence_flags")
        if packet.HasField("track_event"):
            _inline(packet.track_event, "event", tables)
            for annotation in packet.track_event.debug_annotations:
                _inline(annotation, "annotation", tables)
    return trace.SerializeToString()


def _inline(message, kind: str, tables: dict[str, dict[int, str]]) -> None:
    """Write the strings ``message`` (a TrackEvent or a DebugAnnotation) refers to in its own fields."""
    for table, (refers, iid_field, inline_field) in _REFERENCES.items():
        if refers == kind and message.HasField(iid_field):
            setattr(message, inline_field, tables[table][getattr(message, iid_field)])
            message.ClearField(iid_field)


def differences(before: dict[str, list[str]], after: dict[str, list[str]], shown: int = 5) -> list[str]:
    """What differs between two ``tables`` results, a few lines per table; empty when the same."""
    said = []
    for name in before:
        gone = sorted(set(before[name]) - set(after[name]))
        added = sorted(set(after[name]) - set(before[name]))
        if gone or added or len(before[name]) != len(after[name]):
            said.append(f"{name}: {len(before[name])} rows before, {len(after[name])} after")
            said += [f"  - {line}" for line in gone[:shown]] + [f"  + {line}" for line in added[:shown]]
    return said


def main(argv: list[str]) -> int:
    import tempfile

    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as workdir:
        before, after = (tables(Path(path), Path(workdir)) for path in argv)
    said = differences(before, after)
    counts = ", ".join(f"{len(rows):,} {name}" for name, rows in before.items())
    print("\n".join(said) if said else f"same import: {counts}")
    return 1 if said else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
