"""Records filed by step on disk, so a reader of one big file holds one step at a time."""

from __future__ import annotations

import pickle
import tempfile
from collections import defaultdict
from collections.abc import Hashable

from ..model import Layer, Sample, Slice


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

    def add(self, index: Hashable, records: list[Slice | Sample]) -> None:
        rows = [(s.layer.order, s.lane, s.name, s.start_ns, s.dur_ns,
                 s.args if s.args is None or type(s.args) is dict else bytes(s.args), s.task_type)
                if type(s) is Slice else (-1, s.lane, s.start_ns, s.value) for s in records]
        data = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
        self._file.seek(self._end)
        self._file.write(data)
        self._segments[index].append((self._end, len(data)))
        self._end += len(data)

    def load(self, index: Hashable, rank: int) -> list[Slice | Sample]:
        out: list[Slice | Sample] = []
        for offset, length in self._segments.pop(index, []):
            self._file.seek(offset)
            for layer, *rest in pickle.loads(self._file.read(length)):
                out.append(Slice(rank, self._LAYERS[layer], *rest) if layer >= 0 else Sample(rank, *rest))
        return out
