"""The node's image store: pull with skopeo, unpack with umoci, keep both content-addressed.

Layout under the store's directory::

    blobs/sha256/<hex>         every manifest, config and layer blob, shared by all images
    images/<config hex>/       one unpacked image: rootfs/ and image.json (config, size, digest)
    refs/<sha256 of ref>.json  what a reference last resolved to
    tmp/<pull>/                one pull's OCI layout and bundle while it runs (held by a lock)

A pull resolves the reference (``skopeo inspect --raw``), picks the host platform's manifest from
an index, copies that manifest by digest into a throw-away OCI layout whose blobs live in the shared
blob directory (``skopeo copy --dest-shared-blob-dir``: skopeo verifies every digest and writes each
blob to a temporary file it renames), unpacks it (``umoci unpack``: whiteouts and opaque
directories) inside a sandbox under the pods' id mapping (see ``ImageStore._unpack``) in the
pull's temporary directory, and renames the result into ``images/``. A reader
therefore sees an image whole or not at all, and a failed or killed pull leaves only verified blobs.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trimaran.runtime import shim
from trimaran.runtime.idmap import container_idmap, pods_range
from trimaran.runtime.images.credentials import RegistryCredential
from trimaran.runtime.images.mirrors import MirrorConfigError, PullPlan, RegistryConfig, RegistryEndpoint
from trimaran.runtime.images.reference import ImageReference
from trimaran.runtime.sandbox import build_tool_argv, userns_available

INDEX_MEDIA_TYPES = ("application/vnd.oci.image.index.v1+json",
                     "application/vnd.docker.distribution.manifest.list.v2+json")
_GO_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
            "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}
_LAYOUT_TAG = "image"

Progress = Callable[[str], None]


class ImagePullError(RuntimeError):
    """A pull that failed; the message is what the kubelet reports with ``ErrImagePull``."""


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an image's config a container runs with (the OCI config's ``config``)."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    working_dir: str = ""
    user: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_oci(cls, config: dict[str, Any]) -> ImageConfig:
        section = config.get("config") or {}
        return cls(entrypoint=list(section.get("Entrypoint") or []), cmd=list(section.get("Cmd") or []),
                   env=list(section.get("Env") or []), working_dir=section.get("WorkingDir") or "",
                   user=section.get("User") or "", labels=dict(section.get("Labels") or {}))

    def to_json(self) -> dict[str, Any]:
        return {"Entrypoint": self.entrypoint, "Cmd": self.cmd, "Env": self.env,
                "WorkingDir": self.working_dir, "User": self.user, "Labels": self.labels}


@dataclass(frozen=True)
class Image:
    """An image present on the node. ``rootfs`` is shared, read-only, by every container of it."""

    reference: str
    digest: str
    id: str
    size: int
    rootfs: Path
    config: ImageConfig


def host_platform() -> tuple[str, str]:
    """``("linux", <Go architecture>)`` of this machine: the manifest a pull picks from an index."""
    machine = platform.machine().lower()
    return "linux", _GO_ARCH.get(machine, machine)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _describe_failure(stderr: str, ref: ImageReference, had_credentials: bool) -> str:
    """skopeo's error, said the way the kubelet says it."""
    text = " ".join(line.strip() for line in stderr.strip().splitlines() if line.strip())
    detail = text.split("msg=", 1)[-1].strip('" ') if "msg=" in text else text
    lowered = detail.lower()
    prefix = f'failed to pull image "{ref}"'
    if any(s in lowered for s in ("unauthorized", "authentication required", "denied", "invalid username/password")):
        hint = "the credentials of the pod's imagePullSecrets were refused" if had_credentials else \
            "the registry needs credentials: add an imagePullSecrets Secret of type kubernetes.io/dockerconfigjson"
        return f"{prefix}: unauthorized: authentication required ({hint})"
    if "manifest unknown" in lowered or "name unknown" in lowered or "not found" in lowered:
        return f"{prefix}: {ref} not found in registry {ref.registry}"
    if "digest did not match" in lowered or "digest mismatch" in lowered:
        return f"{prefix}: a blob's content does not match its digest (corrupt layer in the registry): {detail}"
    if any(s in lowered for s in ("connection refused", "no such host", "i/o timeout", "dial tcp",
                                  "network is unreachable", "connection reset", "pinging container registry",
                                  "server gave http response to https client")):
        return f"{prefix}: registry {ref.registry} is unreachable: {detail}"
    return f"{prefix}: {detail or 'skopeo failed without a message'}"


