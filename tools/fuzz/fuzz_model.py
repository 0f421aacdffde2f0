"""The real model fuzzed (serving.fuzz's `model` campaign): strings, arbitrary bytes and
lengths into a real export's signatures (the in-graph tokenizer, vocabulary lookup and OOV
mapping, encoder, beam search and detokenizer), through both servers: gRPC Predict over a real
channel to the server on loopback, and REST :predict (three routes, and gzip) through the REST
server's own channel and parser (serving.fuzz_http's HttpDriver).

The export (`write_model_export`) is the quickstart's model as pgn_tf.saved_model.export
writes it: the `tiny` preset's pointer-generator over a vocabulary of the synthetic corpus,
with its three signatures, serving contract and warm-up requests, but with freshly initialized
weights (seeded) and small decoding settings (beam 2, at most 6 steps; summarize_options
capped at beam 3 and 8 steps), so that a model run costs milliseconds: the code a fuzzed
string goes through is the trained model's, only the numbers differ. `--model_base_path` in
tools/fuzz/fuzz_decoders.py serves another export instead (a trained quickstart's).

Inputs are the decoder campaigns' (fuzz_mutators: a method byte, then a serialized
PredictRequest or a JSON body), and `ModelMutator` steers them to the model: three in four of
its mutations build a valid request naming the served model (a signature, 1 to 4 rows, in-range
options) around mutated strings (`mutate_text`: libFuzzer's byte mutation, tokens from
STRING_TOKENS inserted, words repeated past the encoder's cut, random bytes, slices cut, strings
crossed); the rest are the decoder campaigns' structure-aware mutations, so refusals stay
fuzzed too.

Importing this module needs no atheris and starts nothing.
"""

from __future__ import annotations

import base64
import collections
import gzip
import json
import os
import random
import zlib

from tensorflow_serving.apis import predict_pb2

from pgn_tf.saved_model.contract import (
    ARTICLES,
    BEAM_SIZE,
    MAX_DECODE_STEPS,
    MIN_DECODE_STEPS,
    SERVING_DEFAULT,
    SUMMARIZE_OPTIONS,
    SUMMARIZE_VERBOSE,
)
from tools.fuzz.fuzz_harness import (
    CLIENT_CODES,
    LABEL,
    MODEL_NAME,
    MODEL_VERSION,
    TEXTS,
    Finding,
)
from tools.fuzz.fuzz_http import HttpDriver, check_exchange
from tools.fuzz.fuzz_http_requests import make_request
from tools.fuzz.fuzz_loopback import answer_feature, answer_key
from tools.fuzz.fuzz_mutators import Method, Mutator, split_input
from tools.fuzz.fuzz_protos import MutateBytes

PREDICT_PATH = "/tensorflow.serving.PredictionService/Predict"
METHODS = (
    Method("grpc", "Predict", PREDICT_PATH, predict_pb2.PredictRequest),
    Method("rest", "predict", f"/v1/models/{MODEL_NAME}:predict"),
    Method("rest", "versions/1:predict",
           f"/v1/models/{MODEL_NAME}/versions/{MODEL_VERSION}:predict"),
    Method("rest", "labels:predict", f"/v1/models/{MODEL_NAME}/labels/{LABEL}:predict"),
    Method("rest", "gzip:predict", f"/v1/models/{MODEL_NAME}:predict", encoding="gzip"),
)
# The export's decoding: small, so that a run is cheap (module docstring).
DECODE_OVERRIDES = ("decode.beam_size=2", "decode.max_dec_steps=6", "decode.min_dec_steps=1")
OPTIONS_MAX_BEAM, OPTIONS_MAX_STEPS = 3, 8
# rows x beam x steps a request may ask (--max_decode_work): four rows of the largest options
MAX_DECODE_WORK = 4 * OPTIONS_MAX_BEAM * OPTIONS_MAX_STEPS
MAX_TEXT_CHARS = 20_000  # a fuzzed article's length at most (the graph cuts it at max_enc_steps)
# What mutate_text inserts: the vocabulary's special tokens and their look-alikes, punctuation
# the tokenizer splits on, numbers, and text that is not plain ASCII words.
STRING_TOKENS = (
    "[PAD]", "[UNK]", "[START]", "[STOP]", "<s>", "</s>", "[unk]", "[STOP", "##", "'s", "n't",
    ".", ",", "!", "?", "-", "--", "...", "'", '"', "(", ")", "&", "<", ">", "\\", "/", "%",
    "0", "5512", "3.14", "-1", "1e9", "1,000", "##NUM##",
    "\u00e9t\u00e9", "na\u0131ve", "stra\u00dfe", "\u0130stanbul", "\u4e2d\u6587\u5b57",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629", "\u05e2\u05d1\u05e8\u05d9\u05ea",
    "\U0001f600", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "e\u0301", "\u200b", "\u200e",
    "\u202e", "\ufeff", "\u2028", "\u00a0", "\t", "\n", "\r\n", "   ", "\x00", "\x7f", "\x1b[0m",
    "a" * 300, "zorblax", "quenton", "\ufffd", "\U0010ffff",
)
_SIGNATURES = ((SERVING_DEFAULT, 6), (SUMMARIZE_VERBOSE, 2), (SUMMARIZE_OPTIONS, 2), ("", 1))


