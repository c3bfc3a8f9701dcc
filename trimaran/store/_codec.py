"""JSON encoding of stored bodies: orjson when installed (several times faster), else the stdlib."""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # orjson is an optional speed-up, not a dependency
    orjson = None

if orjson is not None:

    def dumps(obj: Any) -> str:
        """Encode ``obj`` as compact JSON text."""
        return orjson.dumps(obj).decode()

    def loads(text: str | bytes) -> Any:
        """Decode JSON text."""
        return orjson.loads(text)

else:
    _encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    _decode = json.JSONDecoder().decode

    def dumps(obj: Any) -> str:
        """Encode ``obj`` as compact JSON text."""
        return _encode(obj)

    def loads(text: str | bytes) -> Any:
        """Decode JSON text."""
        return _decode(text if isinstance(text, str) else text.decode())
