"""The one tokenizer, written with core `tf.strings` ops only.

The same function runs in the Beam pipeline, in tf.data and inside the exported SavedModel, so
training and serving cannot drift apart. No tf.text custom kernels: an exported graph that
contains one fails under `saved_model_cli run` / TF Serving builds without tf.text linked.

Tokenization (PTB-like, as in See et al.'s preprocessed CNN/DM): invalid UTF-8 is replaced,
text is lowercased, punctuation is split off, English clitics ('s n't 'll 're 've 'm 'd) become
their own tokens, then the text is split on whitespace.
"""

from __future__ import annotations

import tensorflow as tf

# Splitting rules, applied in order with RE2 (tf.strings.regex_replace).
_RULES = (
    # quotes and brackets always stand alone
    (r"([\"“”‘’`(){}\[\]<>])", r" \1 "),
    # sentence and clause punctuation, except inside numbers (3.5, 1,000) and abbreviations
    (r"([,;:!?])", r" \1 "),
    (r"\.(\s|$)", r" . \1"),
    (r"\.\.\.", r" ... "),
    # an apostrophe at a word edge is a quote (before the clitic split creates new edges)
    (r"(\s|^)'(\S)", r"\1' \2"),
    (r"(\S)'(\s|$)", r"\1 '\2"),
    # clitics
    (r"(\w)n't\b", r"\1 n't"),
    (r"(\w)'(s|ll|re|ve|m|d)\b", r"\1 '\2"),
)


def normalize(text: tf.Tensor, lowercase: bool = True, replace_digits: bool = False) -> tf.Tensor:
    """Valid, optionally lowercased UTF-8. text: string [...] -> string [...]."""
    text = tf.strings.unicode_transcode(
        text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    if lowercase:
        text = tf.strings.lower(text, encoding="utf-8")
    if replace_digits:
        text = tf.strings.regex_replace(text, r"[0-9]", "#")
    return text


def tokenize(
    text: tf.Tensor,
    lowercase: bool = True,
    replace_digits: bool = False,
    max_chars: int | None = None,
) -> tf.RaggedTensor:
    """Splits text into tokens.

    Args:
      text: string [batch] (or a scalar, giving a 1-D result).
      max_chars: if set, only the first max_chars bytes are read: an article of 50 MB costs no
        more than one of max_chars (callers pass ~20x the token budget).

    Returns:
      tokens: string RaggedTensor [batch, None] (or a string [None] tensor for a scalar input).
    """
    text = tf.convert_to_tensor(text, tf.string)
    if max_chars is not None:
        # A cut inside a multi-byte character is repaired by normalize()'s transcode.
        text = tf.strings.substr(text, 0, max_chars, unit="BYTE")
    text = normalize(text, lowercase, replace_digits)
    for pattern, rewrite in _RULES:
        text = tf.strings.regex_replace(text, pattern, rewrite)
    return tf.strings.split(text)


def tokenize_py(text: str, lowercase: bool = True, replace_digits: bool = False) -> list[str]:
    """Eager convenience wrapper around tokenize() for one Python string."""
    tokens = tokenize(tf.constant([text]), lowercase, replace_digits)
    return [t.decode("utf-8") for t in tokens[0].numpy().tolist()]


# The tokens that end a sentence: rougeLsum's sentence lines and decode.sentence_lines split
# after them (See et al. split their decoded summaries into sentences the same way).
SENTENCE_END_TOKENS = (".", "!", "?")


def join_tokens(tokens: tf.Tensor, mask: tf.Tensor | None = None,
                sentence_lines: bool = False) -> tf.Tensor:
    """Space-joins tokens. tokens: string [batch, len] (or ragged); mask: bool [batch, len] ->
    string [batch]. sentence_lines: a newline instead of the space after each sentence-ending
    token (SENTENCE_END_TOKENS), so a multi-sentence summary keeps one sentence a line."""
    if sentence_lines:
        def mark(t):  # a sentence-ending token carries the newline that follows it
            end = tf.reduce_any(tf.equal(t[..., None], SENTENCE_END_TOKENS), axis=-1)
            return tf.where(end, t + "\n", t)

        tokens = (tf.ragged.map_flat_values(mark, tokens)
                  if isinstance(tokens, tf.RaggedTensor) else mark(tokens))
    if mask is not None:
        tokens = tf.ragged.boolean_mask(tokens, mask)
    joined = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
    if sentence_lines:
        joined = tf.strings.regex_replace(joined, "\n ", "\n")
        joined = tf.strings.regex_replace(joined, "\n$", "")
    return joined


def detokenize(text: tf.Tensor) -> tf.Tensor:
    """Undoes the punctuation split for display: 'it 's fine .' -> "it's fine."."""
    text = tf.strings.regex_replace(text, r" ([.,;:!?)\]}]|'s|'ll|'re|'ve|'m|'d|n't)(\s|$)", r"\1\2")
    text = tf.strings.regex_replace(text, r"([(\[{]) ", r"\1")
    return tf.strings.strip(text)


def is_word(token: str) -> bool:
    """A word token holds a letter or a digit; punctuation holds neither. The repeated-word
    block (decode.block_repeated_words) and evaluate's word-repetition rates count these."""
    return any(c.isalnum() for c in token)


# English function words: the words a summary may repeat without saying a thing twice
# ("library for X and for Y"). A content word is a word (is_word) outside this list; the
# evaluator's content-word repetition counts those ("2048 game game", "plugin plugin for").
FUNCTION_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each either few for from
further had has have having he her here hers him his how i if in into is it its itself just
me more most my neither no nor not of off on once only or other our ours out over own same
she should so some such than that the their theirs them then there these they this those
through to too under until up upon us very via was we were what when where which while who
whom whose why will with within without would you your yours 's n't
""".split())


def is_content_word(token: str) -> bool:
    """A word (is_word) that is not a function word (FUNCTION_WORDS; compared lowercased)."""
    return is_word(token) and token.lower() not in FUNCTION_WORDS


def tokens_to_sentences(tokens: list[str]) -> str:
    """Tokens -> text with one sentence a line (rougeLsum's input convention)."""
    lines, cur = [], []
    for t in tokens:
        cur.append(t)
        if t in SENTENCE_END_TOKENS:
            lines.append(" ".join(cur))
            cur = []
    if cur:
        lines.append(" ".join(cur))
    return "\n".join(lines)
