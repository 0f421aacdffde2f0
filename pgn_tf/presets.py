"""Presets: named configurations, as data (keras-hub's presets, tensorflow/models' registered
experiment configs).

Each is a one-line description, the presets it builds on (applied first, in order), and the
values it sets as `section.key`, typed and checked as `--set` values are. A corpus recipe's
time budget on a 2-core machine is its `train.max_minutes`. Why each value is what it is, with
the runs that measured it: docs/training/presets.md. Names starting with "_" are parts several
presets share (a corpus' lengths and evaluation rules); `--config` takes only the others.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Preset:
    description: str  # one line: what it is for
    bases: tuple[str, ...] = ()  # presets applied first, in order
    values: dict = dataclasses.field(default_factory=dict)  # "section.key" -> value

    @property
    def minutes(self) -> float | None:
        """The time budget this preset sets itself, if it sets one."""
        return self.values.get("train.max_minutes")


# The papers' own settings (docs/training/presets.md lists where the project departs from them).
_PAPERS = {
    "see2017_baseline": Preset(
        "See et al. (2017) section 5: the attentional seq2seq baseline, no copying, 50k vocab",
        values={"model.pointer_gen": False}),
    "see2017_pgn": Preset(
        "See et al. (2017): the pointer-generator, trained without coverage"),
    "see2017_coverage": Preset(
        "See et al. (2017): pointer-generator + coverage (lambda = 1), the final phase",
        values={"model.coverage": True}),
    "paulus2017": Preset(
        "Paulus et al. (2017) appendix B: intra-attention model, ML; "
        "train.objective=mixed for the RL phase",
        values={"data.max_enc_steps": 800, "model.model_type": "deep_reinforced",
                "model.hidden_dim": 200, "model.emb_dim": 100, "model.emb_init_std": 0.5,
                "train.batch_size": 50, "train.optimizer": "adam", "train.learning_rate": 1e-3,
                "train.max_grad_norm": 0.0, "train.nll_reduction": "sum",
                "train.pointer_supervision": True, "decode.beam_size": 5,
                "decode.min_dec_steps": 0, "decode.max_dec_steps": 100,
                "decode.block_trigrams": True}),
    "rush2015_abs": Preset(
        "Rush et al. (2015) section 7: ABS (model.abs_encoder: bow, conv, attention), "
        "fixed-length decoding",
        values={"data.max_enc_steps": 100, "data.max_dec_steps": 30, "data.replace_digits": True,
                "data.min_count": 5, "model.model_type": "abs", "model.hidden_dim": 400,
                "model.emb_dim": 200, "model.pointer_gen": False, "train.batch_size": 64,
                "train.optimizer": "sgd", "train.learning_rate": 0.05,
                "train.max_grad_norm": 0.0, "train.nll_reduction": "sum",
                "train.lr_halving": "epoch", "decode.beam_size": 5, "decode.min_dec_steps": 3,
                "decode.max_dec_steps": 30, "decode.fixed_length": 8}),
}

# The Debian package-description corpus: one-line synopses of long descriptions.
_DEBIAN = {
    "_debian": Preset(
        "the Debian corpus' lengths, vocabulary, evaluation and [UNK] replacement",
        values={"data.vocab_size": 5_000, "data.max_enc_steps": 100, "data.max_dec_steps": 20,
                "train.batch_size": 32, "train.max_steps": 1_000_000, "train.eval_every": 500,
                "train.eval_batches": 50, "train.checkpoint_every": 500,
                "decode.min_dec_steps": 3, "decode.max_dec_steps": 30, "decode.batch_size": 64,
                "decode.replace_unk": True}),
    "_debian_see": Preset(
        "See et al.'s models on the Debian corpus: Adam on a cosine, selection by ROUGE",
        bases=("_debian",),
        values={"model.hidden_dim": 128, "model.emb_dim": 128, "train.optimizer": "adam",
                "train.learning_rate": 1e-3, "train.lr_schedule": "cosine",
                "train.select_by": "rouge", "train.eval_skip": 1_500}),
    "debian_baseline": Preset(
        "See et al.'s baseline on the Debian corpus, 60 minutes",
        bases=("see2017_baseline", "_debian_see"), values={"train.max_minutes": 60}),
    "debian_pgn": Preset(
        "See et al.'s pointer-generator on the Debian corpus, 45 minutes (H = 256, dropout)",
        bases=("see2017_pgn", "_debian_see"),
        values={"train.max_minutes": 45, "model.hidden_dim": 256,
                "train.mixed_precision": "auto", "data.bucket_by_summary_length": True,
                "model.dropout": 0.3, "decode.block_repeated_words": True}),
    "debian_coverage": Preset(
        "debian_pgn's coverage phase in the same model dir, 15 minutes at 2e-4",
        bases=("debian_pgn",),
        values={"model.coverage": True, "train.max_minutes": 15, "train.learning_rate": 2e-4}),
    "debian_paulus": Preset(
        "Paulus et al. on the Debian corpus, 2 x 64 encoder, ML for 40 minutes",
        bases=("paulus2017", "_debian"),
        values={"train.max_minutes": 40, "model.hidden_dim": 64, "model.emb_dim": 64,
                "train.pointer_supervision": False, "decode.beam_size": 4}),
    "debian_abs": Preset(
        "Rush et al.'s ABS on the Debian corpus, H = 256, Adam, 60 minutes",
        bases=("rush2015_abs", "_debian"),
        values={"train.max_minutes": 60, "data.min_count": 1, "decode.fixed_length": 0,
                "model.hidden_dim": 256, "model.emb_dim": 128, "model.abs_conv_norm": True,
                "train.optimizer": "adam", "train.learning_rate": 1e-3,
                "train.lr_schedule": "cosine", "train.lr_halving": "none",
                "train.max_grad_norm": 5.0, "train.batch_size": 64, "decode.beam_size": 4,
                # decoding to [STOP], ABS+'s n-gram match features reward loops ("game of the
                # game of ..."): both blocks took the conv model's ABS+ from 33.63 to 37.45
                # ROUGE-1 (research/records/2026-11-27-abs-study-corpus-preset.md)
                "decode.block_trigrams": True, "decode.block_repeated_words": True}),
}

# The Debian digests: 3-6 descriptions an article, their synopses a summary (See et al.'s shape).
_DIGESTS = {
    "_digest": Preset(
        "the digests at See et al.'s lengths: 400 / 100 tokens, decoding 20-120, sentence lines",
        values={"data.vocab_size": 5_000, "data.max_enc_steps": 400, "data.max_dec_steps": 100,
                "train.batch_size": 16, "train.max_steps": 1_000_000, "train.eval_every": 500,
                "train.eval_batches": 25, "train.checkpoint_every": 500,
                "train.select_by": "rouge", "train.eval_skip": 600,
                "train.eval_rouge_examples": 200, "decode.min_dec_steps": 20,
                "decode.max_dec_steps": 120, "decode.batch_size": 32,
                "decode.replace_unk": True, "decode.sentence_lines": True}),
    "_digest_see": Preset(
        "See et al.'s models on the digests with debian_pgn's measured choices",
        bases=("_digest",),
        values={"model.hidden_dim": 256, "model.emb_dim": 128, "model.dropout": 0.3,
                "train.optimizer": "adam", "train.learning_rate": 1e-3,
                "train.lr_schedule": "cosine", "train.mixed_precision": "auto",
                "data.bucket_by_summary_length": True}),
    # See et al.'s hour split 40 + 20 (the headlines' is 45 + 15): at 15 minutes the coverage
    # loss was still falling and one looping output held a third of the duplicate 3-grams
    # (docs/results/digests.md, "Results, 2026-11-26").
    "digest_baseline": Preset(
        "See et al.'s baseline on the digests, 40 minutes (digest_pgn without copying)",
        bases=("see2017_baseline", "_digest_see"), values={"train.max_minutes": 40}),
    "digest_pgn": Preset(
        "See et al.'s pointer-generator on the digests, 40 minutes",
        bases=("see2017_pgn", "_digest_see"), values={"train.max_minutes": 40}),
    "digest_coverage": Preset(
        "digest_pgn's coverage phase in the same model dir, 20 minutes at 2e-4",
        bases=("digest_pgn",),
        values={"model.coverage": True, "train.max_minutes": 20, "train.learning_rate": 2e-4}),
    "digest_paulus": Preset(
        "Paulus et al. on the digests, 2 x 128 encoder, ML for 40 minutes",
        bases=("paulus2017", "_digest"),
        values={"train.max_minutes": 40, "model.hidden_dim": 128, "model.emb_dim": 128,
                "train.pointer_supervision": False, "decode.beam_size": 4}),
}

# The sizes of the OpenNMT-py system benchmarks/compare_peer.py runs against, and the quickstart.
_OTHERS = {
    "reference_onmt": Preset(
        "OpenNMT-py's copy + coverage sizes for the speed comparison (20k vocab, 100 / 30 tokens)",
        bases=("see2017_coverage",),
        values={"data.vocab_size": 20_000, "data.max_enc_steps": 100, "data.max_dec_steps": 30,
                "model.hidden_dim": 256, "model.enc_hidden_dim": 128, "model.emb_dim": 128,
                "train.batch_size": 32, "data.buckets_per_length": 10,
                "train.mixed_precision": "auto", "decode.beam_size": 4,
                "decode.min_dec_steps": 0, "decode.max_dec_steps": 30, "decode.batch_size": 64,
                "decode.replace_unk": True}),
    "reference_onmt_digests": Preset(
        "reference_onmt at See et al.'s lengths on the digests (50k vocab, 400 / 100 tokens)",
        bases=("reference_onmt",),
        values={"data.vocab_size": 50_000, "data.max_enc_steps": 400,
                "data.max_dec_steps": 100, "train.batch_size": 16,
                "decode.max_dec_steps": 100}),
    "tiny": Preset(
        "the quickstart's model: trains on the synthetic corpus in a couple of minutes",
        values={"data.vocab_size": 200, "data.max_enc_steps": 80, "data.max_dec_steps": 24,
                "data.shuffle_buffer": 2000, "model.hidden_dim": 64, "model.emb_dim": 32,
                "train.batch_size": 32, "train.max_steps": 600, "train.checkpoint_every": 200,
                "train.eval_every": 200, "train.eval_batches": 5, "train.log_every": 50,
                "train.learning_rate": 0.15, "decode.beam_size": 4, "decode.min_dec_steps": 3,
                "decode.max_dec_steps": 30, "decode.replace_unk": True}),
}

ALL: dict[str, Preset] = {**_PAPERS, **_DEBIAN, **_DIGESTS, **_OTHERS}
# What --config takes: every preset but the shared parts.
PRESETS: dict[str, Preset] = {k: v for k, v in ALL.items() if not k.startswith("_")}


def sources(name: str) -> list[tuple[str, object, str]]:
    """The (key, value, the preset that sets it) triples preset `name` applies, its bases'
    first, in the order they apply."""
    preset = ALL[name]
    out = []
    for base in preset.bases:
        out += sources(base)
    return out + [(key, value, name) for key, value in preset.values.items()]


def values(name: str) -> list[tuple[str, object]]:
    """The (key, value) pairs preset `name` sets, its bases' first, in the order they apply."""
    return [(key, value) for key, value, _ in sources(name)]
