"""TFDS cnn_dailymail from a local data_dir: the fixture is prepared by TFDS itself (same name,
version layout and features as the real builder), then read back without any download."""

import pytest
import tensorflow_datasets as tfds

from pgn_tf.data import dataset, tfds_reader
from pgn_tf.data.example import ReadStats

ROWS = [
    {"article": "the cat sat on the mat .", "highlights": "cat sits .\nmat is flat .", "id": "a1"},
    {"article": "dogs bark at night .", "highlights": "dogs bark .", "id": "b2"},
]


class CnnDailymail(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Stand-in builder that writes the on-disk format of tfds' cnn_dailymail 3.4.0."""

    VERSION = tfds.core.Version("3.4.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict({
                "article": tfds.features.Text(), "highlights": tfds.features.Text(),
                "id": tfds.features.Text()}),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(ROWS), "validation": self._generate_examples(ROWS[:1])}

    def _generate_examples(self, rows):
        for r in rows:
            yield r["id"], r


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tfds")
    builder = CnnDailymail(data_dir=str(d))
    assert builder.name == "cnn_dailymail"
    builder.download_and_prepare()
    return str(d)


def test_reads_prepared_split_without_download(data_dir):
    stats = ReadStats()
    got = sorted(tfds_reader.read_tfds(data_dir, "train", stats=stats), key=lambda e: e.id)
    assert [(e.id, e.article, e.summary) for e in got] == [
        ("a1", ROWS[0]["article"], "cat sits .\nmat is flat ."), ("b2", ROWS[1]["article"], "dogs bark .")]
    assert stats.read == 2
    assert len(list(dataset.read_examples(f"tfds:{data_dir}:validation", "tfds", ReadStats()))) == 1


def test_missing_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no prepared TFDS dataset 'cnn_dailymail'"):
        list(tfds_reader.read_tfds(str(tmp_path)))