def write_model_export(base: str, seed: int = 0) -> str:
    """BASE/pgn/1: the tiny pointer-generator with fresh weights (seeded), exported as
    pgn_tf.saved_model.export writes a trained one (module docstring), with its warm-up
    file, config.json and vocab.txt."""
    import collections as _c

    import keras
    import tensorflow as tf

    from pgn_tf import config as config_lib
    from pgn_tf import text
    from pgn_tf import vocab as vocab_lib
    from pgn_tf.data import synthetic
    from pgn_tf.inference.summarizer import Summarizer
    from pgn_tf.models import build_model
    from pgn_tf.saved_model import export as export_lib

    keras.utils.set_random_seed(seed)
    cfg = config_lib.resolve("tiny", list(DECODE_OVERRIDES))
    cfg.decode.jit_step = False  # as the export writes it: TF Serving runs no XLA on the CPU
    counts = _c.Counter()
    for ex in synthetic.generate(300, seed):
        counts.update(text.tokenize_py(ex.article))
        counts.update(text.tokenize_py(ex.summary))
    common = counts.most_common(cfg.data.vocab_size - len(vocab_lib.SPECIAL_TOKENS))
    vocab = vocab_lib.Vocab([w for w, _ in common], [n for _, n in common])
    summarizer = Summarizer(build_model(cfg.model, vocab.size), vocab, cfg)
    summarizer.summarize(tf.constant(TEXTS[:1]))  # builds the weights
    limits = export_lib.option_limits(cfg, OPTIONS_MAX_BEAM, OPTIONS_MAX_STEPS)
    path = os.path.join(base, MODEL_NAME, str(MODEL_VERSION))
    export_lib.write_servable(path, summarizer, limits, MODEL_NAME,
                              {"config.json": cfg.save, "vocab.txt": vocab.save})
    return path


# -- strings ---------------------------------------------------------------------------------


def mutate_text(value: bytes, rng: random.Random, mutate_bytes: MutateBytes,
                others: list) -> bytes:
    """One change of an article's bytes (module docstring); `others`: articles to cross
    with."""
    r = rng.random()
    if r < 0.3:
        out = mutate_bytes(value, max(64, 2 * len(value)))
    elif r < 0.55:  # a token where a word boundary is, or anywhere
        token = rng.choice(STRING_TOKENS).encode("utf-8", "surrogatepass")
        spaces = [i for i, c in enumerate(value) if c == 32] or [len(value)]
        i = rng.choice(spaces) if rng.random() < 0.7 else rng.randint(0, len(value))
        out = value[:i] + (b" " + token + b" " if rng.random() < 0.7 else token) + value[i:]
    elif r < 0.65:  # words repeated: past the encoder's cut, or one long word
        words = value.split() or [b"a"]
        word = rng.choice(words)
        k = rng.choice((2, 10, 100, 1000))
        out = value + b" " + (b" " if rng.random() < 0.8 else b"").join([word] * k)
    elif r < 0.75:
        out = rng.randbytes(rng.choice((0, 1, 3, 17, 100, 400)))
    elif r < 0.85 and value:  # a slice cut out
        i = rng.randrange(len(value))
        out = value[:i] + value[i + rng.randint(1, 50):]
    elif r < 0.93 and others:
        other = rng.choice(others)
        i, j = rng.randint(0, len(value)), rng.randint(0, len(other))
        out = value[:i] + other[j:]
    else:
        out = rng.choice((b"", b" ", b".", value.upper(), value.replace(b" ", b"  ")))
    return out[:MAX_TEXT_CHARS]


