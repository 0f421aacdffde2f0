import dataclasses
import json

import pytest

from pgn_tf import config
from pgn_tf.utils import typed_fields


def test_see2017_presets_hold_the_paper_values():
    cfg = config.resolve("see2017_coverage")
    assert (cfg.model.hidden_dim, cfg.model.emb_dim, cfg.data.vocab_size) == (256, 128, 50_000)
    assert (cfg.train.batch_size, cfg.data.max_enc_steps, cfg.data.max_dec_steps) == (16, 400, 100)
    assert cfg.train.optimizer == "adagrad"
    assert (cfg.train.learning_rate, cfg.train.adagrad_init_acc) == (0.15, 0.1)
    assert (cfg.train.max_grad_norm, cfg.model.cov_loss_wt) == (2.0, 1.0)
    assert cfg.model.coverage and cfg.model.pointer_gen
    assert not config.resolve("see2017_baseline").model.pointer_gen
    assert not config.resolve("see2017_pgn").model.coverage


def test_overrides_parse_by_field_type():
    cfg = config.resolve(
        "see2017_pgn",
        ["model.hidden_dim=64", "model.coverage=true", "train.learning_rate=0.5",
         "data.vocab_size=5000", "train.max_steps=7", "train.checkpoint_every=3",
         "data.max_enc_steps=100", "data.max_dec_steps=20", "train.batch_size=4",
         "model.emb_dim=8", "model.pointer_gen=false"],
    )
    assert cfg.model.hidden_dim == 64 and cfg.model.coverage is True
    assert cfg.train.learning_rate == 0.5 and cfg.model.pointer_gen is False
    assert cfg.train.checkpoint_every == 3


@pytest.mark.parametrize(
    "override, message",
    [("model.hiden_dim=3", "unknown config key 'model.hiden_dim'"),
     ("modle.hidden_dim=3", "unknown config key"),
     ("model.coverage=maybe", "bad value for 'model.coverage'"),
     ("model.hidden_dim", "expects section.key=value")],
)
def test_bad_overrides_name_the_culprit(override, message):
    with pytest.raises(ValueError, match=message):
        config.resolve("see2017_pgn", [override])


