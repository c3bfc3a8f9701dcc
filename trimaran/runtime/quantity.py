"""Kubernetes resource quantities ("500m", "4Gi", "1e9") as numbers.

Self-contained on purpose: the runtime reads plain pod dicts and must not depend on the
api package's models.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

__all__ = [
    "QuantityError",
    "parse_quantity",
    "parse_cpu",
    "parse_memory",
    "format_cpu",
    "format_memory",
]

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}

# The exponent form is tried before the suffixes so that "1e9" is 10^9 while a bare
# "1E" still means one exa (the grammar of k8s.io/apimachinery resource.Quantity).
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exponent>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a quantity exactly: ``"1.5Gi"`` → ``Decimal(1610612736)``.

    Numbers (YAML may give ``cpu: 2`` or ``cpu: 0.5``) are accepted as their decimal text.
    """
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a number or a string, not {value!r}")
    if isinstance(value, (int, float)):
        text = repr(value) if isinstance(value, float) else str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise QuantityError(f"quantity must be a number or a string, not {value!r}")
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(
            f"quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}"
        )
    try:
        number = Decimal(match["number"])
        if match["exponent"]:
            return number.scaleb(int(match["exponent"][1:]))
        return number * _SUFFIXES[match["suffix"] or ""]
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"invalid quantity {value!r}") from exc


def parse_cpu(value: str | int | float) -> float:
    """CPU quantity → cores, rounded up to whole millicores as Kubernetes does ("1u" → 0.001)."""
    cores = parse_quantity(value)
    if cores < 0:
        raise QuantityError(f"cpu must not be negative: {value!r}")
    return math.ceil(cores * 1000) / 1000


def parse_memory(value: str | int | float) -> int:
    """Memory (or any byte) quantity → whole bytes, rounded up ("0.5" → 1)."""
    amount = parse_quantity(value)
    if amount < 0:
        raise QuantityError(f"memory must not be negative: {value!r}")
    return math.ceil(amount)


def format_cpu(cores: float) -> str:
    """Cores as Kubernetes would print them: whole cores as "2", else millicores "500m"."""
    millis = round(cores * 1000)
    if millis % 1000 == 0:
        return str(millis // 1000)
    return f"{millis}m"


def format_memory(num_bytes: int) -> str:
    """Bytes in the largest binary unit that divides them exactly ("64Gi", "1536Mi", "100")."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if num_bytes and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)
