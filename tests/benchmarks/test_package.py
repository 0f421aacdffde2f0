"""benchmarks/ (speed and memory) and research/studies/ (research) are packages run as
`python -m benchmarks.NAME` and `python -m research.studies.NAME`: no script edits sys.path,
their modules import no cycle (every import of a module of either, at any depth of the file),
and the research stays apart from the product: no module of pgn_tf, serving, pipelines or
benchmarks imports research (tests/research/test_layering.py checks benchmarks both ways)."""

import ast
import os

import pytest

pytestmark = pytest.mark.study  # the speed tools, apart from the product (pyproject.toml)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("benchmarks", "research.studies", "research")


def package_module(name: str) -> str | None:
    """"package.module" of a dotted name inside one of PACKAGES, or None."""
    for package in PACKAGES:
        if name.startswith(package + "."):
            return ".".join(name.split(".")[:package.count(".") + 2])
    return None


def imports_of(path: str) -> set[str]:
    """The benchmarks and studies modules ("package.name") a file imports anywhere in it (top
    level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module in PACKAGES:
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif package_module(node.module):
                found.add(package_module(node.module))
        elif isinstance(node, ast.Import):
            found.update(m for m in map(package_module, (a.name for a in node.names)) if m)
    return found


def modules(package: str) -> dict[str, set[str]]:
    folder = os.path.join(ROOT, *package.split("."))
    return {f"{package}.{name[:-3]}": imports_of(os.path.join(folder, name))
            for name in sorted(os.listdir(folder)) if name.endswith(".py")}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_script_edits_sys_path(package):
    folder = os.path.join(ROOT, *package.split("."))
    edits = [name for name in os.listdir(folder) if name.endswith(".py")
             and "sys.path" in open(os.path.join(folder, name)).read()]
    assert edits == []


def test_the_packages_import_no_cycle():
    graph = {**modules("benchmarks"), **modules("research.studies"), **modules("research")}
    assert "benchmarks.peer" in graph["benchmarks.compare_peer"]
    assert "research.common" in graph["research.studies.quality_table"]
    assert "research.studies.quality_table" in graph["research.studies.digest_table"]
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


def test_research_stays_apart_from_the_product():
    """Nothing outside research/ imports it: the studies build on the product, never the
    product (nor the speed tools) on a study."""
    importers = []
    for top in ("pgn_tf", "serving", "pipelines", "benchmarks"):
        for folder, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                path = os.path.join(folder, name)
                if name.endswith(".py") and any(m.startswith("research.")
                                                for m in imports_of(path)):
                    importers.append(os.path.relpath(path, ROOT))
    assert importers == []


def test_imports_inside_functions_count(tmp_path):
    (tmp_path / "a.py").write_text("from research.studies import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from benchmarks.a import x\n")
    graph = {n[:-3]: imports_of(str(tmp_path / n)) for n in ("a.py", "b.py")}
    assert graph == {"a": {"research.studies.b"}, "b": {"benchmarks.a"}}
