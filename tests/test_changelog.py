"""CHANGELOG.md keeps Keep a Changelog's shape, and its newest release is the version setup.py
installs, so a release cannot ship with the changelog a version behind."""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup_version() -> str:
    tree = ast.parse(open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "version":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py names no version")


def releases(text: str) -> list[tuple[str, str]]:
    """The (version, date) of each `## [X.Y.Z] - YYYY-MM-DD` heading, newest first."""
    return re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d\d-\d\d)$", text, re.M)


def test_the_newest_release_is_the_installed_version():
    text = open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8").read()
    assert text.splitlines()[0] == "# Changelog"
    headings = re.findall(r"^## .*$", text, re.M)
    assert headings[0] == "## [Unreleased]", "the first section gathers what is not released"
    found = releases(text)
    assert found, "CHANGELOG.md has no release heading"
    assert found[0][0] == setup_version(), (found[0], setup_version())
    assert [d for _, d in found] == sorted((d for _, d in found), reverse=True)


def test_release_headings_are_read():
    assert releases("## [Unreleased]\n## [0.2.0] - 2027-01-02\nx\n## [0.1.0] - 2026-12-02\n") \
        == [("0.2.0", "2027-01-02"), ("0.1.0", "2026-12-02")]
