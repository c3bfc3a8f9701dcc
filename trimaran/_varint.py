"""Protobuf's base-128 varint, read where we read the wire format by hand (the Kubernetes envelope's checks,
the inference messages on gRPC's hot path)."""

from __future__ import annotations


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it. IndexError when ``data`` ends inside it, ValueError
    when it runs past ten bytes (no 64-bit value does)."""
    value = shift = 0
    while True:
        if shift > 63:
            raise ValueError("a varint longer than ten bytes")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
