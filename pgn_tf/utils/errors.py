"""Errors a user can act on, and the one place CLIs turn them into a single line + exit code."""

from __future__ import annotations

import sys


class UserError(Exception):
    """A problem the user can fix (bad path, bad flag, mismatched files); printed as one line."""


def run_cli(prog: str, fn, *args) -> int:
    """Calls fn(*args); user errors become `prog: error: message` on stderr and exit code 2."""
    try:
        fn(*args)
    except (UserError, ValueError, FileNotFoundError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    return 0
