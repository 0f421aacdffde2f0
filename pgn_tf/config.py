"""Typed configuration: dataclasses, presets (data in pgn_tf/presets.py), YAML/JSON files and
`--set` overrides.

A `Config` has four sections (`data`, `model`, `train`, `decode`). Entry points build one with
`resolve(config_name_or_path, overrides)`; every run writes the resolved config next to its
checkpoints (`config.json`), and later commands (evaluate, export, summarize) read it back.

Each field's annotation is its contract: `Literal[...]` lists the choices, `Annotated[..., Range]`
the bounds. `Config.validate()` checks them all (plus the rules tying fields together) and runs
in `resolve()`, `apply_overrides()` and `load_from_model_dir()`; `--set` parses a value by the
field's declared type and rejects a bad one at once, naming the key and what it allows.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Annotated, Any, Literal

import yaml

from pgn_tf import presets
from pgn_tf.presets import PRESETS
from pgn_tf.utils.errors import UserError
from pgn_tf.utils.typed_fields import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Probability,
    Range,
)
from pgn_tf.utils.typed_fields import bad as _bad
from pgn_tf.utils.typed_fields import checked as _checked
from pgn_tf.utils.typed_fields import hints as _hints
from pgn_tf.utils.typed_fields import parse_value as _parse_value
from pgn_tf.utils.typed_fields import spec as _spec


@dataclasses.dataclass
class DataConfig:
    vocab_size: Annotated[int, Range(5)] = 50_000  # with the 4 special tokens, as See et al.'s code
    max_enc_steps: PositiveInt = 400  # article truncated to this many tokens
    max_dec_steps: PositiveInt = 100  # summary truncated to this many tokens (training)
    vocab_path: str = ""  # "" = <model_dir>/vocab.txt, built from the training data if absent
    min_count: PositiveInt = 1  # words seen fewer times are left out of a built vocab
    lowercase: bool = True
    replace_digits: bool = False  # Rush et al.: every digit becomes '#'
    shuffle_buffer: PositiveInt = 10_000
    bucket_by_length: bool = True  # training batches from 4 buckets of article length
    # Training buckets by summary length too (a quarter, half, all of max_dec_steps: 12 buckets
    # in all): the decoder loop runs over the longest summary of its batch.
    bucket_by_summary_length: bool = False
    # Finer buckets, as the reference system's length-sorted batches: 0 keeps the buckets
    # above; n > 0 cuts max_enc_steps and max_dec_steps into n equal-width buckets each (at
    # most n * n in all, one a length where a length is shorter than n; replacing
    # data.bucket_by_summary_length's), so a batch pads less. Like bucket_by_length, it does
    # nothing where max_enc_steps < 8 (one padded batch stream there). More buckets
    # hold more examples back while their batches fill (at most n * n * (batch - 1)) and, with
    # train.jit_compile, compile more shapes (one a bucket).
    buckets_per_length: NonNegativeInt = 0
    # Training: read and tokenize each record once; later epochs replay the first one's
    # examples from memory (tf.data cache: the whole training set's tokens and raw text).
    cache_tokens: bool = False


@dataclasses.dataclass
class ModelConfig:
    model_type: Literal["pointer_generator", "deep_reinforced", "abs"] = "pointer_generator"
    hidden_dim: PositiveInt = 256  # H: the decoder LSTM (and each encoder direction, unless below)
    # Units per encoder direction of model_type pointer_generator (OpenNMT-py's brnn: 2 x 128
    # under a 256 decoder); 0 = hidden_dim, See et al.'s sizes.
    enc_hidden_dim: NonNegativeInt = 0
    emb_dim: PositiveInt = 128
    pointer_gen: bool = True
    coverage: bool = False
    cov_loss_wt: NonNegativeFloat = 1.0  # lambda in See et al. eq. 13
    # See et al.'s model: on embeddings and o_t in training (not in the paper)
    dropout: Annotated[float, Range(0, 1, max_exclusive=True)] = 0.0
    rand_unif_init_mag: NonNegativeFloat = 0.02
    trunc_norm_init_std: NonNegativeFloat = 1e-4
    emb_init_std: NonNegativeFloat = 0.0  # stddev of the embedding init; 0 = trunc_norm_init_std
    # Paulus et al. (2017), model_type = "deep_reinforced":
    intra_temporal_attention: bool = True  # eq. 3
    intra_decoder_attention: bool = True  # eq. 6-8
    shared_embedding: bool = True  # eq. 13, W_out = tanh(W_emb W_proj)
    sample_replace_prob: Probability = 0.25  # appendix B: own sample as the previous token in ML
    # Rush et al. (2015), model_type = "abs":
    abs_encoder: Literal["bow", "conv", "attention"] = "attention"  # section 3.2
    abs_window: PositiveInt = 5  # C, the NNLM's context window
    abs_smoothing: PositiveInt = 2  # Q: attention smoothing window, conv width 2Q+1
    abs_conv_layers: PositiveInt = 3  # L, convolutional encoder
    # layer normalisation before each convolution's tanh (not in the paper; ABSEncoder says why)
    abs_conv_norm: bool = False
    # How the LSTMs run and the loss is differentiated (pgn_tf.ops): "fused" (one loop for both
    # encoder directions, gradients written out; faster on CPUs, docs/performance.md), "keras"
    # (the Keras layers, cuDNN on a GPU, every layer option honoured; autodiff), "auto" (keras
    # where a GPU is visible, else fused; train logs the choice). The same variables either way:
    # a checkpoint trained with one restores into the other.
    rnn_impl: Literal["auto", "fused", "keras"] = "auto"

    def attends_to_source(self) -> bool:
        """Whether the model's attention points at source words (what decode.replace_unk and
        the RL reward's [UNK] replacement read): every model but ABS with the bag-of-words or
        convolutional encoder (uniform / no attention)."""
        return not (self.model_type == "abs" and self.abs_encoder != "attention")


@dataclasses.dataclass
class TrainConfig:
    batch_size: PositiveInt = 16  # global batch size, split across replicas
    max_steps: NonNegativeInt = 10_000
    # > 0: also stop (checkpoint, eval) once training ran this long
    max_minutes: NonNegativeFloat = 0.0
    checkpoint_every: PositiveInt = 500
    eval_every: PositiveInt = 500
    eval_batches: PositiveInt = 50  # eval loss is averaged over at most this many batches
    # decoded validation samples + attention maps in TensorBoard per eval
    eval_samples: NonNegativeInt = 3
    log_every: PositiveInt = 50
    keep_checkpoints: PositiveInt = 3
    optimizer: Literal["adagrad", "adam", "sgd"] = "adagrad"
    learning_rate: PositiveFloat = 0.15
    adagrad_init_acc: NonNegativeFloat = 0.1
    max_grad_norm: float = 2.0  # global-norm clipping; <= 0 turns it off
    # The learning rate over a phase: "constant", or "cosine" down to lr_min_ratio x it over the
    # budget (train.max_minutes if set, else max_steps), after warmup_steps of linear warm-up.
    lr_schedule: Literal["constant", "cosine"] = "constant"
    lr_min_ratio: Probability = 0.1
    warmup_steps: NonNegativeInt = 0
    # Rush et al. (2015) section 7: halve the learning rate when validation NLL does not improve,
    # checked at each "eval" or at each "epoch"'s end ("none": never).
    lr_halving: Literal["none", "eval", "epoch"] = "none"
    # The training objective (pgn_tf.objectives): "ml" (teacher forcing), "mixed" (Paulus et al.
    # eq. 16) or "rl" (eq. 15). Changing it in a model dir starts a new phase (fresh optimizer).
    objective: Literal["ml", "mixed", "rl"] = "ml"
    # per example: "mean" over tokens (See eq. 7) or "sum" (eq. 14)
    nll_reduction: Literal["mean", "sum"] = "mean"
    pointer_supervision: bool = False  # Paulus et al.: u_t = 1 supervised for copied OOVs
    rl_gamma: Probability = 0.9984  # gamma of eq. 16
    rl_learning_rate: PositiveFloat = 1e-4  # the learning rate of the mixed / rl phases
    # Sampled sequences an article in eq. 15. 1: Paulus et al. (one sample, the greedy output as
    # its baseline). k > 1: k samples, each against the mean reward of the other k - 1
    # (objectives.leave_one_out_baseline; not in the paper), at about k times the sampling's
    # cost; a variance reduction for long summaries (docs/results/digests.md).
    rl_samples: PositiveInt = 1
    # The self-critical reward scores samples and baseline as decoding outputs them: with
    # decode.replace_unk in force, an [UNK] counts as the most-attended source word. Off: an
    # [UNK] matches nothing, so the reward pays for copying what replace_unk copies anyway
    # (docs/results/quality.md "Self-critical RL on See et al.'s model"). The papers' presets decode
    # without replace_unk, so their rewards read [UNK] as matching nothing, as Paulus et al.'s.
    reward_replace_unk: bool = True
    # A new phase (coverage conversion, new objective) starts from the previous phase's "best"
    # checkpoint, or its "latest".
    convert_from: Literal["best", "latest"] = "best"
    # A phase's name: changing it in a model dir starts a new phase with the same objective (a
    # restart from convert_from's checkpoint with a fresh optimizer, at this run's learning
    # rate), as the RL study's ML control restarts ML from the best checkpoint the RL arms
    # start from (research/studies/rl_converged.py). Unchanged (the default): a plain resume.
    phase_name: str = ""
    # The best checkpoint: lowest eval "loss", or highest validation "rouge" (select_rouge of
    # eval_rouge_examples validation articles after eval_skip, decoded with the decode
    # config). Phases with a policy-gradient objective always select by ROUGE.
    select_by: Literal["loss", "rouge"] = "loss"
    select_rouge: Literal["rouge1", "rouge2", "rougeLsum"] = "rougeLsum"
    eval_rouge_examples: PositiveInt = 500
    # Validation pairs that every measure of the run skips (the eval loss and validation
    # ROUGE), so that selection and early stopping see none of the pairs a report scores
    # (research/studies/quality_table.py scores the first 1,500 and selects on the rest). Its old
    # name, train.eval_rouge_skip (skipped by ROUGE only, the eval loss read from the first
    # pair), is read as this one.
    eval_skip: NonNegativeInt = 0
    early_stop_patience: NonNegativeInt = 0  # > 0: stop after this many evals without a better best
    # "BASE/NAME": each new best checkpoint is exported there as the next SavedModel version
    # (OpenNMT-tf's export_on_best), so a running serving.server picks it up.
    export_on_best: str = ""
    # stop (an error) after this many non-finite steps in a row
    max_nonfinite_steps: PositiveInt = 20
    seed: int = 1234
    # "" (float32), "mixed_bfloat16" or "mixed_float16": Keras mixed precision, bf16 / float16
    # compute with float32 variables and float32 losses (float16 with Keras's dynamic loss
    # scaling; bf16 needs none). "auto" (pgn_tf.training.hardware.choose_policy): on a GPU (compute
    # capability >= 7.0) mixed_float16, not measured here; without one mixed_bfloat16 where
    # the CPU multiplies bf16 natively, float32 elsewhere. Off by default
    # (numerics the same on every machine); `auto` in debian_pgn, whose H = 256 matmuls it
    # speeds up at no ROUGE cost (docs/results/quality.md "bfloat16 at H = 256"), and in reference_onmt
    # (measured faster on top of its length buckets, docs/performance.md).
    mixed_precision: Literal["", "auto", "mixed_bfloat16", "mixed_float16"] = ""
    # XLA-compiles the training step (tf.function(jit_compile=True)), one compilation per batch
    # shape: training batches are then padded to their length bucket's bounds (a few shapes).
    # One replica, objective "ml" and the pointer_generator model only (the rewards of "mixed"
    # and "rl" run a kernel XLA lacks; the other models are not tested under XLA). Off: on the
    # CPUs measured an XLA step is far slower than the default one (docs/performance.md).
    jit_compile: bool = False


@dataclasses.dataclass
class DecodeConfig:
    beam_size: PositiveInt = 4
    min_dec_steps: NonNegativeInt = 35
    max_dec_steps: PositiveInt = 120
    length_penalty: NonNegativeFloat = 0.0  # 0 = average log-prob (See et al.); >0 = GNMT alpha
    block_trigrams: bool = False
    avoid_unk: bool = False
    batch_size: PositiveInt = 32
    # Rush et al. (2015) section 5, ABS+: weights of [log p, unigram, bigram, trigram match with
    # the article, reordering], comma-separated ("" = plain log p); pgn_tf.tune finds them.
    abs_plus_weights: str = ""
    extractive: bool = False  # only article words (and [STOP]) may be emitted (Table 3)
    # An output [UNK] becomes the source word with the highest attention at its step
    # (OpenNMT's replace_unk); the raw output stays available (raw_summaries, raw_tokens).
    # None of the three papers does this, so their presets leave it off; the corpus presets
    # (debian_*, digest_*, reference_onmt, tiny) turn it on, as this project's default. On a
    # model that attends to no source word (ABS's bow and conv encoders) it avoids [UNK]
    # instead (Config.avoids_unk).
    replace_unk: bool = False
    # Wu et al. (2016) GNMT coverage penalty beta: + beta * sum_i log(min(sum_t a_t,i, 1)) on a
    # finished hypothesis' score (0 = off).
    coverage_penalty: NonNegativeFloat = 0.0
    # A hypothesis may not emit a word it already emitted (punctuation and special tokens exempt).
    block_repeated_words: bool = False
    # With block_repeated_words: function words (pgn_tf.text.FUNCTION_WORDS) may repeat too, so
    # only a content word is blocked: "library for X and for Y" stays writable, "game game"
    # does not. Off: every word is blocked, as the presets measured it.
    block_content_words_only: bool = False
    # Rush et al. (2015): N > 0 emits exactly N words ([STOP] never; min/max steps ignored), with
    # hypothesis recombination on the last model.abs_window ids for ABS; 0 = [STOP]-based.
    fixed_length: NonNegativeInt = 0
    # The output text (`summaries`, and pgn-summarize / the export) has one sentence a line: a
    # line ends after each ".", "!" or "?" token, as rougeLsum and multi-sentence references
    # (the digests' synopses) split them. Off: one line, as before this field existed.
    sentence_lines: bool = False
    # The model's decoding step (the pointer_generator's) compiled as one XLA cluster
    # (tf.function(jit_compile=True)) inside the search's loop, which stays as it is: in-process
    # decoding only (evaluate, summarize, validation ROUGE, the benchmarks); an export leaves it
    # off, as TF Serving runs no XLA on the CPU by default. XLA compiles once a shape, so the
    # source length is padded up to a multiple of JIT_SOURCE_MULTIPLE tokens (capped at
    # data.max_enc_steps) and the beam search's batch shrinks to powers of two only: a few
    # compilations of about a second each per process. Off: docs/performance.md says what it
    # gains and costs where it was measured.
    jit_step: bool = False
    # K > 0: the search's vocabulary layer, softmax and top-k run over each batch's candidate
    # words only (pgn_tf.decoding.shortlist): the K most frequent words of the vocabulary, the
    # special tokens and every word of the batch's articles, as Marian's shortlists and
    # CTranslate2's vocabulary_mapping do on CPUs; a summary writes mostly those, and the
    # pointer copies the rest (extended ids stay exact). 0: the full vocabulary. Off by
    # default: the summaries it changes are measured before it is turned on.
    shortlist: NonNegativeInt = 0
    # m > 0, with a shortlist: the softmax mass outside the candidates is estimated from m of
    # the words outside them (pgn_tf.decoding.shortlist.tail_sample), so that a candidate's
    # P_vocab is not inflated by the renormalisation, which favours generating over copying.
    # 0 (the default): the candidates' softmax renormalised, which keeps nearly every one-line
    # headline and costs no speed; multi-sentence summaries need the estimate
    # (docs/summarizing.md "Choosing the shortlist's K").
    shortlist_tail: NonNegativeInt = 0


# decode.jit_step: the source length a compiled step sees is padded up to a multiple of this.
JIT_SOURCE_MULTIPLE = 64


@dataclasses.dataclass
class Config:
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    decode: DecodeConfig = dataclasses.field(default_factory=DecodeConfig)

    def replaces_unk(self) -> bool:
        """Whether decoding puts the most-attended source word in place of an output [UNK]
        (decode.replace_unk, not overruled by decode.avoid_unk, on a model whose attention
        points at source words)."""
        d = self.decode
        return d.replace_unk and not d.avoid_unk and self.model.attends_to_source()

    def avoids_unk(self) -> bool:
        """Whether the search never emits [UNK]: decode.avoid_unk, or decode.replace_unk on a
        model whose attention points at no source word (ABS's bag-of-words and convolutional
        encoders). replace_unk asks for outputs a reader can use; with no attended word to put
        in an [UNK]'s place, the search takes the best word that is not [UNK] instead of
        handing the reader one."""
        d = self.decode
        return d.avoid_unk or (d.replace_unk and not self.model.attends_to_source())

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        cfg = cls()
        for section, values in d.items():
            if not hasattr(cfg, section):
                raise ValueError(f"unknown config section '{section}'")
            for key, value in values.items():
                _set(cfg, f"{section}.{key}", value)
        return cfg

    def validate(self) -> Config:
        """Checks every value against its field's declared type, then the rules that tie fields
        together; raises ValueError naming the key, what it allows and what it got.

        Types come from the annotations: bool, int, float (an int is accepted; NaN and inf are
        not), str, `Literal[...]` (the choices) and `Annotated[..., Range(...)]` (the bounds), so
        a new field is checked as soon as it is declared. Returns self.
        """
        for section in dataclasses.fields(self):
            value = getattr(self, section.name)
            if type(value) is not _hints(Config)[section.name]:
                raise ValueError(f"config section '{section.name}' must be a "
                                 f"{_hints(Config)[section.name].__name__}, got {value!r}")
            for key, hint in _hints(type(value)).items():
                _checked(f"{section.name}.{key}", hint, getattr(value, key))
        m = self.model
        if m.enc_hidden_dim and m.model_type != "pointer_generator":
            raise ValueError(_bad("model.enc_hidden_dim", f"0 with model.model_type="
                                  f"'{m.model_type}' (only pointer_generator sets it)",
                                  m.enc_hidden_dim))
        if m.dropout and m.model_type != "pointer_generator":
            # Paulus et al.'s and Rush et al.'s models have no dropout layer: refused, not ignored
            raise ValueError(_bad("model.dropout", f"0 with model.model_type='{m.model_type}' "
                                  "(only pointer_generator applies it)", m.dropout))
        data = self.data
        if data.buckets_per_length and (data.bucket_by_summary_length or not data.bucket_by_length):
            raise ValueError(_bad("data.buckets_per_length", "0 unless data.bucket_by_length is "
                                  "true and data.bucket_by_summary_length false (its n * n "
                                  "buckets replace the summary-length ones)",
                                  data.buckets_per_length))
        t = self.train
        if t.jit_compile and (t.objective != "ml" or m.model_type != "pointer_generator"):
            raise ValueError(_bad("train.jit_compile", "false unless train.objective='ml' and "
                                  "model.model_type='pointer_generator' (XLA cannot compile the "
                                  "mixed / rl reward; the other models are untested under it)",
                                  True))
        d = self.decode
        if d.jit_step and m.model_type != "pointer_generator":
            raise ValueError(_bad("decode.jit_step", "false unless model.model_type="
                                  "'pointer_generator' (the other models' steps are untested "
                                  "under XLA)", True))
        if d.min_dec_steps > d.max_dec_steps:
            raise ValueError(_bad("decode.min_dec_steps",
                                  f"<= decode.max_dec_steps ({d.max_dec_steps})", d.min_dec_steps))
        return self

    def save(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
        os.replace(tmp, path)


def preset(name: str) -> Config:
    """The Config of preset `name` (pgn_tf/presets.py): its bases' values, then its own."""
    cfg = Config()
    for key, value in presets.values(name):
        _set(cfg, key, value)
    return cfg


