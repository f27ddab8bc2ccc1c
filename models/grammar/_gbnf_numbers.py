"""GBNF for numbers within a range: only the texts of values the schema allows are admitted.

A grammar that bounds only the number of digits lets a model write ``2`` where the maximum is
``1.5``; under greedy decoding it writes the same ``2`` on every retry, and the validator
rejects every one. llguidance and xgrammar enforce ``minimum``/``maximum`` themselves; this
module gives the GBNF that llama.cpp's server reads the same guarantee.

A number with ``k`` decimals is read as the integer ``N = value * 10^k``; the range becomes
``A <= N <= B`` (exclusive bounds included), split into its negative and non-negative
magnitudes. A magnitude is written as its integer part ``I`` (no leading zeros) and an
optional fraction of 1..k digits, which stands for that fraction padded with zeros to ``k``
digits. The integer parts strictly inside the range take any fraction; the two boundary
integer parts take the fractions whose padded digits lie within the boundary's. Both are
digit-range expressions built position by position, the usual range-to-regex construction.
Negative zero (``-0``, ``-0.0``) is not admitted: the negative branch starts at ``N = 1``.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

__all__ = ["NumberRange", "number_gbnf"]


def _alt(options: list[str]) -> str:
    options = [o for o in dict.fromkeys(options) if o]
    if len(options) == 1:
        return options[0]
    return "(" + " | ".join(options) + ")"


def _digit(low: int, high: int) -> str:
    """One digit from ``low`` to ``high``."""
    return f'"{low}"' if low == high else f"[{low}-{high}]"


def _any_digits(low: int, high: int) -> str:
    """``low`` to ``high`` free digits (empty when ``high`` is 0)."""
    if high <= 0:
        return ""
    return f"[0-9]{{{low}}}" if low == high else f"[0-9]{{{low},{high}}}"


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _fixed(lo: str, hi: str) -> str:
    """Digit strings of exactly ``len(lo)`` digits between ``lo`` and ``hi`` (same length)."""
    n = len(lo)
    if n == 0:
        return ""
    a, b = int(lo[0]), int(hi[0])
    if a == b:
        return _join(f'"{a}"', _fixed(lo[1:], hi[1:]))
    if lo[1:] == "0" * (n - 1) and hi[1:] == "9" * (n - 1):
        return _join(_digit(a, b), _any_digits(n - 1, n - 1))
    options = [_join(f'"{a}"', _fixed(lo[1:], "9" * (n - 1)))]
    if b - a > 1:
        options.append(_join(_digit(a + 1, b - 1), _any_digits(n - 1, n - 1)))
    options.append(_join(f'"{b}"', _fixed("0" * (n - 1), hi[1:])))
    return _alt(options)


def _whole(low: int, high: int) -> str:
    """Decimal texts (no leading zeros) of the integers ``low..high`` (``0 <= low <= high``)."""
    options: list[str] = []
    if low == 0:
        options.append('"0"')
        low = 1
    full: list[int] = []  # lengths whose every number is in range: merged into one option
    for length in range(len(str(low)), len(str(high)) + 1 if high >= low else 0):
        first, last = 10 ** (length - 1), 10**length - 1
        a, b = max(low, first), min(high, last)
        if a == first and b == last:
            full.append(length)
        else:
            options.append(_fixed(str(a), str(b)))
    if full:
        options.append(_join("[1-9]", _any_digits(full[0] - 1, full[-1] - 1)))
    return _alt(options)


def _padded(lo: str, hi: str) -> str:
    """1..n digits whose zero-padded n-digit form lies between ``lo`` and ``hi`` (n digits).

    The empty string's padded form is all zeros; the caller decides whether it may stand.
    """
    n = len(lo)
    a, b = int(lo[0]), int(hi[0])

    def rest(lo_rest: str, hi_rest: str) -> str:
        if not lo_rest:
            return ""
        inner = _padded(lo_rest, hi_rest)
        # Stopping here pads the remaining digits with zeros: allowed when that is in range.
        return f"({inner})?" if lo_rest == "0" * len(lo_rest) else inner

    if lo[1:] == "0" * (n - 1) and hi[1:] == "9" * (n - 1):
        return _join(_digit(a, b), _any_digits(0, n - 1))
    if a == b:
        return _join(f'"{a}"', rest(lo[1:], hi[1:]))
    options = [_join(f'"{a}"', rest(lo[1:], "9" * (n - 1)))]
    if b - a > 1:
        options.append(_join(_digit(a + 1, b - 1), _any_digits(0, n - 1)))
    options.append(_join(f'"{b}"', rest("0" * (n - 1), hi[1:])))
    return _alt(options)


def _fraction(lo: int, hi: int, decimals: int) -> str:
    """An optional ``.digits`` whose value, in units of 10^-decimals, is within ``lo..hi``."""
    digits = _padded(f"{lo:0{decimals}d}", f"{hi:0{decimals}d}")
    point = f'"." {digits}'
    return f"({point})?" if lo == 0 else point


def _magnitude(low: int, high: int, decimals: int) -> str:
    """Texts of the non-negative values ``low..high`` in units of 10^-decimals."""
    if decimals == 0:
        return _whole(low, high)
    unit = 10**decimals
    (i_low, f_low), (i_high, f_high) = divmod(low, unit), divmod(high, unit)
    if i_low == i_high:
        return _join(f'"{i_low}"', _fraction(f_low, f_high, decimals))
    # Integer parts that take any fraction: those strictly inside, and a boundary one whose
    # fraction is not cut.
    first = i_low if f_low == 0 else i_low + 1
    last = i_high if f_high == unit - 1 else i_high - 1
    options = []
    if first > i_low:
        options.append(_join(f'"{i_low}"', _fraction(f_low, unit - 1, decimals)))
    if first <= last:
        options.append(_join(_whole(first, last), _fraction(0, unit - 1, decimals)))
    if last < i_high:
        options.append(_join(f'"{i_high}"', _fraction(0, f_high, decimals)))
    return _alt(options)


def _decimal(bound: Any) -> Decimal | None:
    if isinstance(bound, bool) or not isinstance(bound, int | float):
        return None
    if not math.isfinite(bound):
        return None
    # str() of a float is its shortest round-trip text: 0.1 stays 0.1, not 0.1000000000000000055.
    return Decimal(bound) if isinstance(bound, int) else Decimal(str(bound))


class NumberRange:
    """The values a numeric schema admits, in units of 10^-decimals: ``low..high``."""

    __slots__ = ("decimals", "high", "low")

    def __init__(self, schema: Any, decimals: int, largest: int) -> None:
        """Read ``schema``'s bounds; a missing one bounds the integer part to ``largest``."""
        self.decimals = decimals
        scale = Decimal(10) ** decimals
        # Without a bound, any fraction of the largest integer part: as many digits as the
        # output bounds allow, and a simpler grammar than stopping at exactly ``largest``.
        lows = [-(Decimal(largest + 1) * scale - 1)]
        highs = [Decimal(largest + 1) * scale - 1]
        for key, inclusive in (("minimum", True), ("exclusiveMinimum", False)):
            bound = _decimal(schema.get(key))
            if bound is not None:
                n = (bound * scale).to_integral_value(ROUND_CEILING)
                lows.append(n if inclusive or n != bound * scale else n + 1)
        for key, inclusive in (("maximum", True), ("exclusiveMaximum", False)):
            bound = _decimal(schema.get(key))
            if bound is not None:
                n = (bound * scale).to_integral_value(ROUND_FLOOR)
                highs.append(n if inclusive or n != bound * scale else n - 1)
        self.low = int(max(lows))
        self.high = int(min(highs))

    @property
    def empty(self) -> bool:
        """True when no value with these decimals lies in the range."""
        return self.low > self.high


def number_gbnf(allowed: NumberRange) -> str:
    """A GBNF expression for the JSON texts of exactly the values in ``allowed``."""
    if allowed.empty:
        raise ValueError("no value lies in the range")
    options = []
    if allowed.low < 0:
        negative = _magnitude(max(-allowed.high, 1), -allowed.low, allowed.decimals)
        options.append(f'"-" {negative}')
    if allowed.high >= 0:
        options.append(_magnitude(max(allowed.low, 0), allowed.high, allowed.decimals))
    return " | ".join(options)
