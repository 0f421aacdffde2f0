"""The serving contract: what an export promises the server that serves it, defined once here and
read by both sides (pgn_tf.saved_model.export writes it, pgn_tf.serving reads it).

It names the signatures and their inputs, the ranges of summarize_options' scalar inputs (the
graph asserts the same ranges; a server refuses a request outside them before it runs), and the
decoding defaults (beam size, max decoding steps) of the signatures that take no such input, with
which a server sizes a request's work budget (rows x beam x steps, pgn_tf.serving.predict).

Where it lives: inside the SavedModel, as a non-trainable tf.string variable holding
`ServingContract.to_json()`, attached to the root object under `SAVED_MODEL_ATTR` with Keras'
`ExportArchive.add_variable_collection` (`attach`). Its value is stored in `variables/` and the
object graph of `saved_model.pb` names it, so it travels with the two parts every copy of a
version keeps (TF Serving cannot load a version without them); nothing of it is in
`assets.extra/`, which copies often drop. Why a variable: a tf.constant set on the archive's root
is not saved at all (only trackables are, and a constant only when a function captures it), and a
function returning it would have to be an endpoint, which an ExportArchive turns into a signature
that TF Serving would serve. The graph loaders (`saved_model_cli run`, TF Serving's C++ loader,
the C API) restore it with the other variables and no signature reads it
(tests/saved_model/test_export.py, tests/serving/test_c_runtime.py run them over an export holding it).

Read fail-closed: `from_saved_model` and `ServingContract.from_json` raise ContractError naming
what is missing or wrong (no contract, JSON that does not parse, another format version, a
missing key or a bad value), and a reader then uses `CONSERVATIVE` instead, never "no limit".

Pure Python: importing this module starts no TensorFlow (`attach` imports it when called).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping

CONTRACT_VERSION = 1  # the JSON format; a reader refuses any other
SAVED_MODEL_ATTR = "serving_contract"  # the root object's attribute holding [tf.Variable(json)]
MAX_JSON_BYTES = 64 * 1024  # a contract is a few hundred bytes; more is not one

# Signature names.
SERVING_DEFAULT = "serving_default"
SUMMARIZE_VERBOSE = "summarize_verbose"
SUMMARIZE_OPTIONS = "summarize_options"

# Input names.
ARTICLES = "articles"  # string [batch]: raw article text; its rows are the request's rows
BEAM_SIZE = "beam_size"  # int32 []
MAX_DECODE_STEPS = "max_decode_steps"  # int32 []
MIN_DECODE_STEPS = "min_decode_steps"  # int32 []
# int32 []: the request's vocabulary shortlist, K most frequent words (0: the full vocabulary);
# summarize_options takes it only in an export that decodes with a shortlist (decode.shortlist)
SHORTLIST = "shortlist"
OPTION_INPUTS = (BEAM_SIZE, MAX_DECODE_STEPS, MIN_DECODE_STEPS, SHORTLIST)  # each needs a range

# An export's signatures without a shortlist (a shortlisted one's summarize_options adds it)
SIGNATURE_INPUTS = {
    SERVING_DEFAULT: (ARTICLES,),
    SUMMARIZE_VERBOSE: (ARTICLES,),
    SUMMARIZE_OPTIONS: (ARTICLES, BEAM_SIZE, MAX_DECODE_STEPS, MIN_DECODE_STEPS),
}


class ContractError(ValueError):
    """A contract that cannot be read; the message says what is missing or wrong."""


def _int(value, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractError(f"{where} must be an integer, got {value!r:.40}")
    if value < low:
        raise ContractError(f"{where} must be at least {low}, got {value}")
    return value


def _mapping(value, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise ContractError(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _key(raw: Mapping, key: str, where: str):
    if key not in raw:
        raise ContractError(f"it has no '{where}{key}'")
    return raw[key]


@dataclasses.dataclass(frozen=True)
class ServingContract:
    """What one export promises its server (checked on construction: ContractError).

    Args:
      beam_size, max_decode_steps: the decoding defaults of the signatures without such inputs
        (serving_default, summarize_verbose), positive.
      input_limits: {signature: {scalar input: (low, high)}}, the ranges the graph asserts; every
        OPTION_INPUTS input of a signature needs one.
      signatures: {signature: its input names}.
      version: the format, CONTRACT_VERSION.
    """

    beam_size: int
    max_decode_steps: int
    input_limits: Mapping[str, Mapping[str, tuple[int, int]]]
    signatures: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=lambda: dict(SIGNATURE_INPUTS))
    version: int = CONTRACT_VERSION

    def __post_init__(self):
        if self.version != CONTRACT_VERSION:
            raise ContractError(f"it is version {self.version!r:.40}; this reader reads version "
                                f"{CONTRACT_VERSION}")
        _int(self.beam_size, "decode_defaults.beam_size", 1)
        _int(self.max_decode_steps, "decode_defaults.max_decode_steps", 1)
        signatures = {}
        for sig, inputs in _mapping(self.signatures, "signatures").items():
            if isinstance(inputs, str | bytes) or not isinstance(inputs, Iterable):
                raise ContractError(f"signatures.{sig} must be a list of input names")
            inputs = tuple(inputs)
            if not inputs or not all(isinstance(i, str) for i in inputs):
                raise ContractError(f"signatures.{sig} must be a non-empty list of input names")
            signatures[str(sig)] = inputs
        limits = {}
        for sig, ranges in _mapping(self.input_limits, "input_limits").items():
            if sig not in signatures:
                raise ContractError(f"input_limits names signature '{sig}', which the contract's "
                                    f"signatures do not list")
            limits[sig] = {}
            for name, pair in _mapping(ranges, f"input_limits.{sig}").items():
                where = f"input_limits.{sig}.{name}"
                if name not in signatures[sig]:
                    raise ContractError(f"{where}: '{sig}' has no input '{name}'")
                if isinstance(pair, str | bytes | Mapping) or not isinstance(pair, Iterable):
                    raise ContractError(f"{where} must be a [low, high] pair")
                pair = tuple(pair)
                if len(pair) != 2:
                    raise ContractError(f"{where} must be a [low, high] pair")
                low, high = _int(pair[0], where, 0), _int(pair[1], where, 0)
                if low > high:
                    raise ContractError(f"{where}: low {low} is above high {high}")
                limits[sig][name] = (low, high)
        for sig, inputs in signatures.items():
            unbounded = [i for i in inputs if i in OPTION_INPUTS and i not in limits.get(sig, {})]
            if unbounded:
                raise ContractError(f"it gives no input_limits.{sig} for {unbounded}")
        object.__setattr__(self, "signatures", signatures)
        object.__setattr__(self, "input_limits", limits)

    @property
    def decode_defaults(self) -> dict:
        return {BEAM_SIZE: self.beam_size, MAX_DECODE_STEPS: self.max_decode_steps}

    def to_json(self) -> str:
        return json.dumps({
            "version": self.version,
            "signatures": {s: list(i) for s, i in self.signatures.items()},
            "decode_defaults": self.decode_defaults,
            "input_limits": {s: {k: list(r) for k, r in ranges.items()}
                             for s, ranges in self.input_limits.items()},
        }, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ServingContract:
        """The contract `to_json` wrote; ContractError for anything else."""
        if len(text) > MAX_JSON_BYTES:
            raise ContractError(f"it is {len(text)} bytes, over {MAX_JSON_BYTES}")
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            raise ContractError(f"it is not JSON ({type(e).__name__}: {e})"[:200]) from None
        raw = _mapping(raw, "the contract")
        version = _key(raw, "version", "")
        if version != CONTRACT_VERSION:
            raise ContractError(f"it is version {version!r:.40}; this reader reads version "
                                f"{CONTRACT_VERSION}")
        decode = _mapping(_key(raw, "decode_defaults", ""), "decode_defaults")
        return cls(beam_size=_key(decode, BEAM_SIZE, "decode_defaults."),
                   max_decode_steps=_key(decode, MAX_DECODE_STEPS, "decode_defaults."),
                   input_limits=_key(raw, "input_limits", ""),
                   signatures=_key(raw, "signatures", ""), version=version)

    def check_signatures(self, available: Mapping[str, Iterable[str]]) -> None:
        """ContractError unless each signature the contract names is `available` with exactly
        the contract's inputs (a contract describes the SavedModel it travels in)."""
        for sig, inputs in self.signatures.items():
            if sig not in available:
                raise ContractError(f"it names signature '{sig}', which the SavedModel lacks")
            if set(available[sig]) != set(inputs):
                raise ContractError(f"it says '{sig}' takes {sorted(inputs)}, the SavedModel's "
                                    f"takes {sorted(available[sig])}")


