"""`python -m pgn_tf.pipelines.debian_descriptions`: the Debian package-description corpus.

    sudo apt-get -o Acquire::Languages=en update        # fetches the Translation-en lists
    python -m pgn_tf.pipelines.debian_descriptions --output data/debian.jsonl.gz

Article = a package's long description (paragraphs joined by "\\n"), summary = its one-line
synopsis, id = the package name. Packages that share a long description (foo, foo-data,
foo-doc ...) form a group, and the split is drawn per group (by a hash of the description), so
no group spans two splits: a model is never validated on a description it trained on.

Writes --output (every pair, with its `group` and `split`) and, beside it, one file per split
(`NAME.train.jsonl.gz`, `NAME.validation.jsonl.gz`) ready for `pgn_tf.train --train_data`.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.pipelines.debian_descriptions"))
import argparse
import bz2
import collections
import gzip
import hashlib
import json
import lzma
import os
import shutil
import subprocess

from pgn_tf.pipelines.portable import hash_fraction
from pgn_tf.utils.errors import UserError, run_cli
from pgn_tf.utils.quiet import add_verbose_flag

LISTS_DIR = "/var/lib/apt/lists"


def read_list(path: str) -> str:
    """A Translation-en list as text, whatever apt compressed it with."""
    openers = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}
    ext = os.path.splitext(path)[1]
    if ext in openers:
        with openers[ext](path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    if ext in (".lz4", ".zst"):
        # apt's own helper decompresses every format apt writes; it is on every apt system.
        helper = shutil.which("apt-helper") or "/usr/lib/apt/apt-helper"
        if not os.path.exists(helper):
            raise UserError(f"{path} is {ext}-compressed and apt-helper was not found")
        return subprocess.run([helper, "cat-file", path], check=True, capture_output=True).stdout.decode(
            "utf-8", errors="replace")
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def parse_translations(text: str):
    """Yields (package, synopsis, long description) from a Translation-en list (deb822).

    Continuation lines start with a space; a line " ." separates paragraphs; the lines of one
    paragraph are joined with spaces (Debian policy 5.6.13)."""
    for stanza in text.split("\n\n"):
        package, synopsis, paragraphs, in_desc = None, None, [[]], False
        for line in stanza.splitlines():
            if line.startswith("Package:"):
                package = line.split(":", 1)[1].strip()
                in_desc = False
            elif line.startswith("Description-en:"):
                synopsis = line.split(":", 1)[1].strip()
                in_desc = True
            elif in_desc and line.startswith(" "):
                if line.strip() == ".":
                    paragraphs.append([])
                else:
                    paragraphs[-1].append(line.strip())
            else:
                in_desc = False
        if package:
            yield package, synopsis or "", "\n".join(" ".join(p) for p in paragraphs if p)


def build_corpus(list_files: list[str], validation_fraction: float) -> tuple[list[dict], dict]:
    """Pairs with their group and split, and counts of what was dropped."""
    seen, rows = set(), []
    dropped = collections.Counter()
    for path in sorted(list_files):
        for package, synopsis, article in parse_translations(read_list(path)):
            if not article:
                dropped["no long description"] += 1
                continue
            if not synopsis:
                dropped["no synopsis"] += 1
                continue
            if package in seen:  # the same package in several lists (security, updates)
                dropped["package already read"] += 1
                continue
            seen.add(package)
            group = hashlib.sha1(article.encode()).hexdigest()[:16]
            split = "validation" if hash_fraction(group) < validation_fraction else "train"
            rows.append({"id": package, "article": article, "summary": synopsis,
                         "group": group, "split": split})
    return rows, dict(dropped)


def write_jsonl_gz(rows: list[dict], path: str) -> None:
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def split_path(output: str, split: str) -> str:
    stem = output[: -len(".jsonl.gz")] if output.endswith(".jsonl.gz") else output
    return f"{stem}.{split}.jsonl.gz"


def run(args) -> dict:
    files = sorted(os.path.join(args.lists_dir, f) for f in os.listdir(args.lists_dir)
                   if "_i18n_Translation-en" in f) if os.path.isdir(args.lists_dir) else []
    if not files:
        raise UserError(f"no *_i18n_Translation-en list in {args.lists_dir}: run "
                        "`apt-get -o Acquire::Languages=en update` first")
    rows, dropped = build_corpus(files, args.validation_fraction)
    if not rows:
        raise UserError(f"the Translation-en lists in {args.lists_dir} hold no descriptions")
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    write_jsonl_gz(rows, args.output)
    counts = collections.Counter(r["split"] for r in rows)
    for split in ("train", "validation"):
        write_jsonl_gz([r for r in rows if r["split"] == split], split_path(args.output, split))
    stats = {"lists": len(files), "pairs": len(rows),
             "groups": len({r["group"] for r in rows}), "splits": dict(counts), "dropped": dropped}
    print(f"[pipelines.debian_descriptions] {json.dumps(stats)}")
    return stats


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.pipelines.debian_descriptions",
                                description=__doc__.splitlines()[0])
    p.add_argument("--output", required=True, help="PATH.jsonl.gz")
    p.add_argument("--lists_dir", default=LISTS_DIR)
    p.add_argument("--validation_fraction", type=float, default=0.055)
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli("pgn_tf.pipelines.debian_descriptions", run, build_parser().parse_args(argv))
