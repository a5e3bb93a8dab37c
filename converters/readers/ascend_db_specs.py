"""The tuples ``ascend_db`` hands to its C (``_db_core``: ``Rows.tasks``, ``Rows.host``, ``fill``),
which reads them by position: their fields are records.h's named positions, pinned by
tests/test_records_abi.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from ..model import Layer


class TaskPlaces(NamedTuple):
    """Where ``_db_core.Rows.tasks`` reads a TASK row (read by position: records.h): the args from
    ``args_at`` to ``args_end`` (the task's own to ``task_args_end``), the task type drawn, the
    compute info's name and the two task types it is drawn from, the task's own times."""

    ok: int
    kind: int
    start: int
    dur: int
    stream: int
    args_at: int
    task_args_end: int
    args_end: int
    task_type: int
    name: int
    c_type: int
    type: int
    start_ns: int
    end_ns: int


class TaskSpec(NamedTuple):
    """What ``_db_core.Rows.tasks`` makes a TASK row into (read by position: records.h): a Slice on
    ``layer`` (a non-computing task's type ``not_compute``), its args named ``keys``, read at ``places``."""

    slice_type: type
    layer: Layer
    not_compute: str
    keys: tuple[str, ...]
    places: TaskPlaces



class CommEnums(NamedTuple):
    """The names of an HCCL task's enums by id, a dict a family of ``_COMM_ENUMS`` (records.h)."""

    transport_type: dict
    data_type: dict
    link_type: dict
    rdma_type: dict


class CommSpec(NamedTuple):
    """What ``_db_core.Rows.tasks`` makes an HCCL task's row into (read by position: records.h): a
    Slice on ``layer``, its args named ``keys`` read at ``places`` (``_COMM_PLACES``), its enums
    named by ``enums``, on the plane lanes ``planes`` holds (made as they are met)."""

    layer: Layer
    keys: tuple[str, ...]
    places: tuple[int, ...]
    enums: CommEnums
    planes: dict


class HostSpec(NamedTuple):
    """What ``_db_core.Rows.host`` makes a host API row into (read by position: records.h): a Slice
    on ``layer``, its args named ``keys`` (connection_id first)."""

    slice_type: type
    layer: Layer
    keys: tuple[str, ...]


class FillHead(NamedTuple):
    """The items of each of ``_by_step``'s heads, a list ``_db_core.fill`` reads and moves on (by
    position: records.h): a scan's iterator of batches, the batch read, the position in it."""

    batches: Iterator[list]
    batch: list
    position: int
