"""Records filed by step on disk, so a reader of one big file holds one step at a time."""

from __future__ import annotations

import pickle
import tempfile
from collections import defaultdict
from collections.abc import Hashable

from ..model import FlowEnd, Layer, Sample, Slice


class StepSpill:
    """Slices filed by step (any key) in a temporary file; memory keeps only where each lies."""

    _LAYERS = list(Layer)

    def __enter__(self) -> StepSpill:
        self._file = tempfile.TemporaryFile(prefix="trace2perfetto-spill-")
        self._segments: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
        self._end = 0
        return self

    def __exit__(self, *_: object) -> None:
        self._file.close()

    def add(self, index: Hashable, records: list[Slice | Sample | FlowEnd]) -> None:
        rows = [_row(r) for r in records]
        self._write(index, pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL))

    def _write(self, index: Hashable, data: bytes) -> None:
        self._file.seek(self._end)
        self._file.write(data)
        self._segments[index].append((self._end, len(data)))
        self._end += len(data)

    def add_values(self, index: Hashable, value: object) -> None:
        """File any picklable value (e.g. an array of hashes) under ``index``, beside the records."""
        self._write(index, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def load_values(self, index: Hashable) -> list:
        """The values filed by ``add_values`` under ``index``, in the order they were added."""
        values = []
        for offset, length in self._segments.pop(index, []):
            self._file.seek(offset)
            values.append(pickle.loads(self._file.read(length)))
        return values

    def load(self, index: Hashable, rank: int) -> list[Slice | Sample | FlowEnd]:
        out: list[Slice | Sample | FlowEnd] = []
        layers = self._LAYERS
        for offset, length in self._segments.pop(index, []):
            self._file.seek(offset)
            for kind, *rest in pickle.loads(self._file.read(length)):
                if kind >= 0:
                    out.append(Slice(rank, layers[kind], *rest))
                elif kind == _SAMPLE:
                    out.append(Sample(rank, *rest))
                else:
                    out.append(FlowEnd(rank, layers[rest[0]], *rest[1:]))
        return out


_SAMPLE, _FLOW_END = -1, -2


def _row(r: Slice | Sample | FlowEnd) -> tuple:
    """A record as plain values (the rank is known to the reader); the first says its kind."""
    if type(r) is Slice:
        args = r.args if r.args is None or type(r.args) is dict else bytes(r.args)
        return (r.layer.order, r.lane, r.name, r.start_ns, r.dur_ns, args, r.task_type, r.flows_out,
                r.flows_in)
    if type(r) is Sample:
        return (_SAMPLE, r.lane, r.start_ns, r.value)
    return (_FLOW_END, r.layer.order, r.lane, r.start_ns, r.key, r.starts)