# What a reader assumes of a version whose contract cannot be read: the work of a request
# counted as beam 4 x 120 steps a row, and summarize_options' scalars held to those (the
# DecodeConfig defaults, See et al.'s test-time beam of 4: what a default export's own
# serving_default asks, and no more). Never larger: an unreadable contract never widens a budget.
CONSERVATIVE_BEAM_SIZE = 4
CONSERVATIVE_MAX_DECODE_STEPS = 120
CONSERVATIVE = ServingContract(
    beam_size=CONSERVATIVE_BEAM_SIZE, max_decode_steps=CONSERVATIVE_MAX_DECODE_STEPS,
    input_limits={SUMMARIZE_OPTIONS: {BEAM_SIZE: (1, CONSERVATIVE_BEAM_SIZE),
                                      MAX_DECODE_STEPS: (1, CONSERVATIVE_MAX_DECODE_STEPS),
                                      MIN_DECODE_STEPS: (0, CONSERVATIVE_MAX_DECODE_STEPS)}})


def attach(archive, contract: ServingContract) -> None:
    """Stores `contract` in the SavedModel a keras.export.ExportArchive will write (before
    `write_out`): a non-trainable tf.string variable under the root's SAVED_MODEL_ATTR."""
    import tensorflow as tf  # here: importing this module starts no TensorFlow

    holder = tf.Variable(contract.to_json(), trainable=False, dtype=tf.string,
                         name=SAVED_MODEL_ATTR)
    archive.add_variable_collection(SAVED_MODEL_ATTR, [holder])


def from_saved_model(loaded) -> ServingContract:
    """The contract of a SavedModel loaded with tf.saved_model.load; ContractError naming what
    is missing or wrong when it has none or an unreadable one."""
    holder = getattr(loaded, SAVED_MODEL_ATTR, None)
    if holder is None:
        raise ContractError(f"the SavedModel holds none (no '{SAVED_MODEL_ATTR}': exported "
                            f"before pgn_tf.export stored one, or not by pgn_tf.export)")
    try:
        (variable,) = holder
        text = variable.numpy()
    except Exception as e:  # noqa: BLE001  (whatever is there instead, the answer is "unreadable")
        raise ContractError(f"'{SAVED_MODEL_ATTR}' is not one string variable "
                            f"({type(e).__name__})") from None
    if not isinstance(text, bytes):
        raise ContractError(f"'{SAVED_MODEL_ATTR}' holds a {type(text).__name__}, not a string")
    return ServingContract.from_json(text)
