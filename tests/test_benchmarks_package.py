"""benchmarks/ is a package run as `python -m benchmarks.NAME`: no script edits sys.path, and its
modules import no cycle (every import of a benchmarks module, at any depth of the file)."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")


def imports_of(path: str) -> set[str]:
    """The benchmarks modules a file imports anywhere in it (top level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "benchmarks":
                found.update(a.name for a in node.names)
            elif node.module.startswith("benchmarks."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names
                         if a.name.startswith("benchmarks."))
    return found


def modules() -> dict[str, set[str]]:
    return {name[:-3]: imports_of(os.path.join(BENCHMARKS, name))
            for name in sorted(os.listdir(BENCHMARKS)) if name.endswith(".py")}


def test_no_benchmark_edits_sys_path():
    edits = [name for name in os.listdir(BENCHMARKS) if name.endswith(".py")
             and "sys.path" in open(os.path.join(BENCHMARKS, name)).read()]
    assert edits == []


def test_the_benchmarks_import_no_cycle():
    graph = modules()
    assert "runner" in graph["compare_peer"] and "quality_table" in graph["digest_table"]
    visiting, done = [], set()

    def visit(name):
        if name in done:
            return
        assert name not in visiting, " -> ".join(visiting[visiting.index(name):] + [name])
        visiting.append(name)
        for dep in graph.get(name, ()):
            visit(dep)
        visiting.pop()
        done.add(name)

    for name in graph:
        visit(name)


def test_imports_inside_functions_count(tmp_path):
    (tmp_path / "a.py").write_text("from benchmarks import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from benchmarks.a import x\n")
    graph = {n[:-3]: imports_of(str(tmp_path / n)) for n in ("a.py", "b.py")}
    assert graph == {"a": {"b"}, "b": {"a"}}