def test_yaml_file_with_preset_and_round_trip(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("preset: see2017_baseline\nmodel:\n  hidden_dim: 32\ntrain:\n  max_steps: 9\n")
    cfg = config.load(str(path))
    assert cfg.model.hidden_dim == 32 and not cfg.model.pointer_gen and cfg.train.max_steps == 9
    cfg.save(str(tmp_path / "config.json"))
    again = config.load_from_model_dir(str(tmp_path))
    assert again == cfg
    assert json.loads((tmp_path / "config.json").read_text())["model"]["hidden_dim"] == 32


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown config 'nope'"):
        config.load("nope")


def test_set_parses_by_the_fields_type_not_the_presets_value():
    from pgn_tf import config

    cfg = config.resolve("debian_pgn", ["train.max_minutes=0.5"])  # the preset holds an int
    assert cfg.train.max_minutes == 0.5


@pytest.mark.parametrize("name", sorted(config.PRESETS))
def test_every_preset_validates_and_survives_a_model_dir_round_trip(name, tmp_path):
    cfg = config.preset(name)
    cfg.validate()  # raises on a bad preset
    cfg.save(str(tmp_path / "config.json"))
    assert config.load_from_model_dir(str(tmp_path)) == cfg == config.resolve(name)


def test_presets_are_data_with_a_one_line_description_and_known_bases():
    from pgn_tf import presets

    for name, p in presets.ALL.items():
        assert p.description and "\n" not in p.description and len(p.description) <= 100, name
        assert all(b in presets.ALL and b != name for b in p.bases), name
        for key, _ in presets.values(name):  # every key is a config key (raises otherwise)
            config._set(config.Config(), key, dict(presets.values(name))[key])
    assert "_debian" not in config.PRESETS  # shared parts are not --config choices
    with pytest.raises(ValueError, match="unknown config '_debian'"):
        config.load("_debian")
    # a later value wins: debian_coverage is debian_pgn's dir at its own rate and budget
    cfg = config.preset("debian_coverage")
    assert (cfg.train.learning_rate, cfg.train.max_minutes, cfg.model.coverage) == (2e-4, 15, True)
    assert cfg.model.hidden_dim == 256 and cfg.train.optimizer == "adam"  # from its bases


CHOICES = {"model.model_type": ("pointer_generator", "deep_reinforced", "abs"),
           "model.abs_encoder": ("bow", "conv", "attention"),
           "train.optimizer": ("adagrad", "adam", "sgd"),
           "train.objective": ("ml", "mixed", "rl"),
           "model.rnn_impl": ("auto", "fused", "keras"),
           "train.mixed_precision": ("", "auto", "mixed_bfloat16", "mixed_float16")}


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_literal_fields_take_their_choices_and_reject_others(key):
    for choice in CHOICES[key]:
        section, field = key.split(".")
        assert getattr(getattr(config.resolve("tiny", [f"{key}={choice}"]), section), field) == choice
    with pytest.raises(ValueError) as e:
        config.resolve("tiny", [f"{key}=nope"])
    assert str(e.value).startswith(f"bad value for '{key}': expected one of ")
    assert all(repr(c) in str(e.value) for c in CHOICES[key]) and "got 'nope'" in str(e.value)


@pytest.mark.parametrize("override, expected", [
    ("train.batch_size=0", ">= 1"),
    ("decode.beam_size=-2", ">= 1"),
    ("data.vocab_size=4", ">= 5"),
    ("train.learning_rate=0", "> 0"),
    ("train.learning_rate=inf", "a finite number"),
    ("model.cov_loss_wt=nan", "a finite number"),
    ("model.sample_replace_prob=1.01", "in [0, 1]"),
    ("model.dropout=1", "in [0, 1)"),
    ("train.rl_gamma=-0.5", "in [0, 1]"),
    ("decode.min_dec_steps=-1", ">= 0"),
    ("train.max_minutes=-1", ">= 0"),
    ("data.max_enc_steps=1.5", "an integer"),
    ("train.max_steps=ten", "an integer"),
    ("model.enc_hidden_dim=-1", ">= 0"),
    ("train.learning_rate=fast", "a number"),
])
def test_set_rejects_out_of_range_or_mistyped_values(override, expected):
    key = override.split("=")[0]
    with pytest.raises(ValueError, match=f"^bad value for '{key}': expected ") as e:
        config.resolve("see2017_pgn", [override])
    assert expected in str(e.value)


def test_a_model_dir_config_from_before_the_speed_fields_loads(tmp_path):
    """config.json files written before enc_hidden_dim, jit_compile, bucket_by_summary_length,
    cache_tokens, buckets_per_length and jit_step existed take their defaults: the same model
    and behaviour."""
    cfg = config.preset("tiny").to_dict()
    for section, key in (("model", "enc_hidden_dim"), ("train", "jit_compile"),
                         ("data", "bucket_by_summary_length"), ("data", "cache_tokens"),
                         ("data", "buckets_per_length"), ("decode", "jit_step")):
        del cfg[section][key]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert config.load_from_model_dir(str(tmp_path)) == config.preset("tiny")


def test_validate_checks_fields_set_in_code_and_cross_field_rules():
    cfg = config.preset("tiny")
    cfg.decode.min_dec_steps, cfg.decode.max_dec_steps = 10, 5
    with pytest.raises(ValueError, match=r"'decode.min_dec_steps': expected <= decode.max_dec_"):
        cfg.validate()
    cfg = config.preset("tiny")
    cfg.train.keep_checkpoints = True  # a bool is not an int here
    with pytest.raises(ValueError, match="'train.keep_checkpoints': expected an integer"):
        cfg.validate()
    cfg = config.preset("tiny")
    cfg.model.coverage = 1
    with pytest.raises(ValueError, match="'model.coverage': expected a boolean"):
        cfg.validate()
    cfg = config.preset("tiny")
    cfg.train.optimizer = "Adam"
    with pytest.raises(ValueError, match="'train.optimizer': expected one of 'adagrad'"):
        cfg.validate()
    # min == max is allowed, and a float field takes an int
    cfg = config.preset("tiny")
    cfg.decode.min_dec_steps = cfg.decode.max_dec_steps
    cfg.train.learning_rate = 1
    assert cfg.validate() is cfg


@pytest.mark.parametrize("sets", [["data.bucket_by_summary_length=true"],
                                  ["data.bucket_by_length=false"]])
def test_buckets_per_length_is_refused_beside_the_switches_it_replaces(sets):
    with pytest.raises(ValueError, match="'data.buckets_per_length': expected 0 unless"):
        config.resolve("tiny", [*sets, "data.buckets_per_length=10"])
    assert config.resolve("tiny", [*sets, "data.buckets_per_length=0"]).data.buckets_per_length == 0


def test_reference_onmt_holds_the_reference_sizes():
    cfg = config.resolve("reference_onmt")
    m, d = cfg.model, cfg.data
    assert (m.enc_hidden_dim, m.hidden_dim, m.emb_dim) == (128, 256, 128)
    assert (d.vocab_size, d.max_enc_steps, d.max_dec_steps) == (20_000, 100, 30)
    assert m.pointer_gen and m.coverage and cfg.train.batch_size == 32
    assert (cfg.decode.beam_size, cfg.decode.batch_size, cfg.decode.min_dec_steps,
            cfg.decode.max_dec_steps) == (4, 64, 0, 30)


def test_speed_switches_are_off_by_default():
    """Opt-in until measured: float32, no XLA, article-length buckets only, no token cache."""
    cfg = config.Config()
    assert (cfg.train.mixed_precision, cfg.train.jit_compile) == ("", False)
    assert (cfg.data.bucket_by_summary_length, cfg.data.cache_tokens) == (False, False)
    assert cfg.model.enc_hidden_dim == 0


def test_the_debian_see_presets_take_the_measured_speed_switches():
    """Measured at no ROUGE cost (docs/results/quality.md "bfloat16 at H = 256"): debian_pgn and
    debian_coverage bucket by summary length and use bf16 where the CPU multiplies it natively;
    the speed comparison's reference_onmt (and its digests' form) use bf16 likewise and cut
    both lengths into ten buckets each, as the reference batches examples sorted by length."""
    for name in ("debian_pgn", "debian_coverage"):
        cfg = config.resolve(name)
        assert (cfg.train.mixed_precision, cfg.data.bucket_by_summary_length) == ("auto", True)
        assert cfg.data.buckets_per_length == 0
    for name in ("reference_onmt", "reference_onmt_digests"):
        cfg = config.resolve(name)
        assert (cfg.train.mixed_precision, cfg.data.bucket_by_summary_length) == ("auto", False)
        assert cfg.data.buckets_per_length == 10


def test_the_coverage_phase_continues_at_a_fifth_of_the_rate():
    """Measured (docs/results/quality.md "Every checkpoint scored"): a fresh Adam at debian_pgn's 1e-3
    knocks the converted model's eval NLL up; debian_coverage starts its own cosine at 2e-4."""
    pgn, cov = config.resolve("debian_pgn"), config.resolve("debian_coverage")
    assert (pgn.train.learning_rate, cov.train.learning_rate) == (1e-3, 2e-4)
    assert cov.model.coverage and not pgn.model.coverage


@pytest.mark.parametrize("overrides, message", [
    (["model.model_type=abs", "model.enc_hidden_dim=64"], "'model.enc_hidden_dim': expected 0 "
     "with model.model_type='abs'"),
    (["model.model_type=abs", "model.dropout=0.3"], "'model.dropout': expected 0 "
     "with model.model_type='abs'"),
    (["model.model_type=deep_reinforced", "model.dropout=0.1"], "'model.dropout'"),
    (["train.jit_compile=true", "train.objective=mixed"], "'train.jit_compile': expected false "
     "unless train.objective='ml'"),
    (["train.jit_compile=true", "model.model_type=deep_reinforced"], "'train.jit_compile'"),
    (["decode.jit_step=true", "model.model_type=abs"], "'decode.jit_step': expected false "
     "unless model.model_type='pointer_generator'"),
    (["decode.jit_step=true", "model.model_type=deep_reinforced"], "'decode.jit_step'"),
])
def test_speed_fields_are_checked_against_the_model_and_objective(overrides, message):
    with pytest.raises(ValueError, match=message):
        config.resolve("tiny", overrides)
    cfg = config.resolve("tiny", ["train.jit_compile=true", "model.enc_hidden_dim=8",
                                  "model.dropout=0.3", "decode.jit_step=true"])
    assert cfg.train.jit_compile and cfg.model.enc_hidden_dim == 8 and cfg.model.dropout == 0.3
    assert cfg.decode.jit_step


def test_files_and_model_dirs_are_validated(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  optimizer: rmsprop\n")
    with pytest.raises(ValueError, match="'train.optimizer': expected one of"):
        config.load(str(path))
    path.write_text("model:\n  hidden_dim: [64]\n")
    with pytest.raises(ValueError, match="'model.hidden_dim': expected an integer, got \\[64\\]"):
        config.load(str(path))
    cfg = config.preset("tiny").to_dict()
    cfg["decode"]["beam_size"] = 0
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="'decode.beam_size': expected >= 1, got 0"):
        config.load_from_model_dir(str(tmp_path))
    cfg["decode"]["beam_size"], cfg["decode"]["min_dec_steps"] = 4, 500
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="decode.min_dec_steps"):
        config.load_from_model_dir(str(tmp_path))


