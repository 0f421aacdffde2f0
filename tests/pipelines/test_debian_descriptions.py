"""The Debian corpus recipe on Translation-en lists written in apt's format."""

import gzip
import json

from pgn_tf.pipelines import debian_descriptions as dd

MAIN = """Package: 0ad
Description-md5: d943033bedada21853d2ae54a2578a7b
Description-en: Real-time strategy game of ancient warfare
 0 A.D. is a free, open-source, cross-platform
 real-time strategy game.
 .
 It is historically based.

Package: 0ad-data
Description-md5: 26581e685027d5ae84824362a4ba59ee
Description-en: Real-time strategy game of ancient warfare (data files)
 0 A.D. is a free, open-source, cross-platform
 real-time strategy game.
 .
 It is historically based.

Package: nodesc
Description-md5: 00000000000000000000000000000000
Description-en: A package with only a synopsis

"""

SECURITY = """Package: 0ad
Description-md5: d943033bedada21853d2ae54a2578a7b
Description-en: Real-time strategy game of ancient warfare
 Repeated in a second list.
"""


def test_parses_groups_and_splits(tmp_path):
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "deb.debian.org_debian_dists_bookworm_main_i18n_Translation-en").write_text(MAIN)
    with gzip.open(lists / "security_main_i18n_Translation-en.gz", "wt") as f:
        f.write(SECURITY)
    for i in range(40):  # enough groups for both splits
        with open(lists / "deb.debian.org_debian_dists_bookworm_main_i18n_Translation-en",
                  "a") as f:
            f.write(f"Package: pkg{i}\nDescription-en: Tool number {i}\n Does thing {i}.\n\n")
    out = tmp_path / "corpus" / "debian.jsonl.gz"
    stats = dd.run(dd.build_parser().parse_args(
        ["--output", str(out), "--lists_dir", str(lists), "--validation_fraction", "0.3"]))
    assert stats["pairs"] == 42 and stats["groups"] == 41
    assert stats["dropped"] == {"no long description": 1, "package already read": 1}
    rows = [json.loads(line) for line in gzip.open(out, "rt")]
    by_id = {r["id"]: r for r in rows}
    assert by_id["0ad"]["article"] == (
        "0 A.D. is a free, open-source, cross-platform real-time strategy game.\n"
        "It is historically based.")
    assert by_id["0ad"]["summary"] == "Real-time strategy game of ancient warfare"
    # One description, one group, one split.
    assert by_id["0ad"]["group"] == by_id["0ad-data"]["group"]
    assert by_id["0ad"]["split"] == by_id["0ad-data"]["split"]
    train = [json.loads(x) for x in gzip.open(tmp_path / "corpus" / "debian.train.jsonl.gz", "rt")]
    valid = [json.loads(x) for x in gzip.open(tmp_path / "corpus" / "debian.validation.jsonl.gz",
                                              "rt")]
    assert len(train) + len(valid) == 42 and valid and train
    assert not {r["group"] for r in train} & {r["group"] for r in valid}


def test_no_lists_is_a_clear_error(tmp_path, capsys):
    assert dd.main(["--output", str(tmp_path / "x.jsonl.gz"), "--lists_dir", str(tmp_path)]) == 2
    assert "apt-get -o Acquire::Languages=en update" in capsys.readouterr().err
