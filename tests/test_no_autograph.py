"""Every tf.function the product builds is traced without autograph (docs/design.md, "Tracing
without autograph"): the graph code writes its loops and branches as tf.while_loop and tf.cond,
so autograph's rewrite of the Python source only adds tracing time, and a Python branch on a
tensor fails at trace time instead of being turned into graph control flow unseen."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PRODUCT = ["pgn_tf", "pipelines", "serving", "benchmarks/decode_throughput.py",
           "benchmarks/gpu_check.py"]


def tf_function_calls(tree: ast.AST):
    """(line, keywords) of each tf.function(...) call and bare @tf.function decorator."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "tf.function":
            yield node.lineno, {k.arg: ast.unparse(k.value) for k in node.keywords}
        decorators = getattr(node, "decorator_list", [])
        for d in decorators:
            if ast.unparse(d) == "tf.function":
                yield d.lineno, {}


def files():
    for entry in PRODUCT:
        path = ROOT / entry
        yield from ([path] if path.suffix == ".py" else sorted(path.rglob("*.py")))


def test_the_scan_finds_what_it_looks_for():
    tree = ast.parse("@tf.function\ndef f(): pass\ng = tf.function(f, autograph=False)\n")
    assert sorted(tf_function_calls(tree)) == [(1, {}), (3, {"autograph": "False"})]


def test_every_product_tf_function_turns_autograph_off():
    found, offenders = 0, []
    for path in files():
        for line, kw in tf_function_calls(ast.parse(path.read_text())):
            found += 1
            if kw.get("autograph") != "False":
                offenders.append(f"{path.relative_to(ROOT)}:{line}")
    assert found >= 10 and offenders == [], offenders