def test_overrides_on_a_loaded_config_are_validated_together():
    cfg = config.preset("tiny")  # decode: 3..30
    # Applied in order and checked once at the end, so raising both bounds in one call works.
    config.apply_overrides(cfg, ["decode.min_dec_steps=40", "decode.max_dec_steps=50"])
    assert (cfg.decode.min_dec_steps, cfg.decode.max_dec_steps) == (40, 50)
    with pytest.raises(ValueError, match="decode.min_dec_steps"):
        config.apply_overrides(cfg, ["decode.max_dec_steps=20"])


def test_a_built_models_config_takes_decode_keys_only():
    """summarize, evaluate, tune and export build the model before --set applies: a model.*,
    data.* or train.* key would change the config and not the model, so it is refused whole."""
    from pgn_tf.utils.errors import UserError

    cfg = config.preset("tiny")
    config.apply_decode_overrides(cfg, ["decode.beam_size=2"], "summarize")
    assert cfg.decode.beam_size == 2
    for item in ("model.hidden_dim=8", "data.lowercase=false", " train.batch_size=2"):
        with pytest.raises(UserError, match=r"summarize --set only changes decode\.\* keys"):
            config.apply_decode_overrides(cfg, ["decode.beam_size=3", item], "summarize")
    assert cfg.decode.beam_size == 2  # nothing of a refused list was applied


