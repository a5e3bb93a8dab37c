"""Format knowledge stays in the readers: outside ``converters/readers/`` no code (strings and
identifiers; comments and docstrings are prose) matches a vendor's names. What a record means is
the model's word (``model.comm_kind``, ``model.GPU_KERNEL``), set by the reader that knows the
format, so an analysis never learns a new vendor (docs/architecture.md, "How to add a format")."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "converters"
# HCCL's op names, NCCL's kernels, gloo's ranges, c10d's ops (as the readers find them), and the
# task type Kineto's and Paddle's readers show a kernel with
VENDOR = re.compile(r"hcom_|nccl|gloo:|c10d::")
VENDOR_STRINGS = frozenset({"KERNEL"})
_CODE = tuple(t for t in (tokenize.STRING, tokenize.NAME, getattr(tokenize, "FSTRING_MIDDLE", None)) if t)


def _docstrings(tree: ast.AST) -> set[int]:
    """The first line of each docstring (module, class, function): prose, not code."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                lines.add(body[0].lineno)
    return lines


def vendor_names(source: str) -> list[tuple[int, str]]:
    """(line, token) of each string or name in ``source``'s code that matches a vendor's names."""
    prose = _docstrings(ast.parse(source))
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING and token.start[0] in prose:
            continue
        if token.type in _CODE and _matches(token):
            found.append((token.start[0], token.string))
    return found


def _matches(token: tokenize.TokenInfo) -> bool:
    if VENDOR.search(token.string):
        return True
    if token.type == tokenize.STRING:
        try:
            return ast.literal_eval(token.string) in VENDOR_STRINGS
        except (ValueError, SyntaxError):  # an f-string's start
            return False
    return False


def test_no_vendor_name_outside_the_readers():
    """Every module of the package but the readers: its code names no vendor."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if PACKAGE / "readers" in path.parents:
            continue
        for line, text in vendor_names(path.read_text()):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text}")
    assert not offenders, "vendor names outside converters/readers/:\n" + "\n".join(offenders)


def test_the_scan_finds_code_and_passes_prose():
    """The scan itself: a string or identifier is found, a comment or docstring is not."""
    source = ('"""Matches ``hcom_allReduce`` in prose."""\n'
              '# ncclKernel_AllReduce in a comment\n'
              'def f(name):\n'
              '    """gloo:all_reduce in a docstring."""\n'
              '    x = "hcom_receive"\n'
              '    nccl_kernel = 1\n'
              '    return name.startswith("c10d::") or name == "KERNEL" or f"{x}gloo:send"\n')
    assert [line for line, _ in vendor_names(source)] == [5, 6, 7, 7, 7]
