"""Container probes (``startupProbe``, ``readinessProbe``, ``livenessProbe``), as the kubelet runs them.

Every probe of every pod is a task on one asyncio loop in a thread of its own (no thread per pod):
``httpGet`` (any status from 200 to 399 passes), ``tcpSocket`` (the connection opens), ``grpc``
(the standard ``grpc.health.v1.Health/Check`` answers SERVING) and ``exec`` (the command exits 0
inside the container, run as ``kubectl exec`` runs it: its user, capabilities and seccomp filter).
Thresholds and timings are the kubelet's (``initialDelaySeconds``, ``periodSeconds`` 10, ``timeoutSeconds`` 1,
``successThreshold`` 1, ``failureThreshold`` 3). Until a startup probe passes, the others do not
run; a readiness probe decides the container's ``ready`` (false until it passes); a liveness or
startup probe that fails ``failureThreshold`` times in a row kills the container, which the kubelet
then restarts per ``restartPolicy``. Failures are ``Unhealthy`` Warning events in the kubelet's
words ("Liveness probe failed: ..."), a kill a ``Killing`` event ("Container X failed liveness
probe, will be restarted"). A change of readiness wakes the pod's key, and the kubelet writes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import selectors
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from trimaran._aio import within
from trimaran.controllers.base import Key, key_of
from trimaran.runtime import LocalRuntime, PodNotFound
from trimaran.runtime import shim as _shim
from trimaran.runtime.nodeapi import ContainerNotFound, ExecProcess
from trimaran.store import Store

__all__ = ["ContainerProbes", "Prober", "apply_probe_state", "has_probes", "resolve_port"]

log = logging.getLogger(__name__)

_PORTS_ANNOTATION = "trimaran.io/ports"  # a Deployment's per-pod ports (controllers/workloads)
_SERVING_PORTS_ANNOTATION = "serving.trimaran.io/ports"  # an InferenceService replica's "http[,grpc]"
_OUTPUT_LIMIT = 1024
_STARTING_RETRY_S = 0.05


def has_probes(container: dict) -> bool:
    return any(container.get(k) for k in ("readinessProbe", "livenessProbe", "startupProbe"))


def resolve_port(pod: dict, port: int | str) -> int | None:
    """A probe's or Service's port on a pod: a container port's name, or a number. A port the
    controller moved stands in for the number the template declared: a Deployment pod's own port
    (annotation ``trimaran.io/ports``), an InferenceService replica's HTTP port (its container
    declares KServe's port, the replica listens on ``$PORT``)."""
    if isinstance(port, str) and not port.isdigit():
        named = [int(p["containerPort"]) for c in (pod.get("spec") or {}).get("containers") or []
                 for p in c.get("ports") or [] if p.get("name") == port]
        if not named:
            return None
        port = named[0]
    number = int(port)
    annotations = pod["metadata"].get("annotations") or {}
    own = json.loads(annotations.get(_PORTS_ANNOTATION) or "{}").get(str(number))
    if own:
        return int(own)
    serving = [int(p) for p in (annotations.get(_SERVING_PORTS_ANNOTATION) or "").split(",") if p.isdigit()]
    if serving and number not in serving:
        return serving[0]
    return number


@dataclass
class ContainerProbes:
    """What the probes of one container say so far."""

    started: bool
    ready: bool
    runs: list[asyncio.Task] = field(default_factory=list)


class _ProbeFailed(Exception):
    pass


