"""The digests' measures on hand-computed fixtures: every count is worked out in the comments,
so an off-by-one in the matching, the threshold, the visible blocks or the averaging fails."""

import numpy as np
import pytest

from pgn_tf.metrics import digests as dm
from pgn_tf.metrics import scoring

# Three blocks; their synopses A, B, C (3-letter words: rouge-score stems only longer ones).
SYNOPSES = ["red cat sat .", "big dog ran far .", "sun box hot ."]
# Five output sentences. ROUGE-1 F1 on rouge-score's tokens ("." dropped):
#   s1 "red cat sat": A 1.0
#   s2 "red cat sat": A 1.0, and s1 1.0             -> repeats s1; revisits A
#   s3 "big dog":     B P 2/2 R 2/4 -> 0.667         -> first to match B
#   s4 "ran far":     B 0.667; s3 0                  -> revisits B, repeats nothing
#   s5 "sun hat":     C P 1/2 R 1/3 -> 0.4           -> matches C at 0.3 only
OUTPUT = "red cat sat . red cat sat . big dog . ran far . sun hat .".split()
LENGTHS = [5, 4, 6]  # blocks start at tokens 0, 5 and 9


@pytest.fixture(scope="module")
def rouge():
    return dm.Rouge1()


def test_rouge1_is_rouge_scores_rouge1(rouge):
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
    for a, b in [("the libraries are running", "a library that runs"),
                 ("big dog ran far .", "big dog ."), ("x y", "z"), ("", "cat")]:
        assert rouge.f1(a, b) == pytest.approx(scorer.score(b, a)["rouge1"].fmeasure, abs=1e-12)
    assert rouge.f1("big dog", "big dog ran far") == pytest.approx(2 / 3)
    assert rouge.f1("sun hat", "sun box hot") == pytest.approx(0.4)


def test_one_digest_counts(rouge):
    row = dm.example(OUTPUT, SYNOPSES, LENGTHS, max_enc_steps=9, rouge=rouge)
    assert row == {
        "blocks": 3,
        "visible": 2,  # C starts at token 9, outside the first 9
        "matched": 2,  # A (1.0), B (0.667); C's best is 0.4
        "matched_at": {0.3: 3, 0.5: 2, 0.7: 1},  # 0.7: A alone
        "visible_matched": 2,
        "sentences": 5,
        "repeated": 1,  # s2
        "revisits": 2,  # s2 (A again), s4 (B again)
    }
    assert dm.example(OUTPUT, SYNOPSES, LENGTHS, 10, rouge)["visible"] == 3  # C starts at 9 < 10
    assert dm.example(OUTPUT, SYNOPSES, LENGTHS, 5, rouge)["visible"] == 1  # B starts at 5
    assert dm.example(OUTPUT, SYNOPSES, LENGTHS, 9, rouge, threshold=0.4)["matched"] == 3


def test_an_empty_output_matches_nothing(rouge):
    row = dm.example([], SYNOPSES[:2], [3, 3], 400, rouge)
    assert (row["matched"], row["sentences"], row["repeated"], row["revisits"]) == (0, 0, 0, 0)


def test_the_measures_average_over_summaries(rouge):
    rows = [dm.example(OUTPUT, SYNOPSES, LENGTHS, 9, rouge),
            dm.example([], SYNOPSES[:2], [3, 3], 400, rouge)]
    got = dm.summarize(rows)
    assert got == {
        "digest_examples": 2,
        "block_match_pct": 33.33,  # (2/3 + 0/2) / 2
        "block_match_pct_at_0.3": 50.0,  # (3/3 + 0) / 2
        "block_match_pct_at_0.7": 16.67,  # (1/3 + 0) / 2
        "visible_block_match_pct": 50.0,  # (2/2 + 0/2) / 2
        "blocks_visible_pct": 83.33,  # (2/3 + 2/2) / 2
        "repeated_sentence_pct": 10.0,  # (1/5 + 0) / 2
        "block_revisit_pct": 20.0,  # (2/5 + 0) / 2
        "sentences_per_summary": 2.5,
    }
    assert dm.summarize([]) == {}


