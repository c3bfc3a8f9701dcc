"""V2 gRPC through the router: each unary call of ``inference.GRPCInferenceService`` is forwarded as raw bytes.

No message is (de)serialised here: the server side is a generic handler with identity serializers and the
upstream side a ``unary_unary`` multicallable without serializers, so any V2 call (and any version of the
proto) passes through at the cost of a copy. grpc.aio runs on the router's own event loop (uvloop included:
grpc.aio's completion-queue poller hands events to whatever loop runs it, as in the model server's workers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import grpc.aio

from trimaran._aio import within
from trimaran.serving.router._http import UpstreamError

__all__ = ["GRPC_SERVICE", "GrpcReply", "InferenceForwarder", "call_upstream", "forwarded_metadata", "open_channel",
           "start_server"]

GRPC_SERVICE = "inference.GRPCInferenceService"
# The model server's limit (trimaran.serving.grpc_service.MAX_MESSAGE); gRPC's default of 4 MiB would
# refuse tensors the replicas accept.
MAX_MESSAGE = 64 * 1024 * 1024
# How long a READY channel that answered UNAVAILABLE gets to show a broken connection (see `_broken`).
BROKEN_WAIT_SECONDS = 0.1
_MESSAGE_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]
# Set by each side of a call itself: forwarding them would duplicate or contradict the upstream call's own.
_NOT_FORWARDED = frozenset({"user-agent", "te", "content-type", "grpc-timeout", "grpc-encoding",
                            "grpc-accept-encoding"})


@dataclass
class GrpcReply:
    """An upstream's answer: the response bytes (None on an error status) and its status and trailers."""

    response: bytes | None
    code: grpc.StatusCode
    details: str
    trailing: tuple[tuple[str, str | bytes], ...]


Forward = Callable[[str, bytes, grpc.aio.ServicerContext], Awaitable[bytes]]


class InferenceForwarder(grpc.GenericRpcHandler):
    """Hands every unary call of the V2 service to ``forward(method, request, context)``; other methods
    are UNIMPLEMENTED, as on the model server."""

    def __init__(self, forward: Forward) -> None:
        self._forward = forward
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        if not method.startswith(f"/{GRPC_SERVICE}/"):
            return None
        handler = self._handlers.get(method)
        if handler is None:
            forward = self._forward

            async def behaviour(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
                return await forward(method, request, context)

            handler = self._handlers[method] = grpc.unary_unary_rpc_method_handler(behaviour)
        return handler


async def start_server(port: int, forward: Forward) -> grpc.aio.Server:
    """A started grpc.aio server on ``127.0.0.1:port``. Raises OSError when the port is taken: SO_REUSEPORT
    is off (gRPC's default is on), so a port another process holds is refused instead of shared."""
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0), *_MESSAGE_OPTIONS])
    server.add_generic_rpc_handlers((InferenceForwarder(forward),))
    try:
        bound = server.add_insecure_port(f"127.0.0.1:{port}")
    except RuntimeError as exc:  # grpcio >= 1.5x raises; older versions return 0
        raise OSError(f"cannot listen for gRPC on port {port}: address in use") from exc
    if bound == 0:
        raise OSError(f"cannot listen for gRPC on port {port}: address in use")
    await server.start()
    return server


def open_channel(address: str) -> grpc.aio.Channel:
    """One HTTP/2 channel to a replica, shared by every call to it."""
    return grpc.aio.insecure_channel(address, options=_MESSAGE_OPTIONS)


def forwarded_metadata(context: grpc.aio.ServicerContext) -> tuple[tuple[str, str | bytes], ...]:
    """The caller's metadata, less what each call sets for itself."""
    return tuple((key, value) for key, value in context.invocation_metadata() or ()
                 if key not in _NOT_FORWARDED and not key.startswith(":"))


async def call_upstream(channel: grpc.aio.Channel, method: str, request: bytes, timeout: float,
                        metadata: tuple[tuple[str, str | bytes], ...]) -> GrpcReply:
    """Send one unary call. Raises UpstreamError when the replica could not be reached or its connection broke
    before an answer (safe to send elsewhere), asyncio.TimeoutError when the deadline passed; any other status is the
    replica's answer and is returned."""
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)(
        request, timeout=timeout, metadata=metadata)
    try:
        response = await call
    except grpc.aio.AioRpcError as exc:
        code = exc.code()
        # CANCELLED here is the transport's (a connection that broke mid-call) or a stopping replica's: the
        # router's own cancellation raises CancelledError instead, and the model server never answers it.
        if code == grpc.StatusCode.CANCELLED or (code == grpc.StatusCode.UNAVAILABLE and await _broken(channel)):
            raise UpstreamError(f"{code.name}: {exc.details()}") from None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise asyncio.TimeoutError(exc.details()) from None
        return GrpcReply(None, code, exc.details() or "", tuple(exc.trailing_metadata() or ()))
    return GrpcReply(response, grpc.StatusCode.OK, "", tuple(await call.trailing_metadata() or ()))


async def _broken(channel: grpc.aio.Channel) -> bool:
    """Whether the channel's connection failed. UNAVAILABLE is both "no connection" and a replica's own "not
    ready / overloaded" answer; only the former takes the channel out of READY, and the connectivity update
    may land just after the failed call, so a READY channel gets a moment to leave it."""
    if channel.get_state() != grpc.ChannelConnectivity.READY:
        return True
    try:
        await within(channel.wait_for_state_change(grpc.ChannelConnectivity.READY), BROKEN_WAIT_SECONDS)
    except asyncio.TimeoutError:
        return False
    return True