class Prober:
    """Runs the probes of running pods; ``watch``/``forget``/``state`` are called from any thread."""

    def __init__(self, store: Store, runtime: LocalRuntime, wake: Callable[[Key], None]) -> None:
        self.store = store
        self.runtime = runtime
        self.wake = wake
        self._pods: dict[str, dict[str, ContainerProbes]] = {}  # uid -> container -> state
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="prober", daemon=True).start()

    def initial(self, container: dict) -> tuple[bool, bool]:
        """(started, ready) of a container that has just started."""
        return not container.get("startupProbe"), not container.get("readinessProbe") and \
            not container.get("startupProbe")

    def watch(self, pod: dict) -> None:
        """Start probing the pod's containers (again, after a restart)."""
        self.forget(pod["metadata"]["uid"])
        containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if has_probes(c)]
        if not containers:
            return
        self._loop.call_soon_threadsafe(self._start, pod, containers)

    def forget(self, uid: str) -> None:
        with self._lock:
            states = self._pods.pop(uid, None)
        if states:
            for state in states.values():
                for task in state.runs:
                    self._loop.call_soon_threadsafe(task.cancel)

    def state(self, uid: str) -> dict[str, tuple[bool, bool]]:
        """Container name → (started, ready), for containers with probes."""
        with self._lock:
            return {name: (s.started, s.ready) for name, s in (self._pods.get(uid) or {}).items()}

    # -- on the loop --------------------------------------------------------------------------------
    def _start(self, pod: dict, containers: list[dict]) -> None:
        uid = pod["metadata"]["uid"]
        states = {}
        for container in containers:
            started, ready = self.initial(container)
            state = ContainerProbes(started=started, ready=ready)
            state.runs.append(self._loop.create_task(self._run(pod, container, state)))
            states[container["name"]] = state
        with self._lock:
            self._pods[uid] = states

    async def _run(self, pod: dict, container: dict, state: ContainerProbes) -> None:
        try:
            if container.get("startupProbe"):
                if not await self._until(pod, container, "startupProbe", "Startup", state):
                    return
                state.started = True
                if not container.get("readinessProbe"):
                    state.ready = True
                self.wake(key_of(pod))
            loops = [self._until(pod, container, kind, word, state)
                     for kind, word in (("readinessProbe", "Readiness"), ("livenessProbe", "Liveness"))
                     if container.get(kind)]
            await asyncio.gather(*loops)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a probe bug must not end the loop for every pod
            log.exception("probing %s/%s", pod["metadata"]["name"], container["name"])

    async def _until(self, pod: dict, container: dict, kind: str, word: str, state: ContainerProbes) -> bool:
        """Run one probe: a startup probe until it passes (True) or kills (False); readiness and
        liveness until cancelled or a kill."""
        probe = container[kind]
        period = max(1, int(probe.get("periodSeconds") or 10))
        timeout = max(1, int(probe.get("timeoutSeconds") or 1))
        successes_needed = max(1, int(probe.get("successThreshold") or 1))
        failures_allowed = max(1, int(probe.get("failureThreshold") or 3))
        await asyncio.sleep(max(0, int(probe.get("initialDelaySeconds") or 0)))
        # A pod runs a moment before its containers do: the kubelet probes a running container
        # only, so that moment is no failure (and no Unhealthy event). Asked once per start.
        while await asyncio.to_thread(self.runtime.container_starting, pod["metadata"]["uid"], container["name"]):
            await asyncio.sleep(_STARTING_RETRY_S)
        successes = failures = 0
        while True:
            try:
                await within(self._probe(pod, container, probe), timeout)
                successes, failures = successes + 1, 0
            except (_ProbeFailed, OSError, asyncio.TimeoutError) as exc:
                failures, successes = failures + 1, 0
                why = f"timeout: no answer within {timeout}s" if isinstance(exc, asyncio.TimeoutError) else str(exc)
                await asyncio.to_thread(self.store.record_event, pod, "Warning", "Unhealthy",
                                        f"{word} probe failed: {why}")
            if kind == "startupProbe" and successes >= 1:
                return True
            if kind == "readinessProbe":
                ready = state.ready
                if successes >= successes_needed:
                    ready = True
                elif failures >= failures_allowed:
                    ready = False
                if ready != state.ready:
                    state.ready = ready
                    self.wake(key_of(pod))
            elif failures >= failures_allowed:
                await asyncio.to_thread(self._kill, pod, container["name"], word.lower())
                return False
            await asyncio.sleep(period)

    async def _probe(self, pod: dict, container: dict, probe: dict) -> None:
        if probe.get("httpGet"):
            await _http_get(pod, probe["httpGet"])
        elif probe.get("tcpSocket"):
            spec = probe["tcpSocket"]
            port = _port(pod, spec.get("port"))
            host = spec.get("host") or _pod_host(pod)
            try:
                _, writer = await asyncio.open_connection(host, port)
            except OSError as exc:
                raise _ProbeFailed(f"dial tcp {host}:{port}: connect: {_reason(exc)}") from None
            writer.close()
        elif probe.get("grpc"):
            await _grpc_health(_pod_host(pod), _port(pod, probe["grpc"].get("port")), probe["grpc"])
        elif probe.get("exec"):
            await self._exec(pod, container["name"], list(probe["exec"].get("command") or []))
        else:
            raise _ProbeFailed("probe has no handler (httpGet, tcpSocket, grpc or exec)")

    async def _exec(self, pod: dict, container: str, command: list[str]) -> None:
        """The command as ``kubectl exec`` runs it (``LocalRuntime.exec``): the container's user,
        capabilities and seccomp filter, as the kubelet's exec probe goes through the CRI's exec."""
        try:
            process = await asyncio.to_thread(self.runtime.exec, pod["metadata"]["uid"], container, command,
                                              tty=False, stdin=False, stdout=True, stderr=True)
        except (ContainerNotFound, OSError):
            raise _ProbeFailed(f"container {container} is not running") from None
        try:
            output, code = await asyncio.to_thread(_collect, process)
        except asyncio.CancelledError:
            process.kill()  # the timeout: the reading thread ends at the pipes' EOF and releases them
            raise
        if code != 0:
            text = output[:_OUTPUT_LIMIT].decode(errors="replace").strip()
            raise _ProbeFailed(text or f"command {command!r} exited with {code}")

    def _kill(self, pod: dict, container: str, which: str) -> None:
        """Kill the container, as the kubelet does after a failed liveness or startup probe."""
        self.store.record_event(pod, "Normal", "Killing", f"Container {container} failed {which} probe, "
                                                          "will be restarted")
        try:
            status = self.runtime.pod_status(pod["metadata"]["uid"]).containers.get(container)
        except PodNotFound:
            return
        if status is None or status.pid is None:
            return
        for pid, _ in [*_shim.descendants(status.pid), (status.pid, 0)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def apply_probe_state(status: dict, states: dict[str, tuple[bool, bool]]) -> bool:
    """Put what the probes say into running containers' ``started``/``ready``; whether anything changed."""
    changed = False
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") in states and "running" in (cs.get("state") or {}):
            started, ready = states[cs["name"]]
            if cs.get("started") != started or cs.get("ready") != ready:
                cs.update(started=started, ready=ready)
                changed = True
    return changed


def _reason(exc: OSError) -> str:
    """Go's words for a failed dial ("connection refused")."""
    return os.strerror(exc.errno).lower() if exc.errno else str(exc)


def _collect(process: ExecProcess) -> tuple[bytes, int]:
    """An exec'd command's stdout and stderr, interleaved as written, and its exit code; its pipes
    are released."""
    try:
        output = bytearray()
        open_fds = [fd for fd in (process.stdout, process.stderr) if fd is not None]
        with selectors.DefaultSelector() as selector:
            for fd in open_fds:
                selector.register(fd, selectors.EVENT_READ)
            while open_fds:
                for key, _ in selector.select():
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        if len(output) < _OUTPUT_LIMIT:
                            output += chunk
                        continue
                    selector.unregister(key.fd)
                    open_fds.remove(key.fd)
        return bytes(output), process.proc.wait()
    finally:
        process.release()


def _port(pod: dict, port: int | str | None) -> int:
    if port is None:  # KServe's containers may leave it out: the replica's HTTP port
        serving = (pod["metadata"].get("annotations") or {}).get(_SERVING_PORTS_ANNOTATION) or ""
        port = serving.split(",")[0] if serving else None
    resolved = resolve_port(pod, port) if port else None
    if resolved is None:
        raise _ProbeFailed(f"port {port!r} is not a port of the pod")
    return resolved


def _pod_host(pod: dict) -> str:
    """Where the kubelet probes a pod: its ``status.podIP`` (on the pod network, its own address);
    loopback for a pod on the host's network, whose servers may listen there alone."""
    if (pod.get("spec") or {}).get("hostNetwork"):
        return "127.0.0.1"
    return (pod.get("status") or {}).get("podIP") or "127.0.0.1"


async def _http_get(pod: dict, spec: dict) -> None:
    host = spec.get("host") or _pod_host(pod)
    port = _port(pod, spec.get("port"))
    path = spec.get("path") or "/"
    scheme = (spec.get("scheme") or "HTTP").lower()
    url = f"{scheme}://{host}:{port}{path}"
    headers = {"Host": f"{host}:{port}", "User-Agent": "kube-probe/1.31", "Accept": "*/*", "Connection": "close"}
    headers.update({h["name"]: h["value"] for h in spec.get("httpHeaders") or []})
    try:
        if scheme == "https":
            import ssl

            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # the kubelet does not verify probe certificates either
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
        else:
            reader, writer = await asyncio.open_connection(host, port)
    except OSError as exc:
        raise _ProbeFailed(f'Get "{url}": dial tcp {host}:{port}: connect: {_reason(exc)}') from None
    try:
        request = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(request.encode())
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
    parts = line.split()
    if len(parts) < 2 or not parts[1].isdigit():
        raise _ProbeFailed(f'Get "{url}": malformed HTTP response {line[:80]!r}')
    code = int(parts[1])
    if not 200 <= code < 400:
        raise _ProbeFailed(f"HTTP probe failed with statuscode: {code}")


async def _grpc_health(host: str, port: int, spec: dict) -> None:
    import grpc

    service = (spec.get("service") or "").encode()
    request = b"\x0a" + bytes([len(service)]) + service if service else b""
    async with grpc.aio.insecure_channel(f"{host}:{port}") as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            answer = await check(request)
        except grpc.aio.AioRpcError as exc:
            raise _ProbeFailed(f"rpc error: code = {exc.code().name} desc = {exc.details()}") from None
    # HealthCheckResponse{status = 1: SERVING}: field 1, varint.
    if answer != b"\x08\x01":
        raise _ProbeFailed(f'service unhealthy (responded with "{_health_status(answer)}")')


def _health_status(answer: bytes) -> str:
    names = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
    return names.get(answer[1], "UNKNOWN") if len(answer) == 2 and answer[0] == 0x08 else "UNKNOWN"
