"""V2 (Open Inference Protocol) datatypes and their numpy equivalents."""

from __future__ import annotations

import numpy as np

# BF16 is absent: numpy has no bfloat16, so such tensors cannot be decoded into an array.
_NUMPY_OF: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}
_DATATYPE_OF: dict[np.dtype, str] = {dtype: name for name, dtype in _NUMPY_OF.items()}


def datatype_to_numpy(datatype: str) -> np.dtype:
    """The numpy dtype that holds a V2 datatype; BYTES is ``object`` (elements are ``bytes`` or ``str``).

    Raises ValueError for an unknown datatype and for BF16, which numpy cannot represent.
    """
    try:
        return _NUMPY_OF[datatype]
    except KeyError:
        raise ValueError(f"unsupported datatype {datatype!r}; expected one of {', '.join(_NUMPY_OF)}") from None


def numpy_to_datatype(dtype: np.dtype | type) -> str:
    """The V2 datatype of a numpy dtype; strings, bytes and objects are BYTES.

    Raises ValueError for dtypes with no V2 equivalent (complex, datetime, void).
    """
    found = _DATATYPE_OF.get(dtype)  # a native dtype, the usual case: one lookup
    if found is not None:
        return found
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return "BYTES"
    try:
        return _DATATYPE_OF[dtype.newbyteorder("=")]
    except KeyError:
        raise ValueError(f"numpy dtype {dtype} has no V2 datatype") from None
