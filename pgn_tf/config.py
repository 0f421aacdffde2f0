"""Typed configuration: dataclasses, paper presets, YAML/JSON files and `--set` overrides.

A `Config` has four sections (`data`, `model`, `train`, `decode`). Entry points build one with
`resolve(config_name_or_path, overrides)`; every run writes the resolved config next to its
checkpoints (`config.json`), and later commands (evaluate, export, summarize) read it back.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import yaml


@dataclasses.dataclass
class DataConfig:
    vocab_size: int = 50_000  # includes the 4 special tokens, as in See et al.'s code
    max_enc_steps: int = 400  # article truncated to this many tokens
    max_dec_steps: int = 100  # summary truncated to this many tokens (training)
    vocab_path: str = ""  # "" = <model_dir>/vocab.txt, built from the training data if absent
    min_count: int = 1  # words seen fewer times are left out of a built vocab
    lowercase: bool = True
    replace_digits: bool = False  # Rush et al.: every digit becomes '#'
    shuffle_buffer: int = 10_000
    bucket_by_length: bool = True  # training batches by article and summary length
    cache_tokens: bool = True  # training: tokenize once, keep the tokens in memory for later epochs


@dataclasses.dataclass
class ModelConfig:
    model_type: str = "pointer_generator"
    hidden_dim: int = 256  # H: the decoder LSTM (and each encoder direction unless set below)
    enc_hidden_dim: int = 0  # units per encoder direction (See et al.'s model); 0 = hidden_dim
    emb_dim: int = 128
    pointer_gen: bool = True
    coverage: bool = False
    cov_loss_wt: float = 1.0  # lambda in See et al. eq. 13
    dropout: float = 0.0  # See et al.'s model: on embeddings and o_t in training (not in the paper)
    rand_unif_init_mag: float = 0.02
    trunc_norm_init_std: float = 1e-4
    emb_init_std: float = 0.0  # stddev of the embedding init; 0 = trunc_norm_init_std
    # Paulus et al. (2017), model_type = "deep_reinforced":
    intra_temporal_attention: bool = True  # eq. 3
    intra_decoder_attention: bool = True  # eq. 6-8
    shared_embedding: bool = True  # eq. 13, W_out = tanh(W_emb W_proj)
    sample_replace_prob: float = 0.25  # appendix B: own sample as the previous token in ML
    # Rush et al. (2015), model_type = "abs":
    abs_encoder: str = "attention"  # bow | conv | attention (section 3.2)
    abs_window: int = 5  # C, the NNLM's context window
    abs_smoothing: int = 2  # Q: attention smoothing window, conv width 2Q+1
    abs_conv_layers: int = 3  # L, convolutional encoder


@dataclasses.dataclass
class TrainConfig:
    batch_size: int = 16  # global batch size, split across replicas
    max_steps: int = 10_000
    max_minutes: float = 0.0  # > 0: also stop (checkpoint, eval) once training ran this long
    checkpoint_every: int = 500
    eval_every: int = 500
    eval_batches: int = 50  # eval loss is averaged over at most this many batches
    eval_samples: int = 3  # decoded validation samples + attention maps in TensorBoard per eval
    log_every: int = 50
    keep_checkpoints: int = 3
    optimizer: str = "adagrad"
    learning_rate: float = 0.15
    adagrad_init_acc: float = 0.1
    max_grad_norm: float = 2.0  # global-norm clipping; <= 0 turns it off
    # The learning rate over a phase: "constant", or "cosine" down to lr_min_ratio x it over the
    # budget (train.max_minutes if set, else max_steps), after warmup_steps of linear warm-up.
    lr_schedule: str = "constant"
    lr_min_ratio: float = 0.1
    warmup_steps: int = 0
    # Rush et al. (2015) section 7: halve the learning rate when validation NLL does not improve,
    # checked at each "eval" or at each "epoch"'s end ("none": never).
    lr_halving: str = "none"
    # The training objective (pgn_tf.objectives): "ml" (teacher forcing), "mixed" (Paulus et al.
    # eq. 16) or "rl" (eq. 15). Changing it in a model dir starts a new phase (fresh optimizer).
    objective: str = "ml"
    nll_reduction: str = "mean"  # per example: "mean" over tokens (See eq. 7) or "sum" (eq. 14)
    pointer_supervision: bool = False  # Paulus et al.: u_t = 1 supervised for copied OOVs
    rl_gamma: float = 0.9984  # gamma of eq. 16
    rl_learning_rate: float = 1e-4  # the learning rate of the mixed / rl phases
    # A new phase (coverage conversion, new objective) starts from the previous phase's "best"
    # checkpoint, or its "latest".
    convert_from: str = "best"
    # The best checkpoint: lowest eval "loss", or highest validation "rouge" (select_rouge of
    # the first eval_rouge_examples validation articles, decoded with the decode config). Phases
    # with a policy-gradient objective always select by ROUGE.
    select_by: str = "loss"
    select_rouge: str = "rougeLsum"
    eval_rouge_examples: int = 500
    early_stop_patience: int = 0  # > 0: stop after this many evals without a better best
    max_nonfinite_steps: int = 20  # stop (an error) after this many non-finite steps in a row
    seed: int = 1234
    # "" (float32), "auto", "mixed_bfloat16" or "mixed_float16": Keras mixed precision, low-
    # precision compute with float32 variables and float32 losses. "auto" resolves to
    # mixed_bfloat16 on CPUs with native bf16 matmuls (AVX512_BF16 or AMX), mixed_float16 (with
    # dynamic loss scaling) on a GPU, float32 elsewhere (pgn_tf.hardware). README "Performance"
    # has the figures that decided the default.
    mixed_precision: str = ""
    # XLA-compile the training step (tf.function(jit_compile=True)): one compilation per batch
    # shape, so it pairs with data.bucket_by_length (a few padded shapes).
    jit_compile: bool = False


@dataclasses.dataclass
class DecodeConfig:
    beam_size: int = 4
    min_dec_steps: int = 35
    max_dec_steps: int = 120
    length_penalty: float = 0.0  # 0 = average log-prob (See et al.); >0 = GNMT alpha
    block_trigrams: bool = False
    avoid_unk: bool = False
    batch_size: int = 32
    # Rush et al. (2015) section 5, ABS+: weights of [log p, unigram, bigram, trigram match with
    # the article, reordering], comma-separated ("" = plain log p); pgn_tf.tune finds them.
    abs_plus_weights: str = ""
    extractive: bool = False  # only article words (and [STOP]) may be emitted (Table 3)


@dataclasses.dataclass
class Config:
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    decode: DecodeConfig = dataclasses.field(default_factory=DecodeConfig)

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

    def save(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
        os.replace(tmp, path)


def see2017_baseline() -> Config:
    """See et al. (2017) section 5: the attentional seq2seq baseline (50k vocab)."""
    cfg = Config()
    cfg.model.pointer_gen = False
    return cfg


def see2017_pgn() -> Config:
    """See et al. (2017): pointer-generator, trained without coverage."""
    return Config()


def see2017_coverage() -> Config:
    """See et al. (2017): pointer-generator + coverage (lambda = 1), the final training phase."""
    cfg = Config()
    cfg.model.coverage = True
    return cfg


def paulus2017() -> Config:
    """Paulus et al. (2017) appendix B: encoder 2x200, decoder 400, embeddings 100, 50k output
    vocab, batch 50, Adam 1e-3 (ML; 1e-4 for the mixed phase), 800/100 tokens, beam 5 with
    trigram blocking; L_ml summed over the summary (eq. 14); the switch supervised for copied
    out-of-vocabulary words (section 2.3, appendix A.3). Train ML, then continue with
    `--set train.objective=mixed`. The paper states no minimum summary length (decoding runs
    0-100 tokens) and no gradient clipping. Not the paper's: embeddings start at stddev 0.1
    (it used GloVe vectors, which are not available here; See et al.'s 1e-4 leaves the tied
    output layer tanh(W_emb W_proj) near zero, README "Quality")."""
    cfg = Config()
    cfg.data.max_enc_steps = 800
    cfg.model = ModelConfig(model_type="deep_reinforced", hidden_dim=200, emb_dim=100,
                            emb_init_std=0.1)
    cfg.train.batch_size = 50
    cfg.train.optimizer = "adam"
    cfg.train.learning_rate = 1e-3
    cfg.train.max_grad_norm = 0.0
    cfg.train.nll_reduction = "sum"
    cfg.train.pointer_supervision = True
    cfg.decode = DecodeConfig(beam_size=5, min_dec_steps=0, max_dec_steps=100,
                              block_trigrams=True)
    return cfg


def rush2015_abs() -> Config:
    """Rush et al. (2015) section 7: ABS with the attention-based encoder, D = 200, H = 400,
    C = 5, Q = 2; mini-batch SGD at 0.05 on the NLL (summed over the summary), batch 64, the
    learning rate halved when validation log-likelihood does not improve for an epoch; digits
    replaced by '#'. The encoder is `model.abs_encoder` (bow, conv, attention)."""
    cfg = Config()
    cfg.data.max_enc_steps = 100
    cfg.data.max_dec_steps = 30
    cfg.data.replace_digits = True
    cfg.model = ModelConfig(model_type="abs", hidden_dim=400, emb_dim=200, pointer_gen=False)
    cfg.train.batch_size = 64
    cfg.train.optimizer = "sgd"
    cfg.train.learning_rate = 0.05
    cfg.train.max_grad_norm = 0.0
    cfg.train.nll_reduction = "sum"
    cfg.train.lr_halving = "epoch"
    cfg.decode = DecodeConfig(beam_size=5, min_dec_steps=3, max_dec_steps=30)
    return cfg


def _debian(cfg: Config, minutes: float) -> Config:
    """The Debian package-description corpus (README "Quality"): one-line synopses of long
    descriptions, so articles are cut to 100 tokens, summaries to 20, decoding to 3-30 tokens;
    a 5k vocab (the output softmax is a large share of a step's cost here; the pointer copies the
    rest); batch 32; a wall-clock budget, not steps; eval loss over 50 batches (1,600 pairs),
    which picks the best checkpoint."""
    cfg.data.vocab_size = 5_000
    cfg.data.max_enc_steps = 100
    cfg.data.max_dec_steps = 20
    cfg.train.batch_size = 32
    cfg.train.max_steps = 1_000_000
    cfg.train.max_minutes = minutes
    cfg.train.eval_every = 500
    cfg.train.eval_batches = 50
    cfg.train.checkpoint_every = 500
    cfg.decode.min_dec_steps = 3
    cfg.decode.max_dec_steps = 30
    cfg.decode.batch_size = 64
    return cfg


def _debian_see(cfg: Config, minutes: float) -> Config:
    """See et al.'s models on the Debian corpus: H = E = 128, Adam at 1e-3 (their Adagrad at
    0.15 is made for days of training; Adam gets further in an hour, README "Quality")."""
    cfg = _debian(cfg, minutes)
    cfg.model.hidden_dim = cfg.model.emb_dim = 128
    cfg.train.optimizer = "adam"
    cfg.train.learning_rate = 1e-3
    return cfg


def debian_baseline() -> Config:
    """See et al.'s baseline on the Debian corpus, 60 minutes."""
    return _debian_see(see2017_baseline(), 60)


