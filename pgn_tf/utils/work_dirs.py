"""A work folder that holds one corpus' data: a marker file in it names the corpus, and a run for
another corpus is refused.

The reference system's setup (the speed comparison's and the digest table's peer) rewrites the
data of its work folder for each corpus, and keeps its trained model there. A run for another
corpus in the same folder would read that model as its own, so the second corpus gets a folder
of its own instead.
"""

from __future__ import annotations

import os

from pgn_tf.utils.errors import UserError

MARKER = ".pgn_tf_corpus"


def claim(folder: str, corpus: str) -> None:
    """Marks folder (created if missing) as holding `corpus`' data; UserError, nothing written,
    where it holds another corpus'."""
    os.makedirs(folder, exist_ok=True)
    marker = os.path.join(folder, MARKER)
    if os.path.exists(marker):
        with open(marker) as f:
            held = f.read().strip()
        if held != corpus:
            raise UserError(f"{folder} holds the {held} corpus; give the {corpus} corpus a "
                            "work dir of its own")
    with open(marker, "w") as f:
        f.write(corpus + "\n")