def test_score_reads_digests_only_and_scores_the_references_too():
    ref = "\n".join(SYNOPSES)
    decoded = [OUTPUT, OUTPUT, OUTPUT]
    # the second is not a digest (2 blocks, 3 lines), the third has no blocks read
    got, per = dm.score(decoded, [ref, ref, ref], [LENGTHS, [5, 4], None], 9)
    assert got["digest_examples"] == 1 and per[1] is None and per[2] is None
    assert per[0]["matched"] == 2 and got["block_match_pct"] == 66.67
    # the references: each line matches its own block, none repeats another
    assert got["reference_repeated_sentence_pct"] == 0.0
    assert got["reference_block_revisit_pct"] == 0.0
    assert got["reference_sentences_per_summary"] == 3.0


def test_per_example_shares_for_the_paired_test():
    rows = [{"blocks": 4, "blocks_matched": 3, "sentences": 5, "repeated_sentences": 1},
            {"blocks": 3, "blocks_matched": 0, "sentences": 0, "repeated_sentences": 0}]
    got = dm.per_example_shares(rows)
    np.testing.assert_allclose(got["block_match"], [75.0, 0.0])
    np.testing.assert_allclose(got["repeated_sentence"], [20.0, 0.0])


def test_blocks_are_split_on_blank_lines():
    article = "one a.\ntwo b.\n\nthree c.\n  \t\nfour d.\n\n\n\nfive\n"
    assert dm.split_blocks(article) == ["one a.\ntwo b.", "three c.", "four d.", "five\n"]
    assert dm.split_blocks("no blank line\nhere") == ["no blank line\nhere"]


def test_sentences_split_after_the_end_tokens():
    assert dm.sentences("a b . c ! d ? e".split()) == [["a", "b", "."], ["c", "!"], ["d", "?"],
                                                       ["e"]]
    assert dm.sentences([]) == []


def test_lead_blocks_takes_each_visible_blocks_first_sentence():
    blocks = [["a", "b", ".", "c", "."], ["d", "e"], ["f", "!", "g", "."]]
    assert scoring.lead_blocks(blocks, 100) == "a b . d e . f !".split()  # "." added after e
    assert scoring.lead_blocks(blocks, 5) == "a b .".split()  # block 2 starts at token 5
    assert scoring.lead_blocks(blocks, 6) == "a b . d .".split()  # its first token is read
    assert scoring.lead_blocks(blocks, 2) == "a b .".split()


def test_see_et_al_repetition_and_novelty_counts():
    # 1-grams a b a b a . : 6, 3 distinct -> 3 duplicates (50%); 2-grams ab ba ab ba a. : 5,
    # 3 distinct -> 40%; 3-grams aba bab aba ba. : 4, 3 distinct -> 25%; 4-grams: 3, none
    # repeated. Novel w.r.t. the article "a b c .": 2-grams ba, ba, a. (3 of 5, 60%);
    # every 3-gram (100%).
    got = scoring.repetition_and_novelty([["a", "b", "a", "b", "a", "."]],
                                          [["a", "b", "c", "."]])
    assert [got[f"dup_{n}gram_pct"] for n in (1, 2, 3, 4)] == [50.0, 40.0, 25.0, 0.0]
    assert [got[f"novel_{n}gram_pct"] for n in (1, 2, 3, 4)] == [0.0, 60.0, 100.0, 100.0]
    # sentences: "x ." twice and "y ." -> 1 duplicate of 3
    got = scoring.repetition_and_novelty([["x", ".", "x", ".", "y", "."]], [["x"]])
    assert got["dup_sentence_pct"] == 33.33


def test_a_sentence_equal_to_an_earlier_one_repeats_it_even_without_words(rouge):
    # ". ." has no rouge-score token (F1 0 with anything), yet the third sentence is the first
    # again; "x ." after "x ." repeats by F1 too
    assert dm.repeats([", .", "x .", ", .", "x ."], rouge) == 2
    row = dm.example(", . x . , .".split(), SYNOPSES[:2], [3, 3], 400, rouge)
    assert (row["sentences"], row["repeated"]) == (3, 1)
