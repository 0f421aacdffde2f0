"""Progress bars for long loops (Keras' Progbar on standard output): by default shown only when
standard output is a terminal, so logs and tests stay clean."""

from __future__ import annotations

import sys


def verbosity(verbose: int | None) -> int:
    """verbose None -> 1 when standard output is a terminal, else 0."""
    if verbose is None:
        return 1 if hasattr(sys.stdout, "isatty") and sys.stdout.isatty() else 0
    return int(verbose)


def progbar(target: int | None, unit: str, verbose: int | None = None, interval: float = 1.0):
    """A keras.utils.Progbar counting `unit`s towards `target` (None: unknown)."""
    import keras

    return keras.utils.Progbar(target, verbose=verbosity(verbose), interval=interval,
                               unit_name=unit)


def counted(items, bar):
    """Yields the items, adding one to `bar` for each (the last update finalizes it)."""
    n = 0
    for n, item in enumerate(items, 1):  # noqa: B007
        if n % 256 == 0:
            bar.update(n)
        yield item
    bar.update(n, finalize=True)
