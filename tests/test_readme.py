"""The README is a guide (STYLE.md, habit 23): short, in short sentences, with no dated prose,
and every `python -m` command it shows parses with the command's own parser, so a renamed flag
fails here before a user copies it."""

import importlib
import os
import re
import shlex

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
MAX_LINES = 200
MAX_WORDS = 40
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
LINK = re.compile(r"\[[^\]]*\]\([^)]*\)")


def blocks(text: str) -> tuple[list[str], list[str]]:
    """(prose paragraphs, code lines) of a Markdown text: fenced code apart, table rows,
    headings, images and HTML comments left out of the prose; a list item is a paragraph."""
    prose, code, para, fenced = [], [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            code.append(line)
            continue
        s = line.strip()
        if not s or s.startswith(("|", "#", "![", "<!--")) or s.startswith("- "):
            if para:
                prose.append(" ".join(para))
            para = [s[2:]] if s.startswith("- ") else []
            continue
        para.append(s)
    if para:
        prose.append(" ".join(para))
    return prose, code


def sentences(paragraph: str) -> list[str]:
    """The sentences of a paragraph: split after . ! ? (or a colon) followed by a capital."""
    return [s for s in re.split(r"(?<=[.!?:])\s+(?=[A-Z`(\[])", paragraph) if s]


def shell_commands(code: list[str]) -> list[list[str]]:
    """Each `python -m MODULE ARGS` of the code lines as an argv (continuations joined, comments,
    `&` and `&&`-chained neighbours cut off)."""
    joined, out = re.sub(r"\\\n\s*", " ", "\n".join(code)), []
    for line in joined.splitlines():
        for part in line.split("&&"):
            part = part.split(" #")[0].strip().rstrip("&").strip()
            if part.startswith("python -m "):
                out.append(shlex.split(part)[2:])
    return out


def readme() -> str:
    return open(README, encoding="utf-8").read()


def test_the_readme_is_short():
    n = len(readme().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines (at most {MAX_LINES}): move detail into docs/"


def test_no_readme_sentence_runs_long():
    prose, _ = blocks(readme())
    long = [s for p in prose for s in sentences(p) if len(s.split()) > MAX_WORDS]
    assert not long, f"sentences over {MAX_WORDS} words: {long}"


def test_dates_appear_only_in_record_links():
    text = LINK.sub("", readme())
    assert not DATE.findall(text), f"dates outside record links: {DATE.findall(text)}"


def test_the_checks_see_a_long_sentence_and_a_stray_date():
    """The helpers above find what they are for (a check that cannot fail checks nothing)."""
    para = " ".join(["word"] * (MAX_WORDS + 1)) + ". Short one."
    prose, _ = blocks(f"# title\n\n{para}\n\n```bash\npython -m x --a 1 \\\n  --b 2 &\n```\n")
    assert [len(s.split()) for s in sentences(prose[0])] == [MAX_WORDS + 1, 2]
    assert DATE.findall(LINK.sub("", "on 2026-11-23, [2026-11-24](r/2026-11-24.md)")) == \
        ["2026-11-23"]
    assert shell_commands(["python -m x --a 1 \\", "  --b 2 &  # note"]) == \
        [["x", "--a", "1", "--b", "2"]]


COMMANDS = shell_commands(blocks(readme())[1])


def test_the_readme_shows_commands():
    assert len(COMMANDS) >= 8 and any(argv[0] == "pgn_tf.quickstart" for argv in COMMANDS)


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv)[:60])
def test_each_readme_command_parses(argv):
    """The README's command, flags and values are ones its parser takes (pytest and
    tests.avx2_pass, the suite's own runner, take pytest's arguments)."""
    module, args = argv[0], argv[1:]
    if module == "pytest":
        return
    if module == "tests.avx2_pass":
        assert importlib.import_module(module).PATHS
        return
    parser = importlib.import_module(module).build_parser()
    parser.parse_args(args)


def test_ci_runs_the_readme_test_command():
    """.ci/run is the README's test command, word for word, so a step the README leaves out
    fails CI on a clean clone."""
    code = blocks(readme())[1]
    start = next(i for i, line in enumerate(code) if line.startswith("bash tests/install_system"))
    shown = re.sub(r"\\\n\s*", " ", "\n".join(code[start:start + 2]))
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    ci = re.sub(r"\\\n\s*", " ", ci[ci.index("bash tests/install_system"):]).strip()
    assert " ".join(shown.split()) == " ".join(ci.split())
