"""Input formats. Each module exposes ``NAME``, ``sniff``, ``rank_infos`` and ``read``, and says
what it recognises, so discovery (``converters.discover``) holds no format knowledge:

- ``sniff(folder)``: whether a folder is one of its ranks' (or, with ``FILES``, holds its files);
  ``FOLDER``: what such a folder holds, in words, for the message when nothing is found;
- ``LONE_FILES`` and ``lone_file(path, diag)`` (optional): the files it reads passed alone, as
  these files travel (attached to an issue, copied off a cluster without their folder), in words,
  and the rank of one (None: not its file);
- ``OPS_IN_DETAIL_ONLY`` (optional, default False): its device tasks' op types (or the host
  operators that stand for them) are read in detail only; ``with_op_types(rank)`` (optional): the
  rank as read for its op types, where another of its files names them better (``for_ops``);
- ``missing_data(folder)`` (optional): why a folder that is a rank's by its name holds nothing to
  read, and which rank it is, to warn of (None: it holds something, or is none of its ranks').

``READERS`` lists them from the most to the least specific; discovery asks each in turn. A
reader with ``ATTACHES`` (host_info) adds to the device ranks of the same id rather than
competing with them. A reader with ``FILES`` (kineto, paddle) reads files of a folder, one rank each,
and the folder's subfolders are still walked (a mixed folder: Ascend ranks beside GPU traces).
"""

from ..model import RankInfo
from . import ascend_pt, host_info, kineto, mindspore1x, msprof, paddle

READERS = (ascend_pt, msprof, mindspore1x, host_info, kineto, paddle)
BY_NAME = {reader.NAME: reader for reader in READERS}

# What discovery looked for, for the "nothing recognisable" message.
LOOKED_FOR = "; ".join(f"{reader.NAME}: {reader.FOLDER}" for reader in READERS)

# What can be read alone, for the message that a file passed alone is none of them.
_LONE = [name for reader in READERS for name in getattr(reader, "LONE_FILES", ())]
READ_ALONE = f"{', '.join(_LONE[:-1])} or {_LONE[-1]}"


def for_ops(rank: RankInfo) -> tuple[RankInfo, bool]:
    """How to read a rank for its operator statistics (``analyses.ops``): the rank as its reader
    reads it for op types, and whether that needs a detail read."""
    reader = BY_NAME[rank.format]
    with_op_types = getattr(reader, "with_op_types", None)
    rank = rank if with_op_types is None else with_op_types(rank)
    return rank, getattr(reader, "OPS_IN_DETAIL_ONLY", False)
