"""The full search's words a shortlist would leave out: neither frequent nor in the article."""

from research.studies.shortlist_misses import misses

VOCAB = ["the", "game", "for", "mail", "plugin", "zebra", "claws"]  # frequency order


def test_a_rare_word_outside_the_article_is_a_miss():
    out = misses(["plugin for zebra", "game for the"], ["claws mail plugin", "a card game"],
                 VOCAB, shortlist=3)
    # "plugin" (rank 4) is in its article, "zebra" (rank 5) is not: one miss, in one output
    assert out == {"shortlist": 3, "outputs_pct": 50.0, "tokens_pct": round(100 / 6, 3)}


def test_frequent_article_and_copied_words_never_miss():
    out = misses(["the game for claws qwerty"], ["claws"], VOCAB, shortlist=3)
    assert out["outputs_pct"] == 0.0  # qwerty: out of vocabulary, a copy
    assert misses(["plugin for zebra"], ["x"], VOCAB, shortlist=len(VOCAB))["outputs_pct"] == 0.0