# Old key -> its new name: model dirs and commands of earlier versions keep working.
RENAMED = {"train.eval_rouge_skip": "train.eval_skip"}


def _set(cfg: Config, dotted: str, value: Any) -> None:
    """Sets one key, type-checked against the field's declared type (strings from `--set` and
    YAML are parsed to it first); raises ValueError naming the key."""
    dotted = RENAMED.get(dotted, dotted)
    section_name, _, key = dotted.partition(".")
    section = getattr(cfg, section_name, None)
    if section is None or not dataclasses.is_dataclass(section) or not key:
        sections = ", ".join(f.name for f in dataclasses.fields(Config))
        raise ValueError(f"unknown config key '{dotted}' (sections: {sections})")
    hints = _hints(type(section))
    if key not in hints:
        raise ValueError(
            f"unknown config key '{dotted}'; {section_name} has: {', '.join(sorted(hints))}"
        )
    base, _, _ = _spec(hints[key])
    if isinstance(value, str) and base is not str:
        try:
            value = _parse_value(value, base)
        except ValueError as e:
            raise ValueError(_bad(dotted, str(e), value)) from None
    setattr(section, key, _checked(dotted, hints[key], value))


def load(name_or_path: str) -> Config:
    """A preset by name, or a YAML/JSON file of sections (missing keys keep their defaults)."""
    if name_or_path in PRESETS:
        return preset(name_or_path)
    if os.path.isfile(name_or_path):
        with open(name_or_path) as f:
            d = yaml.safe_load(f) or {}
        if not isinstance(d, dict):
            raise ValueError(f"config file {name_or_path} must hold a mapping of sections")
        base = d.pop("preset", None)
        cfg = load(base) if base else Config()
        for section, values in d.items():
            for key, value in (values or {}).items():
                _set(cfg, f"{section}.{key}", value)
        return cfg
    raise ValueError(
        f"unknown config '{name_or_path}': not a file and not a preset "
        f"({', '.join(sorted(PRESETS))})"
    )


