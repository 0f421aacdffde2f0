"""The research stays apart from the speed tools: no module under research/ imports benchmarks,
and no module under benchmarks/ imports research. What both need (the machine's words, running a
command) is the library's (pgn_tf.utils), which either may import."""

import ast
import os

import pytest

pytestmark = pytest.mark.study  # research, apart from the product (pyproject.toml)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APART = {"research": "benchmarks", "benchmarks": "research"}  # folder: what it must not import


def imported_tops(source: str) -> set[str]:
    """The top-level packages a module's source imports, at any depth of the file (inside
    functions too); relative imports are its own package's."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found


def python_files(folder: str) -> list[str]:
    out = []
    for where, _, names in os.walk(os.path.join(ROOT, folder)):
        out += [os.path.join(where, n) for n in sorted(names) if n.endswith(".py")]
    return out


def crossings() -> list[str]:
    """"path imports package" for every import across the line."""
    found = []
    for folder, banned in APART.items():
        for path in python_files(folder):
            with open(path, encoding="utf-8") as f:
                if banned in imported_tops(f.read()):
                    found.append(f"{os.path.relpath(path, ROOT)} imports {banned}")
    return found


def test_research_and_benchmarks_never_import_each_other():
    assert len(python_files("research")) > 10 and len(python_files("benchmarks")) > 10
    assert crossings() == []


@pytest.mark.parametrize("source, tops", [
    ("from benchmarks.common import emit\n", {"benchmarks"}),
    ("import benchmarks.runner as r\n", {"benchmarks"}),
    ("def f():\n    from research.studies import targets\n", {"research"}),
    ("from . import common\nimport os\n", {"os"}),
])
def test_every_kind_of_import_is_seen(source, tops):
    assert imported_tops(source) == tops
