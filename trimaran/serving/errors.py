"""Errors the data plane raises, each with the HTTP status and gRPC status code it is answered with."""

from __future__ import annotations


class ServingError(Exception):
    """A request failed; ``str(error)`` is the message clients see in ``{"error": message}``.

    Subclasses fix ``http_status`` and ``grpc_code`` (the name of a ``grpc.StatusCode`` member, kept as a
    string so that this module does not import grpc).
    """

    http_status = 500
    grpc_code = "INTERNAL"
    headers: tuple[tuple[str, str], ...] = ()


class InvalidInput(ServingError):
    """The request is malformed or does not fit the model: 400 / INVALID_ARGUMENT."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class NotFound(ServingError):
    """No such model, version or route: 404 / NOT_FOUND."""

    http_status = 404
    grpc_code = "NOT_FOUND"


class NotReady(ServingError):
    """The model (or version) exists but cannot serve now: 503 / UNAVAILABLE."""

    http_status = 503
    grpc_code = "UNAVAILABLE"


class Overloaded(NotReady):
    """The model's queue is full: 503 with ``Retry-After`` / UNAVAILABLE. Clients should back off and retry."""

    headers = (("retry-after", "1"),)


class RequestTimeout(ServingError):
    """No answer within ``--request-timeout``: 504 / DEADLINE_EXCEEDED."""

    http_status = 504
    grpc_code = "DEADLINE_EXCEEDED"


class Unsupported(ServingError):
    """A protocol feature this server does not implement: 501 / UNIMPLEMENTED."""

    http_status = 501
    grpc_code = "UNIMPLEMENTED"


class PayloadTooLarge(ServingError):
    """A body over ``--max-body-bytes`` (also once decompressed): 413 / RESOURCE_EXHAUSTED."""

    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class UnsupportedMediaType(ServingError):
    """A Content-Type or Content-Encoding the server cannot decode: 415 / INVALID_ARGUMENT."""

    http_status = 415
    grpc_code = "INVALID_ARGUMENT"