def test_a_new_field_is_checked_from_its_declaration_alone():
    import dataclasses
    from typing import Annotated, Literal

    @dataclasses.dataclass
    class Extra:
        mode: Literal["a", "b"] = "a"
        rate: Annotated[float, config.Range(0, 1)] = 0.5

    hints = typed_fields.hints(Extra)
    assert typed_fields.checked("x.mode", hints["mode"], "b") == "b"
    assert typed_fields.checked("x.rate", hints["rate"], 1) == 1.0
    with pytest.raises(ValueError, match="'x.mode': expected one of 'a', 'b', got 'c'"):
        typed_fields.checked("x.mode", hints["mode"], "c")
    with pytest.raises(ValueError, match=r"'x.rate': expected in \[0, 1\], got 2.0"):
        typed_fields.checked("x.rate", hints["rate"], 2.0)


def test_the_old_name_of_eval_skip_still_reads():
    """Model dirs and commands from before the rename (train.eval_rouge_skip) keep working."""
    cfg = config.resolve("tiny", ["train.eval_rouge_skip=1500"])
    assert cfg.train.eval_skip == 1500
    assert config.Config.from_dict({"train": {"eval_rouge_skip": 7}}).train.eval_skip == 7


PAPERS = ("see2017_baseline", "see2017_pgn", "see2017_coverage", "paulus2017", "rush2015_abs")


@pytest.mark.parametrize("name", PAPERS)
def test_the_papers_presets_decode_as_the_papers(name):
    """None of the papers replaces an output [UNK] by a source word, in decoding or in the RL
    reward (docs/training/presets.md)."""
    cfg = config.resolve(name)
    assert not cfg.decode.replace_unk and not cfg.replaces_unk()
    assert not cfg.decode.block_repeated_words


