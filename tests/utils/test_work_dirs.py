"""A work folder holds one corpus' data: claiming it again for that corpus is accepted, for
another refused with nothing written."""

import pytest

from pgn_tf.utils import work_dirs
from pgn_tf.utils.errors import UserError


def test_claim_creates_the_folder_and_names_its_corpus(tmp_path):
    folder = tmp_path / "work" / "peer"
    work_dirs.claim(str(folder), "descriptions")
    assert (folder / work_dirs.MARKER).read_text().strip() == "descriptions"


def test_the_same_corpus_is_accepted_again(tmp_path):
    work_dirs.claim(str(tmp_path), "digests")
    (tmp_path / "model.ckpt").write_text("kept")
    work_dirs.claim(str(tmp_path), "digests")
    assert (tmp_path / work_dirs.MARKER).read_text().strip() == "digests"
    assert (tmp_path / "model.ckpt").read_text() == "kept"


def test_another_corpus_is_refused_and_the_marker_kept(tmp_path):
    work_dirs.claim(str(tmp_path), "descriptions")
    with pytest.raises(UserError, match="holds the descriptions corpus"):
        work_dirs.claim(str(tmp_path), "digests")
    assert (tmp_path / work_dirs.MARKER).read_text().strip() == "descriptions"
    work_dirs.claim(str(tmp_path), "descriptions")  # still its own


def test_a_folder_of_data_without_a_marker_is_claimed(tmp_path):
    (tmp_path / "train.jsonl").write_text("{}\n")
    work_dirs.claim(str(tmp_path), "digests")
    with pytest.raises(UserError):
        work_dirs.claim(str(tmp_path), "descriptions")