def apply_overrides(cfg: Config, overrides: list[str] | None) -> Config:
    """Applies `section.key=value` strings in order, then validates the result."""
    for item in overrides or []:
        if "=" not in item:
            raise ValueError(f"--set expects section.key=value, got '{item}'")
        key, value = item.split("=", 1)
        _set(cfg, key.strip(), value.strip())
    return cfg.validate()


def apply_decode_overrides(cfg: Config, overrides: list[str] | None, where: str) -> Config:
    """apply_overrides for a built model: only decode.* keys, since the model's architecture,
    vocabulary and tokenizer were fixed when it was trained; any other key is refused (a
    UserError naming `where`), not taken and silently ignored."""
    for item in overrides or []:
        if not item.strip().startswith("decode."):
            raise UserError(f"{where} --set only changes decode.* keys, got '{item}'")
    return apply_overrides(cfg, overrides)


def resolve(name_or_path: str | None, overrides: list[str] | None = None) -> Config:
    """A preset or file with `--set` overrides applied, validated (Config.validate)."""
    cfg = load(name_or_path) if name_or_path else Config()
    return apply_overrides(cfg, overrides)


def best_measure(cfg: Config) -> tuple[str, str, bool]:
    """(name, eval key, higher is better) of what a model dir's best checkpoint is chosen by:
    validation ROUGE (train.select_by = rouge, and always in a policy-gradient phase) or the
    eval loss. The name tells phases apart: a loss with coverage terms does not compare with
    one without; ROUGE compares across phases."""
    if cfg.train.select_by == "rouge" or cfg.train.objective != "ml":
        return f"rouge:{cfg.train.select_rouge}", cfg.train.select_rouge, True
    return ("loss+coverage" if cfg.model.coverage else "loss"), "loss", False


def load_from_model_dir(model_dir: str) -> Config:
    path = os.path.join(model_dir, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{model_dir} has no config.json: is it a pgn_tf model dir?")
    with open(path) as f:
        return Config.from_dict(json.load(f)).validate()
