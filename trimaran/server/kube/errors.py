"""API errors as Kubernetes ``Status`` objects, which every client decodes (``apierrors.IsNotFound``,
``ApiException.reason``): one exception type carrying the reason, the code and the details."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from trimaran.api.errors import FieldError

__all__ = ["StatusError", "status_response"]

_GENERIC_MESSAGES = frozenset({"the server could not find the requested resource",
                               "the server does not allow this method on the requested resource"})
# apimachinery's cause types (field.ErrorType) are "FieldValue" + the error's type.
_CAUSE_PREFIX = "FieldValue"


class StatusError(Exception):
    """A failed request, answered as ``{"kind": "Status", "status": "Failure", ...}``."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        # Fields in metav1.Status' order, empty ones left out (omitempty), as kube-apiserver writes
        # them: some clients compare the text.
        out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                               "message": self.message}
        if self.reason:
            out["reason"] = self.reason
        details = {k: v for k, v in (self.details or {}).items() if v not in ("", None, [], {})}
        # apimachinery's NewGenericServerResponse (go-restful's answer to a path or method no route
        # takes) always sets details, so they are written even empty: "details":{}.
        if details or self.details is not None or self.message in _GENERIC_MESSAGES:
            out["details"] = details
        out["code"] = self.code
        return out

    # Constructors named as apimachinery's errors package names them. ---------------------

    @classmethod
    def too_large_resource_version(cls, wanted: int, current: int) -> StatusError:
        """apimachinery's ``NewTooLargeResourceVersionError``: a read at a revision the store has not reached."""
        return cls(504, "Timeout", f"Timeout: Too large resource version: {wanted}, current: {current}",
                   {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1}, headers={"Retry-After": "1"})

    @classmethod
    def not_found(cls, group: str, plural: str, name: str) -> StatusError:
        resource = f"{plural}.{group}" if group else plural
        return cls(404, "NotFound", f'{resource} "{name}" not found',
                   {"name": name, "group": group, "kind": plural})

    @classmethod
    def already_exists(cls, group: str, plural: str, name: str) -> StatusError:
        resource = f"{plural}.{group}" if group else plural
        return cls(409, "AlreadyExists", f'{resource} "{name}" already exists',
                   {"name": name, "group": group, "kind": plural})

    @classmethod
    def conflict(cls, group: str, plural: str, name: str, why: str) -> StatusError:
        resource = f"{plural}.{group}" if group else plural
        return cls(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": {why}',
                   {"name": name, "group": group, "kind": plural})

    @classmethod
    def invalid(cls, group: str, kind: str, name: str, errors: list[FieldError],
                lines: list[str] | None = None) -> StatusError:
        """422 with one cause per field; ``lines`` are the fuller messages when there are any."""
        causes = [{"reason": _CAUSE_PREFIX + e.type,
                   "message": str(e).split(": ", 1)[-1], "field": e.path} for e in errors]
        if errors and all(e.path for e in errors):
            text = _aggregate([str(e) for e in errors])
        else:
            text = "; ".join(lines) if lines else ", ".join(str(e) for e in errors)
        label = f"{kind}.{group}" if group else kind
        return cls(422, "Invalid", f'{label} "{name}" is invalid: {text}',
                   {"name": name, "group": group, "kind": kind, "causes": causes})

    @classmethod
    def bad_request(cls, message: str) -> StatusError:
        return cls(400, "BadRequest", message)

    @classmethod
    def forbidden(cls, user: str, verb: str, group: str, plural: str, namespace: str | None, name: str = "",
                  subresource: str = "") -> StatusError:
        """The authorizer's refusal, as apiserver's ``responsewriters.Forbidden`` words it."""
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        resource = f'"{plural}/{subresource}"' if subresource else f'"{plural}"'
        qualified = f"{plural}.{group}" if group else plural
        subject = f'{qualified} "{name}"' if name else qualified
        return cls(403, "Forbidden", f'{subject} is forbidden: User "{user}" cannot {verb} resource {resource} '
                   f'in API group "{group}" {where}', {"name": name, "group": group, "kind": plural})

    @classmethod
    def unauthorized(cls) -> StatusError:
        return cls(401, "Unauthorized", "Unauthorized")

    @classmethod
    def method_not_allowed(cls, message: str = "the server does not allow this method on the requested resource"
                           ) -> StatusError:
        return cls(405, "MethodNotAllowed", message)

    @classmethod
    def unsupported_media_type(cls, content_type: str) -> StatusError:
        return cls(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - accepted media '
                   f'types include: application/json-patch+json, application/merge-patch+json, '
                   f'application/apply-patch+yaml (got "{content_type}")')

    @classmethod
    def too_large(cls, limit: int) -> StatusError:
        return cls(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")

    @classmethod
    def gone(cls, message: str) -> StatusError:
        return cls(410, "Expired", message)


def _aggregate(messages: list[str]) -> str:
    """apimachinery's ``utilerrors.Aggregate`` text: one message as it is, several (once each) in brackets."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# Go's encoding/json escapes these inside strings (they appear nowhere else in JSON), and
# kube-apiserver's bodies are Go's: a client comparing the text sees the same bytes.
_GO_ESCAPES = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"),
               ("\u2028".encode(), b"\\u2028"), ("\u2029".encode(), b"\\u2029"))


def status_response(error: StatusError) -> Response:
    """The Status as kube-apiserver writes it: compact JSON, Go's escapes, a trailing newline."""
    body = orjson.dumps(error.body())
    for raw, escaped in _GO_ESCAPES:
        body = body.replace(raw, escaped)
    return Response(body + b"\n", status_code=error.code, media_type="application/json", headers=error.headers)