def _all_failed(ref: ImageReference, failures: list[tuple[RegistryEndpoint, str]]) -> str:
    """One host's failure as it is; several, each named after its host, in the order tried."""
    if len(failures) == 1 and not failures[0][0].mirror:
        return failures[0][1]
    prefix = f'failed to pull image "{ref}"'
    parts = []
    for endpoint, message in failures:
        detail = message.split('": ', 1)[1] if message.startswith('failed to pull image "') else message
        parts.append(f"{endpoint.label}: {detail}")
    return f"{prefix}: every host tried failed: " + "; ".join(parts) if parts else \
        f"{prefix}: no registry host may serve it (check the mirrors' capabilities)"


class ImageStore:
    """A content-addressed cache of images unpacked for containers.

    >>> store = ImageStore(Path("/var/lib/trimaran/images"))            # doctest: +SKIP
    >>> image = store.pull(parse_reference("127.0.0.1:5000/team/app"))  # doctest: +SKIP
    >>> image.rootfs, image.config.cmd                                   # doctest: +SKIP

    ``insecure_registries`` may be plain HTTP or have certificates skopeo cannot verify, besides the
    loopback registries (127.0.0.0/8, ``::1``, ``localhost``) that always may. ``timeout`` bounds each
    skopeo or umoci run in seconds. ``platform`` is the ``(os, architecture)`` picked from an index.
    ``registries`` says which hosts serve a registry's images (mirrors first; see :mod:`.mirrors`),
    read at each pull; without it each image comes from its own registry.
    """

    def __init__(self, root: Path, insecure_registries: Iterable[str] = (), *, timeout: float = 1800.0,
                 platform: tuple[str, str] | None = None, registries: RegistryConfig | None = None) -> None:
        self.root = Path(root)
        self.registries = registries or RegistryConfig()
        self.insecure_registries = frozenset(insecure_registries)
        self.timeout = timeout
        self.platform = platform or host_platform()
        self._skopeo, self._umoci, self._zstd = "skopeo", "umoci", "zstd"
        self._lock = threading.Lock()
        self._pulls: dict[str, Future[Image]] = {}
        self._callers: dict[str, int] = {}

    # -- paths --------------------------------------------------------------------------------------

    @property
    def blobs(self) -> Path:
        return self.root / "blobs"

    def _blob(self, digest: str) -> Path:
        algorithm, hex_part = digest.split(":", 1)
        return self.blobs / algorithm / hex_part

    def _ref_file(self, ref: ImageReference) -> Path:
        return self.root / "refs" / (hashlib.sha256(str(ref).encode()).hexdigest() + ".json")

    def _image_dir(self, image_id: str) -> Path:
        return self.root / "images" / image_id.split(":", 1)[1]

    # -- reading ------------------------------------------------------------------------------------

    def lookup(self, ref: ImageReference) -> Image | None:
        """The image ``ref`` last pulled as, if it is here whole; no network."""
        try:
            record = json.loads(self._ref_file(ref).read_text())
        except (OSError, ValueError):
            # A digest names its content wherever it was pulled from under another reference.
            known = self._known_image(ref.digest) if ref.digest is not None else None
            return self._load(str(ref), ref.digest, known) if known else None
        return self._load(str(ref), record.get("digest", ""), record.get("id", ""))

    def _load(self, reference: str, digest: str, image_id: str) -> Image | None:
        if not image_id.startswith("sha256:"):
            return None
        directory = self._image_dir(image_id)
        try:
            meta = json.loads((directory / "image.json").read_text())
        except (OSError, ValueError):
            return None
        return Image(reference=reference, digest=digest, id=image_id, size=int(meta["size"]),
                     rootfs=directory / "rootfs", config=ImageConfig.from_oci({"config": meta["config"]}))

    def images(self) -> list[Path]:
        """The unpacked images' directories (for disk accounting)."""
        directory = self.root / "images"
        return sorted(p for p in directory.iterdir() if p.is_dir()) if directory.is_dir() else []

    # -- pulling ------------------------------------------------------------------------------------

    def pull(self, ref: ImageReference, credentials: Sequence[RegistryCredential] = (),
             progress: Progress | None = None) -> Image:
        """Fetch ``ref`` (re-resolving a tag, as ``imagePullPolicy: Always`` asks) and unpack it if it
        is new; blocks. Concurrent pulls of one reference in this store share one fetch.

        ``credentials`` are tried in order among those that match the registry (then none); raises
        :class:`ImagePullError` with a kubelet-like message.
        """
        key = str(ref)
        with self._lock:
            future = self._pulls.get(key)
            owner = future is None
            if owner:
                future = self._pulls[key] = Future()
            self._callers[key] = self._callers.get(key, 0) + 1
        if not owner:
            try:
                return future.result()
            finally:
                self._leave(key)
        try:
            image = self._pull(ref, credentials, progress or (lambda _message: None))
        except BaseException as error:
            future.set_exception(error)
            raise
        else:
            future.set_result(image)
            return image
        finally:
            with self._lock:
                del self._pulls[key]
            self._leave(key)

    def _leave(self, key: str) -> None:
        with self._lock:
            self._callers[key] -= 1
            if not self._callers[key]:
                del self._callers[key]

    def pulls_in_flight(self) -> dict[str, int]:
        """For each reference being pulled, how many callers wait on that one pull."""
        with self._lock:
            return dict(self._callers)

    def _pull(self, ref: ImageReference, credentials: Sequence[RegistryCredential], progress: Progress) -> Image:
        if ref.digest is not None and (image := self.lookup(ref)) is not None:
            return image  # content named by digest cannot change
        try:
            plans = self.registries.plans(ref)
        except MirrorConfigError as error:
            raise ImagePullError(f'failed to pull image "{ref}": registry mirror configuration: {error}') from None
        with self._workspace() as work:
            raw, found, credential, plan = self._resolve(ref, plans, credentials, work)
            digest = "sha256:" + hashlib.sha256(raw).hexdigest()
            if ref.digest is not None and ref.digest != digest:
                raise ImagePullError(f'failed to pull image "{ref}": the registry sent a manifest whose digest is '
                                     f"{digest}, not the {ref.digest} asked for")
            manifest = self._platform_manifest(ref, raw, digest)
            known = self._known_image(digest)
            if known is not None:
                image = self._load(str(ref), digest, known)
                if image is not None:
                    self._record(ref, digest, known)
                    return image
            # The content, by digest, from the hosts that may serve content (``pull``), in order, as
            # containerd fetches: a pull-only mirror (a content cache) serves what the upstream
            # resolved, and a pinned digest is verified wherever it comes from.
            sources = [e for e in plan.endpoints if e.pull and e.serves != "tag-only"] or [found]
            image = self._fetch(ref, digest, manifest, sources, found, credential, credentials, work, progress)
            self._record(ref, digest, image.id)
            return image

    @contextlib.contextmanager
    def _workspace(self):
        """A temporary directory under ``tmp/``, locked while the pull runs; stale ones (their pull
        died) are removed by the next pull."""
        try:
            for sub in ("blobs/sha256", "images", "refs", "tmp", "digests"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            # Creating and locking a workspace, and sweeping dead ones, happen under one lock, so the
            # sweep never takes a workspace between its creation and its owner's lock.
            with open(self.root / "tmp" / ".lock", "a") as sweep:
                fcntl.flock(sweep, fcntl.LOCK_EX)
                work = Path(tempfile.mkdtemp(prefix="pull-", dir=self.root / "tmp"))
                lock = os.open(work / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
                fcntl.flock(lock, fcntl.LOCK_EX)
                self._remove_stale_workspaces(keep=work)
        except OSError as error:
            raise ImagePullError(f"image cache {self.root} is not writable: {error.strerror or error}") from error
        try:
            yield work
        finally:
            _remove_tree(work)
            os.close(lock)

    def _remove_stale_workspaces(self, keep: Path) -> None:
        for other in (self.root / "tmp").iterdir():
            if other == keep:
                continue
            if not other.is_dir():
                continue
            try:
                fd = os.open(other / ".lock", os.O_RDWR)
            except OSError:
                _remove_tree(other)  # its owner died before locking it
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            _remove_tree(other)
            os.close(fd)

    def _tls_flags(self, endpoint: RegistryEndpoint, prefix: str, work: Path) -> list[str]:
        """skopeo's TLS options for ``endpoint`` (``prefix``: ``""`` for inspect, ``"src-"`` for copy):
        no verification for insecure or plain-HTTP hosts, nor for loopback ones unless given a CA or
        client certificate (which asks for it), else its CA and client files."""
        lenient = ImageReference(endpoint.host, "x", None, None).is_loopback and not (endpoint.ca or endpoint.client)
        if not endpoint.tls_verify or lenient or endpoint.host in self.insecure_registries:
            return [f"--{prefix}tls-verify=false"]
        if not endpoint.ca and not endpoint.client:
            return []
        # skopeo reads a directory: *.crt are CAs, NAME.cert with NAME.key a client pair.
        certs = Path(tempfile.mkdtemp(prefix="certs-", dir=work))
        try:
            for index, ca in enumerate(endpoint.ca):
                shutil.copyfile(ca, certs / f"ca-{index}.crt")
            for index, (cert, key) in enumerate(endpoint.client):
                shutil.copyfile(cert, certs / f"client-{index}.cert")
                if key is not None:
                    shutil.copyfile(key, certs / f"client-{index}.key")
        except OSError as error:
            raise ImagePullError(f"registry {endpoint.host}: a certificate in {endpoint.source} cannot be read: "
                                 f"{error.filename}: {error.strerror}") from None
        return [f"--{prefix}cert-dir", str(certs)]

    def _authfile(self, work: Path, credential: RegistryCredential | None) -> Path:
        """A docker config.json with only ``credential``: the node's own logins stay out of pods' pulls."""
        path = work / "auth.json"
        auths = {}
        if credential is not None:
            # containers/image reads only ``auth`` (base64 of user:password) from an authfile.
            token = base64.b64encode(f"{credential.username}:{credential.password}".encode()).decode()
            auths[credential.registry] = {"auth": token}
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as stream:
            json.dump({"auths": auths}, stream)
        return path

    def _run(self, argv: list[str], work: Path, what: str) -> subprocess.CompletedProcess[bytes]:
        # The system's registries.conf would send skopeo to mirrors of its own; the hosts come from
        # this node's configuration (``mirrors``) alone, so an empty one is skopeo's.
        empty = work / "registries.conf"
        empty.touch()
        env = {**os.environ, "TMPDIR": str(work), "CONTAINERS_REGISTRIES_CONF": str(empty)}
        try:
            return subprocess.run(argv, capture_output=True, timeout=self.timeout, env=env, check=False)
        except FileNotFoundError as error:
            raise ImagePullError(f"cannot {what}: {argv[0]} is not installed (scripts/bootstrap.sh installs it)") \
                from error
        except subprocess.TimeoutExpired as error:
            raise ImagePullError(f"cannot {what}: {Path(argv[0]).name} ran past {self.timeout:g} s") from error

    def _resolve(self, ref: ImageReference, plans: list[PullPlan], credentials: Sequence[RegistryCredential],
                 work: Path) -> tuple[bytes, RegistryEndpoint, RegistryCredential | None, PullPlan]:
        """The raw manifest (or index) ``ref`` names, from the first host that answers (mirrors in
        order, then the upstream, for each candidate name), the host, the credential it took, and
        its plan. A failure names every host tried, as containerd's does."""
        failures: list[tuple[RegistryEndpoint, str]] = []
        for plan in plans:
            for endpoint in plan.endpoints:
                if not endpoint.may_serve(plan.ref):
                    continue
                target = endpoint.reference(plan.ref)
                attempts: list[RegistryCredential | None] = [c for c in credentials if c.matches(target)] or [None]
                failure = ""
                for credential in attempts:
                    argv = [self._skopeo, "inspect", "--raw", "--authfile", str(self._authfile(work, credential)),
                            *self._tls_flags(endpoint, "", work), f"docker://{target}"]
                    result = self._run(argv, work, f'resolve "{ref}"')
                    if result.returncode == 0:
                        return result.stdout, endpoint, credential, plan
                    failure = _describe_failure(result.stderr.decode(errors="replace"), target,
                                                credential is not None)
                    if "unauthorized" not in failure:
                        break
                failures.append((endpoint, failure))
        raise ImagePullError(_all_failed(ref, failures))

    def _platform_manifest(self, ref: ImageReference, raw: bytes, digest: str) -> dict[str, Any]:
        """The descriptor to copy: ``digest`` itself, or the index entry for this node's platform."""
        try:
            document = json.loads(raw)
        except ValueError as error:
            raise ImagePullError(f'failed to pull image "{ref}": the registry sent a manifest that is not JSON') \
                from error
        media_type = document.get("mediaType", "")
        if media_type in INDEX_MEDIA_TYPES or (not media_type and "manifests" in document):
            os_name, arch = self.platform
            for entry in document.get("manifests") or []:
                plat = entry.get("platform") or {}
                if plat.get("os") == os_name and plat.get("architecture") == arch:
                    return entry
            offered = ", ".join(f"{(e.get('platform') or {}).get('os')}/{(e.get('platform') or {}).get('architecture')}"
                                for e in document.get("manifests") or []) or "none"
            raise ImagePullError(f'failed to pull image "{ref}": no matching manifest for {os_name}/{arch} in the '
                                 f"manifest list entries (the image has {offered})")
        if document.get("schemaVersion") == 1:
            raise ImagePullError(f'failed to pull image "{ref}": Docker schema 1 manifests are not supported')
        return {"digest": digest, "mediaType": media_type, "layers": document.get("layers") or []}

    def _known_image(self, digest: str) -> str | None:
        """The image id a registry digest was unpacked as before, if any."""
        try:
            return (self.root / "digests" / digest.split(":", 1)[1]).read_text().strip() or None
        except OSError:
            return None

    def _fetch(self, ref: ImageReference, digest: str, descriptor: dict[str, Any], sources: list[RegistryEndpoint],
               resolved_by: RegistryEndpoint, credential: RegistryCredential | None,
               credentials: Sequence[RegistryCredential], work: Path, progress: Progress) -> Image:
        layout = work / "layout"
        layout.mkdir()
        # umoci reads blobs from the layout's own blobs/; pointing it at the shared directory lets
        # skopeo's shared-blob copy and umoci meet without copying a byte.
        (layout / "blobs").symlink_to(self.blobs.resolve())
        failures: list[tuple[RegistryEndpoint, str]] = []
        for endpoint in sources:
            pinned = endpoint.reference(ref.with_digest(descriptor["digest"]))
            # The host that resolved the tag took ``credential``; another takes its own first match.
            use = credential if endpoint == resolved_by else next((c for c in credentials if c.matches(pinned)), None)
            progress(f"Copying {pinned}")
            argv = [self._skopeo, "--insecure-policy", "copy", "--quiet",
                    "--authfile", str(self._authfile(work, use)),
                    *self._tls_flags(endpoint, "src-", work), "--dest-shared-blob-dir", str(self.blobs),
                    f"docker://{pinned}", f"oci:{layout}:{_LAYOUT_TAG}"]
            result = self._run(argv, work, f'pull "{ref}"')
            if result.returncode == 0:
                break
            failures.append((endpoint, _describe_failure(result.stderr.decode(errors="replace"), pinned,
                                                         use is not None)))
        else:
            raise ImagePullError(_all_failed(ref, failures))
        manifest = self._layout_manifest(layout)
        size = sum(int(layer.get("size", 0)) for layer in manifest.get("layers") or [])
        if any(layer.get("mediaType", "").endswith("+zstd") for layer in manifest.get("layers") or []):
            layout = self._decompressed(ref, layout, work, manifest["config"]["digest"])
        config = json.loads(self._blob(manifest["config"]["digest"]).read_bytes())
        image_id = manifest["config"]["digest"]
        os_name, arch = self.platform
        if (config.get("os"), config.get("architecture")) != (os_name, arch):
            raise ImagePullError(f'failed to pull image "{ref}": the image is for {config.get("os")}/'
                                 f"{config.get('architecture')}, this node runs {os_name}/{arch}")
        target = self._image_dir(image_id)
        if not target.is_dir():
            progress(f"Unpacking {len(manifest.get('layers') or [])} layers ({size} bytes)")
            self._unpack(ref, layout, work, image_id, size, config)
        (self.root / "digests" / digest.split(":", 1)[1]).write_text(image_id)
        image = self._load(str(ref), digest, image_id)
        if image is None:
            raise ImagePullError(f'failed to pull image "{ref}": the unpacked image vanished from {target}')
        return image

    def _decompressed(self, ref: ImageReference, layout: Path, work: Path, config_digest: str) -> Path:
        """``layout`` with its zstd layers uncompressed (the ``zstd`` tool), for umoci 0.4, which
        unpacks gzip and plain layers only (and skopeo 1.9's ``--dest-decompress`` keeps zstd).
        Each result must hash to the config's diff id; the copies live in the pull's workspace."""
        manifest = self._layout_manifest(layout)
        diff_ids = json.loads(self._blob(config_digest).read_bytes())["rootfs"]["diff_ids"]
        plain = work / "layout-uncompressed"
        (plain / "blobs" / "sha256").mkdir(parents=True)
        layers = []
        if len(diff_ids) != len(manifest["layers"]):
            raise ImagePullError(f'failed to unpack image "{ref}": its config lists {len(diff_ids)} layers, '
                                 f'its manifest {len(manifest["layers"])}')
        for layer, diff_id in zip(manifest["layers"], diff_ids, strict=True):
            if not layer.get("mediaType", "").endswith("+zstd"):
                layers.append(layer)
                (plain / "blobs" / "sha256" / layer["digest"].split(":", 1)[1]).symlink_to(self._blob(layer["digest"]))
                continue
            target = plain / "blobs" / "sha256" / diff_id.split(":", 1)[1]
            argv = [self._zstd, "-d", "-q", "-f", str(self._blob(layer["digest"])), "-o", str(target)]
            result = self._run(argv, work, f'decompress a zstd layer of "{ref}"')
            if result.returncode != 0 or _sha256_file(target) != diff_id:
                detail = result.stderr.decode(errors="replace").strip() or "its content does not match the diff id"
                raise ImagePullError(f'failed to unpack image "{ref}": zstd layer {layer["digest"]}: {detail}')
            layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": diff_id,
                           "size": target.stat().st_size})
        (plain / "blobs" / "sha256" / config_digest.split(":", 1)[1]).symlink_to(self._blob(config_digest))
        manifest_bytes = json.dumps({**manifest, "layers": layers}).encode()
        manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
        (plain / "blobs" / "sha256" / manifest_digest.split(":", 1)[1]).write_bytes(manifest_bytes)
        (plain / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        (plain / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
            {"mediaType": manifest.get("mediaType", "application/vnd.oci.image.manifest.v1+json"),
             "digest": manifest_digest, "size": len(manifest_bytes),
             "annotations": {"org.opencontainers.image.ref.name": _LAYOUT_TAG}}]}))
        return plain

    def _layout_manifest(self, layout: Path) -> dict[str, Any]:
        index = json.loads((layout / "index.json").read_text())
        descriptor = index["manifests"][0]
        return json.loads(self._blob(descriptor["digest"]).read_bytes())

    def _unpack(self, ref: ImageReference, layout: Path, work: Path, image_id: str, size: int,
                config: dict[str, Any]) -> None:
        """umoci unpacks inside a sandbox, as root of a user namespace mapped as pods' are (see
        :mod:`trimaran.runtime.idmap`): the image's owners land on disk as the pods' ids (BASE+N,
        or the user's own and subordinate ids), so a container sees them as the image says, and
        the layers' contents (links, device nodes, setuid files) meet only the workspace and ids
        that own nothing of the host; device nodes cannot be made there at all. Where a pod gets
        one id, so does umoci (``--rootless``: every file is the user's)."""
        if not userns_available():
            raise ImagePullError(f'failed to unpack image "{ref}": unpacking runs in a user namespace, which '
                                 "bubblewrap cannot create here")
        pods = pods_range()
        idmap = container_idmap(0, 0, (), pods) if pods is not None else None
        unpack_dir = work / "unpack"
        unpack_dir.mkdir()
        if idmap is not None and idmap.run_as is not None:
            os.chown(unpack_dir, idmap.run_as[0], idmap.run_as[1])
        bundle = unpack_dir / "bundle"
        rootless = ["--rootless"] if idmap is None else []
        umoci = shutil.which(self._umoci) or self._umoci
        blobs = dict.fromkeys((self.blobs.resolve(), self.blobs.absolute()))
        argv = build_tool_argv([umoci, "unpack", *rootless, "--image", f"{layout}:{_LAYOUT_TAG}", str(bundle)],
                               writable=[unpack_dir], read_only=[*blobs, layout], mapped=idmap is not None)
        if idmap is not None:
            spec = work / "unpack.json"
            spec.write_text(json.dumps({"argv": argv, "idmap": idmap.to_json()}))
            argv = shim.command("--run", str(spec))
        result = self._run(argv, work, f'unpack "{ref}"')
        if result.returncode != 0:
            detail = result.stderr.decode(errors="replace").strip().splitlines()
            raise ImagePullError(f'failed to unpack image "{ref}": {detail[-1] if detail else "umoci failed"}')
        staged = work / "image"
        staged.mkdir()
        (bundle / "rootfs").rename(staged / "rootfs")
        meta = {"id": image_id, "size": size, "config": ImageConfig.from_oci(config).to_json(),
                "os": config.get("os"), "architecture": config.get("architecture")}
        (staged / "image.json").write_text(json.dumps(meta))
        try:
            staged.rename(self._image_dir(image_id))
        except OSError:
            if not self._image_dir(image_id).is_dir():
                raise
            # Another process unpacked the same image meanwhile; its copy serves both.

    def _record(self, ref: ImageReference, digest: str, image_id: str) -> None:
        path = self._ref_file(ref)
        temporary = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        temporary.write_text(json.dumps({"reference": str(ref), "digest": digest, "id": image_id}))
        temporary.replace(path)

    def verify_blobs(self) -> list[Path]:
        """Blobs whose content does not match their name (should be none)."""
        directory = self.blobs / "sha256"
        bad = []
        for blob in directory.iterdir() if directory.is_dir() else ():
            if blob.is_file() and _sha256_file(blob) != f"sha256:{blob.name}":
                bad.append(blob)
        return bad


def _remove_tree(path: Path) -> None:
    def make_writable(function, name, _exc_info) -> None:  # noqa: ANN001 -- shutil's callback
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            os.chmod(name, 0o700)
            function(name)

    shutil.rmtree(path, onerror=make_writable)