def test_rush2015_abs_holds_the_papers_vocabulary_and_search():
    """Section 7.1: words seen fewer than 5 times are [UNK]; sections 2 and 4: a fixed output
    length (the Gigaword title's), [STOP] never emitted."""
    cfg = config.resolve("rush2015_abs")
    assert (cfg.data.min_count, cfg.decode.fixed_length) == (5, 8)
    abs_ = config.resolve("debian_abs")  # the measured runs' settings stay the corpus preset's
    assert (abs_.data.min_count, abs_.decode.fixed_length) == (1, 0)
    assert abs_.decode.replace_unk
    # decoding to [STOP], the corpus preset blocks the loops ABS+'s match features reward;
    # the paper's fixed length has none to block
    assert abs_.decode.block_trigrams and abs_.decode.block_repeated_words
    assert not (cfg.decode.block_trigrams or cfg.decode.block_repeated_words)


@pytest.mark.parametrize("name", ["debian_baseline", "debian_pgn", "debian_coverage",
                                  "debian_paulus", "debian_abs", "reference_onmt", "tiny",
                                  "digest_baseline", "digest_pgn", "digest_coverage",
                                  "digest_paulus", "reference_onmt_digests"])
def test_the_corpus_presets_keep_this_projects_unk_replacement(name):
    cfg = config.resolve(name)
    assert cfg.replaces_unk() and cfg.train.reward_replace_unk


@pytest.mark.parametrize("encoder,replaces,avoids", [("attention", True, False),
                                                     ("conv", False, True), ("bow", False, True)])
def test_replace_unk_avoids_unk_where_no_source_word_is_attended(encoder, replaces, avoids):
    cfg = config.resolve("debian_abs", [f"model.abs_encoder={encoder}"])
    assert (cfg.replaces_unk(), cfg.avoids_unk()) == (replaces, avoids)
    paper = config.resolve("rush2015_abs", [f"model.abs_encoder={encoder}"])
    assert not paper.replaces_unk() and not paper.avoids_unk()  # the paper keeps its [UNK]s
    assert config.resolve("debian_pgn", ["decode.avoid_unk=true"]).avoids_unk()


def test_the_digest_presets_run_at_see_et_als_lengths_within_their_budgets():
    names = ("digest_baseline", "digest_pgn", "digest_coverage", "digest_paulus")
    for name in names:
        cfg = config.resolve(name)
        assert (cfg.data.max_enc_steps, cfg.data.max_dec_steps) == (400, 100), name
        # 20: the training summaries' 5th percentile (See et al.'s 35 is their median)
        assert (cfg.decode.min_dec_steps, cfg.decode.max_dec_steps) == (20, 120), name
        assert cfg.decode.sentence_lines and not cfg.decode.block_repeated_words, name
        assert (cfg.train.select_by, cfg.train.eval_skip) == ("rouge", 600), name
    minutes = {n: config.resolve(n).train.max_minutes for n in names}
    assert minutes == {"digest_baseline": 40, "digest_pgn": 40, "digest_coverage": 20,
                       "digest_paulus": 40}
    base, pgn, cov = (config.resolve(n) for n in names[:3])
    assert not base.model.pointer_gen and pgn.model.pointer_gen and cov.model.coverage
    assert base.model == dataclasses.replace(pgn.model, pointer_gen=False)
    paulus = config.resolve("digest_paulus")
    assert paulus.model.model_type == "deep_reinforced" and paulus.decode.block_trigrams


def test_reference_onmt_digests_holds_the_peers_digest_sizes():
    """bench.sh with PEER_CORPUS=digests: article 400, summary 100, vocab 50k, batch 16,
    decoding at most 100 tokens; the reference's network sizes."""
    cfg, ref = config.resolve("reference_onmt_digests"), config.resolve("reference_onmt")
    d = cfg.data
    assert (d.vocab_size, d.max_enc_steps, d.max_dec_steps) == (50_000, 400, 100)
    assert cfg.train.batch_size == 16 and cfg.model == ref.model
    assert (cfg.decode.beam_size, cfg.decode.batch_size, cfg.decode.min_dec_steps,
            cfg.decode.max_dec_steps) == (4, 64, 0, 100)


def test_a_model_dir_config_from_before_sentence_lines_loads_with_one_line_output(tmp_path):
    cfg = config.preset("tiny").to_dict()
    del cfg["decode"]["sentence_lines"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert config.load_from_model_dir(str(tmp_path)) == config.preset("tiny")
