"""What a config field may hold, declared with its type: `Literal[...]` the choices,
`Annotated[..., Range(...)]` the bounds; and the checks and `--set` parsing that read them
(pgn_tf.config's dataclasses declare, this module checks).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from typing import Annotated, Any, Literal


@dataclasses.dataclass(frozen=True)
class Range:
    """The interval a number field may take, declared with it: `Annotated[int, Range(1)]`.

    `Config.validate()` reads it from the type hint, so a new field states its bounds where it
    is declared and needs no other code.
    """

    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False  # (min, ... instead of [min, ...
    max_exclusive: bool = False  # ..., max) instead of ..., max]

    def holds(self, value: float) -> bool:
        if self.min is not None and (value <= self.min if self.min_exclusive else value < self.min):
            return False
        if self.max is not None and (value >= self.max if self.max_exclusive else value > self.max):
            return False
        return True

    def describe(self) -> str:
        low, high = "([" [not self.min_exclusive], ")]"[not self.max_exclusive]
        if self.max is None:
            return f"{'>' if self.min_exclusive else '>='} {self.min:g}"
        if self.min is None:
            return f"{'<' if self.max_exclusive else '<='} {self.max:g}"
        return f"in {low}{self.min:g}, {self.max:g}{high}"


PositiveInt = Annotated[int, Range(1)]
NonNegativeInt = Annotated[int, Range(0)]
PositiveFloat = Annotated[float, Range(0, min_exclusive=True)]
NonNegativeFloat = Annotated[float, Range(0)]
Probability = Annotated[float, Range(0, 1)]


_KINDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    """A dataclass's field types, Annotated extras kept (its annotations are strings here)."""
    return typing.get_type_hints(cls, include_extras=True)


def spec(hint: Any) -> tuple[type, tuple | None, Range | None]:
    """A field's type hint -> (base type, Literal choices or None, Range or None)."""
    rng = None
    if typing.get_origin(hint) is Annotated:
        hint, *extras = typing.get_args(hint)
        rng = next((e for e in extras if isinstance(e, Range)), None)
    choices = None
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        hint = type(choices[0])
    if hint not in _KINDS:
        raise TypeError(f"config fields are bool, int, float, str or a Literal of one, "
                        f"optionally Annotated with a Range; got {hint!r}")
    return hint, choices, rng


def bad(key: str, expected: str, got: Any) -> str:
    return f"bad value for '{key}': expected {expected}, got {got!r}"


def checked(key: str, hint: Any, value: Any) -> Any:
    """value if it fits the declared type (an int given for a float field becomes a float)."""
    base, choices, rng = spec(hint)
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, base) or (base is not bool and isinstance(value, bool)):
        raise ValueError(bad(key, _KINDS[base], value))
    if base is float and not math.isfinite(value):
        raise ValueError(bad(key, "a finite number", value))
    if choices is not None and value not in choices:
        raise ValueError(bad(key, "one of " + ", ".join(repr(c) for c in choices), value))
    if rng is not None and not rng.holds(value):
        raise ValueError(bad(key, rng.describe(), value))
    return value


def parse_value(text: str, base: type) -> Any:
    """A `--set` string -> a value of the field's declared base type."""
    if base is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError("a boolean (true/false)")
    try:
        return base(text)
    except ValueError:
        raise ValueError(_KINDS[base]) from None
