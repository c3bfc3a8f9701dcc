"""Kubernetes resource quantities ("500m", "4Gi", "1e9"): parsing and printing.

One module for the API's validation and the runtime's admission, so both read a quantity alike.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal

__all__ = [
    "QUANTITY_FORMAT",
    "QuantityError",
    "format_cpu",
    "format_memory",
    "parse_cpu",
    "parse_memory",
    "parse_quantity",
]


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


# The pattern Kubernetes names in its error message; `_QUANTITY` is the stricter grammar it applies.
QUANTITY_FORMAT = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_QUANTITY = re.compile(
    r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?")
_BINARY_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Bounds far beyond any real resource amount; they keep "1e999999999" from costing time or memory.
_MAX_DIGITS = 64
_MAX_EXPONENT = 64


def number_text(value: int | float) -> str:
    """A YAML number (``cpu: 2``, ``cpu: 0.5``) as the quantity text it stands for."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError("quantity must be a finite number")
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    return str(value)


def parse_quantity(q: str | int | float) -> Decimal:
    """Exact value of a Kubernetes quantity: ``"500m"`` → 0.5, ``"4Gi"`` → 4294967296, ``"1e3"`` → 1000.

    A lone ``E`` is exa; ``E`` followed by digits is an exponent. Raises :class:`QuantityError`
    (a ValueError) with Kubernetes' message when ``q`` is not a quantity.
    """
    if isinstance(q, bool) or not isinstance(q, (str, int, float)):
        raise QuantityError(f"quantity must be a string or a number, not {type(q).__name__}")
    text = q if isinstance(q, str) else number_text(q)
    m = _QUANTITY.fullmatch(text)
    if m is None:
        raise QuantityError(f"quantities must match the regular expression '{QUANTITY_FORMAT}'")
    number, suffix = m.group(1), m.group(2) or ""
    if len(number) > _MAX_DIGITS:
        raise QuantityError("quantity has too many digits")
    value = Decimal(number)
    if suffix in _BINARY_SUFFIX:
        return value * _BINARY_SUFFIX[suffix]
    exponent = int(suffix[1:]) if len(suffix) > 1 else _DECIMAL_SUFFIX[suffix]
    if abs(exponent) > _MAX_EXPONENT:
        raise QuantityError("quantity is out of range")
    return value.scaleb(exponent)


def parse_cpu(q: str | int | float) -> float:
    """CPU quantity in cores, rounded up to whole millicores as Kubernetes does ("1u" → 0.001)."""
    cores = parse_quantity(q)
    if cores < 0:
        raise QuantityError(f"cpu must not be negative: {q!r}")
    return math.ceil(cores * 1000) / 1000


def parse_memory(q: str | int | float) -> int:
    """Memory (or storage) quantity in bytes, rounded up: ``"4Gi"`` → 4294967296, ``"0.5"`` → 1."""
    amount = parse_quantity(q)
    if amount < 0:
        raise QuantityError(f"memory must not be negative: {q!r}")
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def format_cpu(cores: float) -> str:
    """Cores as Kubernetes prints them: whole cores as "2", else millicores "500m"."""
    millis = round(cores * 1000)
    if millis % 1000 == 0:
        return str(millis // 1000)
    return f"{millis}m"


def format_memory(num_bytes: int) -> str:
    """Bytes in the largest binary unit that divides them exactly ("64Gi", "1536Mi", "100")."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY_SUFFIX[suffix]
        if num_bytes and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)