def _articles_of(method: Method, payload: bytes) -> list:
    """The articles (bytes) an input's request holds, as far as they can be read."""
    out = []
    if method.kind == "grpc":
        req = predict_pb2.PredictRequest()
        try:
            req.ParseFromString(payload)
        except Exception:  # noqa: BLE001  (not a request: no articles)
            return []
        if ARTICLES in req.inputs:
            out = list(req.inputs[ARTICLES].string_val)
        return out
    raw = payload
    if method.encoding == "gzip":
        try:
            raw = gzip.decompress(payload)
        except (OSError, EOFError, ValueError, zlib.error):  # zlib.error: a corrupt deflate stream
            return []
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    stack = [body]
    while stack and len(out) < 16:
        node = stack.pop()
        if isinstance(node, str):
            out.append(node.encode("utf-8", "surrogatepass"))
        elif isinstance(node, dict):
            if set(node) == {"b64"} and isinstance(node["b64"], str):
                try:
                    out.append(base64.b64decode(node["b64"], validate=True))
                except ValueError:
                    pass
            else:
                stack.extend(v for k, v in node.items() if k != "signature_name")
        elif isinstance(node, list):
            stack.extend(node)
    return out


def build_request(method: Method, articles: list, signature: str, options: dict,
                  rng: random.Random) -> bytes:
    """A valid request of `method` for the served model: its articles (bytes) and, for
    summarize_options, `options`; REST writes an article that is not UTF-8 (or one in ten)
    as {"b64": ...}, rows or columns."""
    if method.kind == "grpc":
        from tensorflow.core.framework import tensor_pb2, types_pb2

        req = predict_pb2.PredictRequest()
        req.model_spec.name = MODEL_NAME
        r = rng.random()
        if r < 0.2:
            req.model_spec.version.value = MODEL_VERSION
        elif r < 0.3:
            req.model_spec.version_label = LABEL
        req.model_spec.signature_name = signature
        t = req.inputs[ARTICLES]
        t.dtype = types_pb2.DT_STRING
        t.tensor_shape.dim.add(size=len(articles))
        t.string_val.extend(articles)
        if signature == SUMMARIZE_OPTIONS:
            for k, v in options.items():
                req.inputs[k].CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32,
                                                              int_val=[v]))
        return req.SerializeToString()
    values = []
    for a in articles:
        try:
            text = a.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        values.append({"b64": base64.b64encode(a).decode()} if text is None
                      or rng.random() < 0.1 else text)
    body: dict = {}
    if signature:
        body["signature_name"] = signature
    if signature == SUMMARIZE_OPTIONS:
        body["inputs"] = {ARTICLES: values, **options}
    elif rng.random() < 0.5:
        body["instances"] = values if rng.random() < 0.5 else [{ARTICLES: v} for v in values]
    else:
        body["inputs"] = {ARTICLES: values} if rng.random() < 0.5 else values
    raw = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    return gzip.compress(raw, compresslevel=1, mtime=0) if method.encoding == "gzip" else raw


