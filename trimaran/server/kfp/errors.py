"""Errors as KFP's API server writes them (grpc-gateway's ``google.rpc.Status`` in JSON), which
``kfp.Client`` shows in its ``ApiException``."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from trimaran.api.errors import FieldError

__all__ = ["KfpError", "error_response"]

# gRPC codes and the HTTP status grpc-gateway gives each.
_INVALID_ARGUMENT = 3
_NOT_FOUND = 5
_ALREADY_EXISTS = 6
_PERMISSION_DENIED = 7
_FAILED_PRECONDITION = 9


class KfpError(Exception):
    """A request KFP's API answers with an error."""

    def __init__(self, http: int, code: int, message: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.http = http
        self.code = code
        self.message = message
        self.details = details or []

    @classmethod
    def invalid(cls, message: str, errors: list[FieldError] | None = None) -> KfpError:
        details = [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                    "field_violations": [{"field": e.path, "description": str(e)} for e in errors]}] if errors else []
        return cls(400, _INVALID_ARGUMENT, message, details)

    @classmethod
    def not_found(cls, what: str, ident: str) -> KfpError:
        return cls(404, _NOT_FOUND, f"{what} {ident} not found")

    @classmethod
    def exists(cls, message: str) -> KfpError:
        return cls(409, _ALREADY_EXISTS, message)

    @classmethod
    def forbidden(cls, who: str, verb: str, what: str, namespace: str | None) -> KfpError:
        where = f'in namespace "{namespace}"' if namespace else "in every namespace"
        return cls(403, _PERMISSION_DENIED, f'"{who}" may not {verb} {what} {where}')

    @classmethod
    def precondition(cls, message: str) -> KfpError:
        return cls(400, _FAILED_PRECONDITION, message)


def error_response(exc: KfpError) -> Response:
    body = {"error": exc.message, "code": exc.code, "message": exc.message, "details": exc.details}
    return Response(orjson.dumps(body), status_code=exc.http, media_type="application/json")
