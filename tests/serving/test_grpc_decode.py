"""gRPC typed float contents read straight from their packed wire bytes, against the values sent."""

from __future__ import annotations

import numpy as np
import pytest

from trimaran.serving.grpc_service import decode_request
from trimaran.serving.proto import grpc_predict_v2_pb2 as pb


@pytest.mark.parametrize("datatype,field,dtype", [("FP32", "fp32_contents", np.float32),
                                                  ("FP64", "fp64_contents", np.float64)])
@pytest.mark.parametrize("count", [0, 1, 64, 5000])  # lengths of 1, 2 and 3 varint bytes on the wire
def test_packed_floats_decode_to_the_values_sent(datatype: str, field: str, dtype: type, count: int) -> None:
    values = np.random.default_rng(count).standard_normal(count).astype(dtype)
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="x", datatype=datatype, shape=[count])
    getattr(tensor.contents, field).extend(values.tolist())
    decoded = decode_request(pb.ModelInferRequest.FromString(request.SerializeToString()))["x"]
    assert decoded.dtype == dtype and np.array_equal(decoded, values)
    if count:
        decoded[0] = 1.0  # a model may scale its input in place


def test_contents_of_another_field_are_refused_by_element_count() -> None:
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[2])
    tensor.contents.fp64_contents.extend([1.0, 2.0])  # the wrong field for FP32: nothing in fp32_contents
    with pytest.raises(Exception, match="needs 2 elements"):
        decode_request(pb.ModelInferRequest.FromString(request.SerializeToString()))