class ModelMutator:
    """atheris' custom mutator of the `model` campaign (module docstring)."""

    def __init__(self, mutate_bytes: MutateBytes, steer: float = 0.75):
        self.mutate_bytes = mutate_bytes
        self.steer = steer
        self.generic = Mutator(METHODS, mutate_bytes, TEXTS)

    def __call__(self, data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() >= self.steer:
            return self.generic(data, max_size, seed)
        index, payload = split_input(METHODS, data)
        if rng.random() < 0.1:
            index = rng.randrange(len(METHODS))
        articles = _articles_of(METHODS[index], payload) or [t.encode() for t in TEXTS]
        rows = rng.choice((1, 1, 1, 2, 3, 4))
        articles = [articles[i % len(articles)] for i in range(rows)]
        for _ in range(1 + int(rng.expovariate(1.0))):
            i = rng.randrange(rows)
            articles[i] = mutate_text(articles[i], rng, self.mutate_bytes, articles)
        signature = rng.choices([s for s, _ in _SIGNATURES], [w for _, w in _SIGNATURES])[0]
        max_steps = rng.randint(1, OPTIONS_MAX_STEPS)
        options = {BEAM_SIZE: rng.randint(1, OPTIONS_MAX_BEAM), MAX_DECODE_STEPS: max_steps,
                   MIN_DECODE_STEPS: rng.randint(0, max_steps)}
        out = bytes([index]) + build_request(METHODS[index], articles, signature, options, rng)
        if len(out) > max_size:  # too long for the corpus: the shortest articles
            articles = [a[:max(1, (max_size - 200) // (2 * rows))] for a in articles]
            out = bytes([index]) + build_request(METHODS[index], articles, signature, options,
                                                 rng)
        return out[:max_size]


# -- the campaign's harness ------------------------------------------------------------------


class ModelHarness:
    """The `model` campaign's target: a LoopbackServer over the real export, a gRPC channel
    to it and an HttpDriver on its REST server; `one(data)` sends one request."""

    def __init__(self, loopback, timeout_s: float = 60.0):
        import grpc

        from pgn_tf.serving.status import MAX_MESSAGE_CHARS

        self.loopback = loopback
        self.timeout_s = timeout_s
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{loopback.grpc_port}",
            options=[("grpc.max_send_message_length", 64 * 2**20),
                     ("grpc.max_receive_message_length", 256 * 2**20)])
        self.predict = self.channel.unary_unary(PREDICT_PATH)  # bytes in, bytes out
        self.driver = HttpDriver(loopback.server, loopback.stages)
        self.client_codes = set(CLIENT_CODES)
        self.max_message_chars = MAX_MESSAGE_CHARS
        self.counts: collections.Counter = collections.Counter()

    def one(self, data: bytes) -> str:
        self.loopback.start_input()
        index, payload = split_input(METHODS, data)
        method = METHODS[index]
        if method.kind == "grpc":
            outcome = f"grpc {method.name} {self._grpc(payload)}"
        else:
            outcome = f"rest {method.name} {self._rest(method, payload)}"
        self.loopback.end_input(f"model {outcome}")
        self.counts[outcome] += 1
        return outcome

    def _grpc(self, payload: bytes) -> str:
        import grpc

        try:
            raw = self.predict(payload, timeout=self.timeout_s)
        except grpc.RpcError as e:
            code, details = e.code().name, e.details() or ""
            self.loopback.check_message(f"Predict {code}", details, self.max_message_chars)
            if code not in self.client_codes:
                raise Finding(f"Predict answered {code}: {details[:300]}") from None
            answer_feature(answer_key("model grpc", code, details[:40]))
            return code
        try:
            predict_pb2.PredictResponse.FromString(raw)
        except Exception as e:  # noqa: BLE001  (protobuf's DecodeError)
            raise Finding(f"Predict OK with a body that is not a PredictResponse: {e}") from None
        answer_feature(answer_key("model grpc OK"))
        return "OK"

    def _rest(self, method: Method, payload: bytes) -> str:
        headers = [(b"Content-Type", b"application/json")]
        if method.encoding:
            headers.append((b"Content-Encoding", method.encoding.encode()))
        req = make_request(b"POST", method.path.encode(), self.driver.port, payload,
                           tuple(headers))
        outcomes = check_exchange(self.driver.exchange(req.serialize()),
                                  self.loopback.check_message)
        if len(outcomes) != 1:
            raise Finding(f"one request answered {len(outcomes)} times: {outcomes}")
        return outcomes[0].rsplit(" ", 1)[-1]


def model_seeds() -> list[bytes]:
    """Valid requests of each method and signature, plain articles and odd ones."""
    rng = random.Random(0)
    texts = [t.encode() for t in TEXTS] + ["\u4e2d\u6587 [UNK] \U0001f600 .".encode(),
                                          b"\xff\xfe not utf-8", b" ".join([b"word"] * 200)]
    options = {BEAM_SIZE: 2, MAX_DECODE_STEPS: 4, MIN_DECODE_STEPS: 1}
    out = []
    for i, method in enumerate(METHODS):
        for signature, _ in _SIGNATURES:
            for rows in ((texts[0],), (texts[1], texts[2]), (texts[3 + i % 3],)):
                out.append(bytes([i]) + build_request(method, list(rows), signature, options,
                                                      rng))
    return out
