"""The shape the code keeps (docs/architecture.md): no import cycle between its modules (counting
imports under ``TYPE_CHECKING`` and inside functions), no module too long to read, format knowledge
only in ``readers/``, and every document the code cites in the repository."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "converters"
MAX_LINES = 800
MAX_C_LINES = 1200


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name.endswith("_pb2.py"):  # protoc's
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that ``name`` imports anywhere: at its top, under
    ``TYPE_CHECKING`` and inside functions. An import deferred into a function or hidden from the
    interpreter still ties the two modules together (each needs the other to be read or
    type-checked), so it counts as a dependency as much as one at the top."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in modules else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def test_no_import_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    # a package's __init__ importing its own modules is no cycle of theirs
    graph = {name: {m for m in deps if not name.startswith(m + ".")} for name, deps in graph.items()}
    cycles = []

    def visit(name: str, trail: list[str], done: set[str]) -> None:
        if name in trail:
            cycles.append(trail[trail.index(name):] + [name])
            return
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, trail + [name], done)
        done.add(name)

    done: set[str] = set()
    for name in sorted(graph):
        visit(name, [], done)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_sees_a_cycle(tmp_path, monkeypatch):
    """The check above can fail: two modules importing each other are found."""
    modules = {"p.a": tmp_path / "a.py", "p.b": tmp_path / "b.py"}
    modules["p.a"].write_text("from .b import x\n")
    modules["p.b"].write_text("from . import a\n")
    assert _imports("p.a", modules["p.a"], modules) == {"p.b"}
    assert _imports("p.b", modules["p.b"], modules) == {"p.a"}


def test_the_cycle_check_sees_hidden_imports(tmp_path):
    """An import under ``TYPE_CHECKING`` or inside a function is a dependency all the same."""
    modules = {"p.a": tmp_path / "a.py", "p.b": tmp_path / "b.py", "p.c": tmp_path / "c.py"}
    modules["p.a"].write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import x\n")
    modules["p.b"].write_text("def f():\n    from .c import y\n    return y\n")
    modules["p.c"].write_text("class C:\n    def g(self):\n        import p.a\n")
    assert _imports("p.a", modules["p.a"], modules) == {"p.b"}
    assert _imports("p.b", modules["p.b"], modules) == {"p.c"}
    assert _imports("p.c", modules["p.c"], modules) == {"p.a"}


def test_no_module_over_800_lines():
    long = {str(path.relative_to(ROOT)): n for path in _modules().values()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_c_file_over_1200_lines():
    """The C modules' files too stay short enough to read: a module of several concerns is several
    files (readers/c/core.h, db_core.h)."""
    long = {str(path.relative_to(ROOT)): n for path in [*PACKAGE.rglob("*.c"), *PACKAGE.rglob("*.h")]
            if (n := len(path.read_text().splitlines())) > MAX_C_LINES}
    assert not long, f"C files over {MAX_C_LINES} lines: {long}"


def test_each_c_routine_of_the_readers_has_its_rule_and_test_in_the_architecture():
    """docs/architecture.md's "The C and the Python it copies" lists every function the readers' C
    gives Python, and every test it names as holding one to its rule exists."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    rows = [line for line in doc.split("### The C and the Python it copies", 1)[1].split("\n## ", 1)[0]
            .splitlines() if line.startswith("| `")]
    listed = {name.rpartition(".")[2] for row in rows
              for name in re.findall(r"`([\w.]+)`", row.split("|")[1])}
    given = {name for path in (PACKAGE / "readers" / "c").glob("*.c")
             for name in re.findall(r'\{"(\w+)", \(PyCFunction\)', path.read_text())}
    assert given and given <= listed, f"C routines not in docs/architecture.md: {given - listed}"
    tests = {name for row in rows for name in re.findall(r"\b(test_\w+)\b(?!\.py)", row.split("|")[3])}
    defined = {name for path in (ROOT / "tests").rglob("test_*.py")
               for name in re.findall(r"^def (test_\w+)", path.read_text(), re.MULTILINE)}
    assert tests and tests <= defined, f"tests named in docs/architecture.md that are gone: {tests - defined}"


def test_every_document_the_code_cites_is_in_the_repository():
    cited = set()
    for path in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c"), *(ROOT / "tests").rglob("*.py"),
                 *(ROOT / "fixtures").glob("*.py"), *(ROOT / "bench").glob("*.py")]:
        cited.update(re.findall(r"\bdocs/[\w./-]+\.md", path.read_text()))
    assert cited, "the code cites its documents by their path under docs/"
    missing = sorted(doc for doc in cited if not (ROOT / doc).is_file())
    assert not missing, f"cited but not in the repository: {missing}"


def test_citations_name_the_repository_documents():
    """A section cited by the bare name of a document (design, formats.md) points outside the
    repository: cite ``docs/design.md`` and ``docs/formats.md``."""
    bare = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "fixtures").glob("*.py")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(?<!docs/)\b(design|formats\.md) §", line):
                bare.append(f"{path.relative_to(ROOT)}:{number}")
    assert not bare, f"citations of documents outside the repository: {bare}"