def debian_pgn() -> Config:
    """The pointer-generator, 45 minutes (debian_coverage adds the last 15 in the same dir)."""
    return _debian_see(see2017_pgn(), 45)


def debian_coverage() -> Config:
    """See et al.'s final phase: coverage switched on in debian_pgn's model dir, 15 minutes
    (a quarter of the budget, not the paper's 1% of steps: repetition kept falling with it)."""
    cfg = debian_pgn()
    cfg.model.coverage = True
    cfg.train.max_minutes = 15
    return cfg


def debian_paulus() -> Config:
    """Paulus et al. with a 2x64 encoder (decoder 128), 64-wide embeddings: ML for 50 minutes;
    `--set train.objective=mixed --set train.max_minutes=10` in the same dir adds the RL phase."""
    cfg = _debian(paulus2017(), 50)
    cfg.model.hidden_dim = cfg.model.emb_dim = 64
    cfg.decode.beam_size = 4
    return cfg


def debian_abs() -> Config:
    """Rush et al.'s ABS (attention encoder) with H = 256, D = 128, 60 minutes; SGD at 0.2 with
    norm-5 clipping, a faster rate than the paper's 0.05 for an hour's budget (not tuned)."""
    cfg = _debian(rush2015_abs(), 60)
    cfg.model.hidden_dim, cfg.model.emb_dim = 256, 128
    cfg.train.learning_rate = 0.2
    cfg.train.max_grad_norm = 5.0
    cfg.train.batch_size = 64
    cfg.decode.beam_size = 4
    return cfg


