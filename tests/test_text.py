import tensorflow as tf

from pgn_tf import text


def test_ptb_like_split_and_lowercase():
    toks = text.tokenize_py("He said: 'It's 3.5 billion, isn't it?' (The Boss) We'll see.")
    assert toks == ["he", "said", ":", "'", "it", "'s", "3.5", "billion", ",", "is", "n't", "it",
                    "?", "'", "(", "the", "boss", ")", "we", "'ll", "see", "."]


def test_invalid_utf8_empty_and_whitespace_do_not_fail():
    out = text.tokenize(tf.constant([b"caf\xc3\xa9 \xff\xfe ok", b"", b"  \n\t "]))
    rows = out.to_list()
    assert rows[0][0].decode() == "caf\u00e9" and rows[0][-1] == b"ok"
    assert rows[1] == [] and rows[2] == []
    assert rows[0][1].decode("utf-8") == "\ufffd\ufffd"  # each bad byte a U+FFFD


def test_max_chars_bounds_work_and_repairs_cut_characters():
    long = ("\u00e9t\u00e9 " * 100_000).encode()
    toks = text.tokenize(tf.constant([long]), max_chars=11)
    assert toks.to_list()[0][:2] == ["\u00e9t\u00e9".encode()] * 2
    assert len(toks.to_list()[0]) <= 3


def test_digits_switch():
    assert text.tokenize_py("Room 101", replace_digits=True) == ["room", "###"]


def test_detokenize_round_trip_for_display():
    joined = text.join_tokens(tf.constant([["it", "'s", "fine", ".", ""]]),
                              tf.constant([[True, True, True, True, False]]))
    assert text.detokenize(joined).numpy()[0].decode() == "it's fine."


def test_graph_uses_core_ops_only():
    fn = tf.function(lambda s: text.tokenize(s, max_chars=100).to_tensor(""))
    graph = fn.get_concrete_function(tf.TensorSpec([None], tf.string)).graph
    ops = {op.type for op in graph.get_operations()}
    core = set(tf.raw_ops.__dict__)
    assert ops <= core | {"Placeholder", "Const", "Identity", "NoOp"}, ops - core


def test_sentence_lines_keep_one_sentence_a_line():
    tokens = tf.constant([["it", "'s", "fine", ".", "next", "one", "!", "x", "?"],
                          ["a", ".", ".", "b", "", "", "", "", ""],
                          ["no", "end", "", "", "", "", "", "", ""]])
    mask = tf.not_equal(tokens, "")
    lines = text.detokenize(text.join_tokens(tokens, mask, sentence_lines=True)).numpy()
    assert [x.decode() for x in lines] == ["it's fine.\nnext one!\nx?", "a.\n.\nb", "no end"]
    # the same lines as rougeLsum's (text.tokens_to_sentences), one per sentence
    from pgn_tf.text import tokens_to_sentences

    assert tokens_to_sentences(["a", ".", ".", "b"]).count("\n") == lines[1].count(b"\n")
    # off: one line, as before
    one = text.detokenize(text.join_tokens(tokens, mask)).numpy()[0].decode()
    assert one == "it's fine. next one! x?"
    ragged = text.join_tokens(tf.ragged.constant([["a", ".", "b"], ["c", "."]]),
                              sentence_lines=True).numpy()
    assert ragged.tolist() == [b"a .\nb", b"c ."]
