"""A seeded, copy-heavy synthetic corpus: the bundled default for the quickstart and the tests.

Every article states one event about a made-up person from a made-up place with a number, pads
it with generic sentences, and restates the fact (so repeated attention is tempting: coverage
matters). The summary restates the event and must reproduce the rare name, place and number:
those are out-of-vocabulary for any small vocab, so a baseline can only say [UNK] where a
pointer-generator copies.

    python -m pgn_tf.data.synthetic --output_dir DIR [--num_train N]
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.data.synthetic"))
import argparse
import os
import random

from pgn_tf.data.example import Example
from pgn_tf.utils.quiet import add_verbose_flag

_SYLLABLES = (
    "ka lo mir ta ven dra sul pe rin go xu bel za tor fen ix ul mo qua res nai ob "
    "lek sar vim dor ha ju"
).split()
_ROLES = "farmer teacher engineer doctor sailor baker pilot writer miner judge".split()
_EVENTS = (
    ("sold", "boxes of apples"),
    ("built", "new houses"),
    ("found", "old coins"),
    ("planted", "trees"),
    ("repaired", "bridges"),
    ("caught", "fish"),
    ("wrote", "letters"),
    ("painted", "walls"),
)
_DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_FILLER = (
    "the weather was {adj} for most of the week .",
    "local people said the town was {adj} and quiet .",
    "the {noun} near the river was closed for a day .",
    "many visitors came to see the {noun} in the morning .",
    "a spokesman for the council declined to comment .",
    "the market opened early and prices were {adj} .",
    "children played near the old {noun} after school .",
    "the report will be published later this year .",
)
_ADJ = "cold warm busy calm wet dry bright dark".split()
_NOUN = "school bridge station harbour library market castle garden".split()


def _name(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts))


def make_example(rng: random.Random, index: int) -> Example:
    person = _name(rng, 3)
    place = _name(rng, 2) + rng.choice(("ton", "ville", "burg"))
    number = str(rng.randint(10, 9999))
    role = rng.choice(_ROLES)
    verb, obj = rng.choice(_EVENTS)
    day = rng.choice(_DAYS)

    def filler() -> str:
        return rng.choice(_FILLER).format(adj=rng.choice(_ADJ), noun=rng.choice(_NOUN))

    fact = f"{person} , a {role} from {place} , {verb} {number} {obj} on {day} ."
    restate = rng.choice(
        (
            f"officials said {person} {verb} {number} {obj} .",
            f"it is the first time {person} {verb} so many {obj} .",
            f"{person} said the {number} {obj} came from {place} .",
        )
    )
    sentences = [filler() for _ in range(rng.randint(1, 3))] + [fact]
    sentences += [filler() for _ in range(rng.randint(1, 3))] + [restate, filler()]
    summary = f"{person} {verb} {number} {obj} in {place} ."
    return Example(" ".join(sentences), summary, f"synthetic-{index}")


def generate(num: int, seed: int = 0) -> list[Example]:
    rng = random.Random(seed)
    return [make_example(rng, i) for i in range(num)]


def write_corpus(output_dir: str, num_train: int = 6000, num_eval: int = 200, seed: int = 0) -> dict:
    """Writes train/validation TFRecords (and returns their paths), seeded and reproducible."""
    from pgn_tf.data.tfrecord import write_tfrecords

    os.makedirs(output_dir, exist_ok=True)
    examples = generate(num_train + num_eval, seed)
    train = write_tfrecords(examples[:num_train], os.path.join(output_dir, "train"), 2)
    valid = write_tfrecords(examples[num_train:], os.path.join(output_dir, "validation"), 1)
    return {"train": os.path.join(output_dir, "train-*.tfrecord"),
            "validation": valid[0], "train_files": train}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.data.synthetic",
                                description=__doc__.splitlines()[0])
    p.add_argument("--output_dir", required=True)
    p.add_argument("--num_train", type=int, default=6000)
    p.add_argument("--num_eval", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    add_verbose_flag(p)
    a = p.parse_args(argv)
    paths = write_corpus(a.output_dir, a.num_train, a.num_eval, a.seed)
    print(f"wrote {a.num_train} train and {a.num_eval} validation examples: "
          f"{paths['train']} {paths['validation']}")
    return 0