def reference_onmt() -> Config:
    """The reference OpenNMT-py system of the speed comparison (its onmt-ref.yaml, run by
    benchmarks/compare_peer.py): See et al.'s pointer-generator + coverage (lambda = 1) with a
    bidirectional LSTM encoder of 2 x 128 units, a 256 decoder, 128-wide embeddings, a shared
    20k vocabulary, batch 32, articles cut to 100 tokens and summaries to 30, Adagrad 0.15
    (accumulator 0.1, global-norm clip 2); decoding with beam 4, batch 64, at most 30 tokens
    and no minimum (onmt_translate's defaults with -max_length 30). README "Performance" has
    its parameter count beside the peer's."""
    cfg = see2017_coverage()
    cfg.data.vocab_size = 20_000
    cfg.data.max_enc_steps = 100
    cfg.data.max_dec_steps = 30
    cfg.model.hidden_dim = 256
    cfg.model.enc_hidden_dim = 128
    cfg.model.emb_dim = 128
    cfg.train.batch_size = 32
    cfg.decode = DecodeConfig(beam_size=4, min_dec_steps=0, max_dec_steps=30, batch_size=64)
    return cfg


def tiny() -> Config:
    """The quickstart's model: trains on the synthetic corpus in a couple of minutes on 2 CPUs."""
    cfg = Config()
    cfg.data = DataConfig(vocab_size=200, max_enc_steps=80, max_dec_steps=24, shuffle_buffer=2000)
    cfg.model.hidden_dim = 64
    cfg.model.emb_dim = 32
    cfg.train = TrainConfig(
        batch_size=32,
        max_steps=600,
        checkpoint_every=200,
        eval_every=200,
        eval_batches=5,
        log_every=50,
        learning_rate=0.15,
    )
    cfg.decode = DecodeConfig(beam_size=4, min_dec_steps=3, max_dec_steps=30)
    return cfg


