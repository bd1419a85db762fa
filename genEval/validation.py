"""The vocabulary of setting checks, without torch: :class:`SettingError` (the one error of a bad setting: key, value,
what is allowed, an example), the whole-number and batch-size checks, and the names a setting may take for precision,
memory format and compile scope (docs/architecture.md, "Foundation").

Torch-free on purpose: the command line checks a run's settings (``geneval batch_size=0``, ``precision=fp8``)
before it imports torch or builds a model, and answers in a fraction of a second (docs/configuration.md).
``genEval.interfaces`` and ``genEval.kernels`` re-export these names, where they were defined before.
"""

from __future__ import annotations

import warnings
from typing import Any


def is_whole(value: object, low: float = float("-inf")) -> bool:
    """``value`` is a whole number >= ``low``: an int, a NumPy integer or an integral float such as 100.0 (what a
    YAML or command-line value may be); a bool or text is not. The one check behind every :class:`SettingError`
    about a count, a size or a seed."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__index__"):
        return False
    return float(value).is_integer() and bool(value >= low)


class SettingError(ValueError):
    """A setting (a constructor argument, i.e. a config key) whose value fails its type or range check.

    The message names the key, the value given, what is allowed and an example of a valid value, e.g.
    ``limit must be a whole number >= 1 or null (all samples), got -3; e.g. limit=100``. ``key`` is the
    argument's name; :meth:`under` gives the same error for the config key it came from (``data.limit``),
    which is what the command layer shows.
    """

    def __init__(self, key: str, value: object, expected: str, example: str, note: str = "") -> None:
        self.key, self.value, self.expected, self.example, self.note = key, value, expected, example, note
        super().__init__(
            f"{key} must be {expected}, got {value!r}; e.g. {key}={example}" + (f" ({note})" if note else "") + "."
        )

    def __reduce__(self):  # pickles (e.g. out of a DataLoader worker) with its fields, not only its message
        return (type(self), (self.key, self.value, self.expected, self.example, self.note))

    def under(self, prefix: str) -> SettingError:
        """This error for the key ``<prefix>.<key>`` (``prefix`` empty: unchanged)."""
        if not prefix or self.key.startswith(f"{prefix}."):
            return self
        return SettingError(f"{prefix}.{self.key}", self.value, self.expected, self.example, self.note)


def check_batch_size(value: Any, key: str = "batch_size", nullable: bool = True) -> int | None:
    """The one check of a batch size, for every place that takes one (the search, the snapshot scorer, a generator's
    training): a whole number >= 1 (or null: chosen from the memory one search step needs, when ``nullable``)."""
    if value is None and nullable:
        return None
    if not is_whole(value, 1):
        raise SettingError(
            key,
            value,
            "a whole number >= 1" + (" or null" if nullable else ""),
            "64",
            "null chooses it from the memory one search step needs" if nullable else "",
        )
    return int(value)


#: The one precision vocabulary: ``precision=``, ``role_precision.<role>=``, ``generator.precision=`` and
#: ``oracle.precision=`` all take these.
PRECISIONS = ("fp32", "bf16", "fp16")
#: Older spellings (``generator.dtype`` took float32 | float16 | bfloat16), accepted with a deprecation note.
OLD_PRECISIONS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def precision_name(value: Any, key: str = "precision", nullable: bool = False) -> str | None:
    """``value`` in the precision vocabulary (:data:`PRECISIONS`; None when ``nullable``). An older spelling
    (``float32``, ``bfloat16``, ``float16``, or a torch dtype) is accepted with a FutureWarning naming the new one;
    anything else is a :class:`SettingError` naming ``key``."""
    if value in PRECISIONS or (value is None and nullable):
        return value
    spelled = str(value).removeprefix("torch.")
    if spelled in OLD_PRECISIONS:
        new = OLD_PRECISIONS[spelled]
        warnings.warn(
            f"{key}={spelled} is deprecated: genEval spells precision {' | '.join(PRECISIONS)}; write {key}={new}.",
            FutureWarning,
            stacklevel=3,
        )
        return new
    raise SettingError(key, value, "one of " + ", ".join(PRECISIONS) + (" or null" if nullable else ""), "bf16")


#: ``memory_format`` values: ``auto`` = channels_last where the step is compiled on CUDA, contiguous elsewhere.
MEMORY_FORMATS = ("auto", "channels_last", "contiguous")
#: ``compile_scope`` values: ``full`` = the step as one graph; ``regional`` = the decoder's repeated blocks.
COMPILE_SCOPES = ("full", "regional")