PRESETS = {
    "see2017_baseline": see2017_baseline,
    "see2017_pgn": see2017_pgn,
    "see2017_coverage": see2017_coverage,
    "paulus2017": paulus2017,
    "rush2015_abs": rush2015_abs,
    "debian_baseline": debian_baseline,
    "debian_pgn": debian_pgn,
    "debian_coverage": debian_coverage,
    "debian_paulus": debian_paulus,
    "debian_abs": debian_abs,
    "reference_onmt": reference_onmt,
    "tiny": tiny,
}


def _parse_value(text: str, current: Any) -> Any:
    if isinstance(current, bool):
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean, got '{text}'")
    if isinstance(current, int):
        return int(text)
    if isinstance(current, float):
        return float(text)
    return text


def _set(cfg: Config, dotted: str, value: Any) -> None:
    section_name, _, key = dotted.partition(".")
    section = getattr(cfg, section_name, None)
    if section is None or not dataclasses.is_dataclass(section) or not key:
        sections = ", ".join(f.name for f in dataclasses.fields(Config))
        raise ValueError(f"unknown config key '{dotted}' (sections: {sections})")
    fields = {f.name: f for f in dataclasses.fields(section)}
    if key not in fields:
        raise ValueError(
            f"unknown config key '{dotted}'; {section_name} has: {', '.join(sorted(fields))}"
        )
    # The field's declared default gives the type (a preset may hold 60 where 60.0 is meant).
    default = fields[key].default
    current = getattr(section, key) if default is dataclasses.MISSING else default
    if isinstance(value, str) and not isinstance(current, str):
        try:
            value = _parse_value(value, current)
        except ValueError as e:
            raise ValueError(f"bad value for '{dotted}': {e}") from None
    elif isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    setattr(section, key, value)


def load(name_or_path: str) -> Config:
    """A preset by name, or a YAML/JSON file of sections (missing keys keep their defaults)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]()
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
    """Applies `section.key=value` strings in order."""
    for item in overrides or []:
        if "=" not in item:
            raise ValueError(f"--set expects section.key=value, got '{item}'")
        key, value = item.split("=", 1)
        _set(cfg, key.strip(), value.strip())
    return cfg


def resolve(name_or_path: str | None, overrides: list[str] | None = None) -> Config:
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
        return Config.from_dict(json.load(f))
