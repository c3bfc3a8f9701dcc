"""Test images and registries, offline: images built here (busybox, a Debian minbase with python3,
and small images layered on them), pushed with skopeo into the distribution's registry
(``docker-registry``) on a free loopback port, plain or behind token auth.

The base images are built once and cached under ``$TRIMARAN_TEST_IMAGE_CACHE`` (default
``<repo>/.cache/test-images``), in a directory named by :data:`BUILDER_VERSION`: change what a base
image holds and bump it. Fixtures, session-scoped, for any test module or conftest to import::

    from tests.imagekit import auth_registry, registry, test_images  # noqa: F401 (fixtures)

``test_images`` is a :class:`BuiltImages`; ``registry`` and ``auth_registry`` are :class:`Registry`
objects with :meth:`Registry.push`. :func:`start_registry` gives a test a registry of its own (e.g.
to tamper with its storage).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import fcntl
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# Bump when a base image's recipe changes: the cache of the old one is then ignored.
BUILDER_VERSION = "v1"
DEBIAN_MIRROR = os.environ.get("TRIMARAN_DEBIAN_MIRROR", "http://deb.debian.org/debian")
DEBOOTSTRAP_TIMEOUT = 1800

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cache_dir() -> Path:
    """Where built base images live between runs."""
    root = os.environ.get("TRIMARAN_TEST_IMAGE_CACHE")
    return Path(root) if root else REPO_ROOT / ".cache" / "test-images"


# -- OCI images, written here ----------------------------------------------------------------------


@dataclass
class Layer:
    """One layer: files (path -> content; a path ending in ``/`` is a directory), symlinks, a whole
    directory tree (``tree``, as it is on disk), and the whiteouts that delete paths of lower layers
    (``whiteouts``) or hide a directory's lower content (``opaque``)."""

    files: Mapping[str, bytes | str] = field(default_factory=dict)
    executables: Sequence[str] = ()
    symlinks: Mapping[str, str] = field(default_factory=dict)
    whiteouts: Sequence[str] = ()
    opaque: Sequence[str] = ()
    tree: Path | None = None
    tree_excludes: Sequence[str] = ()
    #: Members written as given, after everything else: what no well-formed image holds (``../``
    #: names, links out of the root, device nodes), for the tests that make sure none escapes.
    raw: Sequence[tuple[tarfile.TarInfo, bytes]] = ()


@dataclass
class ImageSpec:
    """The config a built image runs with (Docker's Entrypoint/Cmd/Env/WorkingDir/User)."""

    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    env: list[str] = field(default_factory=lambda: [f"PATH={DEFAULT_PATH}"])
    working_dir: str = ""
    user: str = ""
    labels: dict[str, str] = field(default_factory=dict)


def _tar_info(name: str, kind: bytes, mode: int, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, linkname
    info.mtime = 1_700_000_000  # fixed, so a layer's digest depends only on its content
    return info


def _parents(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/".join(parts[:i + 1]) for i in range(len(parts))]


def _write_tar(layer: Layer, stream: io.RawIOBase) -> None:
    with tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        seen: set[str] = set()

        def directory(path: str) -> None:
            for parent in [*_parents(path + "/x")]:
                if parent not in seen:
                    seen.add(parent)
                    tar.addfile(_tar_info(parent, tarfile.DIRTYPE, 0o755))

        if layer.tree is not None:
            excluded = {e.strip("/") for e in layer.tree_excludes}

            def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
                name = info.name.lstrip("./")
                if any(name.startswith(e + "/") for e in excluded):
                    return None
                return info

            for entry in sorted(os.listdir(layer.tree)):
                tar.add(layer.tree / entry, arcname=entry, filter=keep)
        for path in sorted(layer.opaque):
            directory(path.strip("/"))
            tar.addfile(_tar_info(f"{path.strip('/')}/.wh..wh..opq", tarfile.REGTYPE, 0o644))
        for path in sorted(layer.whiteouts):
            parent, _, name = path.strip("/").rpartition("/")
            if parent:
                directory(parent)
            tar.addfile(_tar_info(f"{parent + '/' if parent else ''}.wh.{name}", tarfile.REGTYPE, 0o644))
        for path, content in sorted(layer.files.items()):
            clean = path.strip("/")
            if path.endswith("/"):
                directory(clean)
                continue
            for parent in _parents(clean):
                directory(parent)
            data = content.encode() if isinstance(content, str) else content
            mode = 0o755 if path in layer.executables else 0o644
            tar.addfile(_tar_info(clean, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))
        for path, target in sorted(layer.symlinks.items()):
            for parent in _parents(path.strip("/")):
                directory(parent)
            tar.addfile(_tar_info(path.strip("/"), tarfile.SYMTYPE, 0o777, linkname=target))
        for info, data in layer.raw:
            tar.addfile(info, io.BytesIO(data) if data else None)


class _HashingWriter(io.RawIOBase):
    def __init__(self, sink) -> None:  # noqa: ANN001 -- any binary file object
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # noqa: ANN001 -- bytes-like
        self.sha.update(data)
        self.size += len(data)
        self.sink.write(data)
        return len(data)


class OCILayout:
    """An OCI image layout on disk that images are written into, one tag per image."""

    def __init__(self, path: Path) -> None:
        self.path = path
        (path / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        with open(path / ".index.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (path / "index.json").exists():
                self._write_index([])

    def blob(self, digest: str) -> Path:
        return self.path / "blobs" / "sha256" / digest.split(":", 1)[1]

    def _put(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = self.blob(digest)
        if not path.exists():
            with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as temporary:
                temporary.write(data)
            os.replace(temporary.name, path)
        return digest

    def _write_index(self, manifests: list[dict]) -> None:
        with tempfile.NamedTemporaryFile("w", dir=self.path, delete=False) as temporary:
            json.dump({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}, temporary)
        os.replace(temporary.name, self.path / "index.json")

    def _index(self) -> list[dict]:
        return json.loads((self.path / "index.json").read_text())["manifests"]

    def descriptor(self, tag: str) -> dict | None:
        return next((d for d in self._index() if d.get("annotations", {}).get(REF_NAME) == tag), None)

    def tag(self, tag: str, descriptor: dict) -> None:
        # Another test run may tag images in the cached layout at the same time.
        with open(self.path / ".index.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            manifests = [d for d in self._index() if d.get("annotations", {}).get(REF_NAME) != tag]
            manifests.append({**descriptor, "annotations": {REF_NAME: tag}})
            self._write_index(manifests)

    def manifest(self, tag: str) -> dict:
        descriptor = self.descriptor(tag)
        if descriptor is None:
            raise KeyError(f"no image tagged {tag!r} in {self.path}")
        return json.loads(self.blob(descriptor["digest"]).read_bytes())

    def add_layer(self, layer: Layer, compresslevel: int = 1) -> tuple[dict, str]:
        """Write ``layer`` gzip-compressed; its descriptor and diff id (the uncompressed digest)."""
        with tempfile.NamedTemporaryFile(dir=self.path / "blobs", delete=False) as out:
            compressed = _HashingWriter(out)
            with gzip.GzipFile(fileobj=compressed, mode="wb", compresslevel=compresslevel, mtime=0) as gz:
                uncompressed = _HashingWriter(gz)
                _write_tar(layer, uncompressed)
        digest = "sha256:" + compressed.sha.hexdigest()
        os.replace(out.name, self.blob(digest))
        return ({"mediaType": OCI_LAYER_GZIP, "digest": digest, "size": compressed.size},
                "sha256:" + uncompressed.sha.hexdigest())

    def build(self, tag: str, layers: Sequence[Layer], spec: ImageSpec, base: str | None = None,
              architecture: str = "amd64") -> dict:
        """Write an image of ``base``'s layers (a tag here) plus ``layers``, with ``spec`` as its
        config, and tag it; returns its manifest descriptor."""
        descriptors: list[dict] = []
        diff_ids: list[str] = []
        if base is not None:
            base_manifest = self.manifest(base)
            base_config = json.loads(self.blob(base_manifest["config"]["digest"]).read_bytes())
            descriptors += base_manifest["layers"]
            diff_ids += base_config["rootfs"]["diff_ids"]
        for layer in layers:
            descriptor, diff_id = self.add_layer(layer)
            descriptors.append(descriptor)
            diff_ids.append(diff_id)
        config = {"created": "2023-11-14T22:13:20Z", "architecture": architecture, "os": "linux",
                  "config": {"Env": spec.env, "WorkingDir": spec.working_dir, "User": spec.user,
                             "Labels": spec.labels,
                             **({"Entrypoint": spec.entrypoint} if spec.entrypoint is not None else {}),
                             **({"Cmd": spec.cmd} if spec.cmd is not None else {})},
                  "rootfs": {"type": "layers", "diff_ids": diff_ids}}
        config_bytes = json.dumps(config, sort_keys=True).encode()
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": OCI_CONFIG, "digest": self._put(config_bytes), "size": len(config_bytes)},
                    "layers": descriptors}
        manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
        descriptor = {"mediaType": OCI_MANIFEST, "digest": self._put(manifest_bytes), "size": len(manifest_bytes)}
        self.tag(tag, descriptor)
        return descriptor

    def build_index(self, tag: str, platforms: Mapping[str, str]) -> dict:
        """Tag an image index of the images tagged ``platforms`` values, keyed ``"os/arch"``."""
        entries = []
        for name, image_tag in platforms.items():
            os_name, arch = name.split("/", 1)
            descriptor = self.descriptor(image_tag)
            if descriptor is None:
                raise KeyError(f"no image tagged {image_tag!r} in {self.path}")
            entries.append({"mediaType": OCI_MANIFEST, "digest": descriptor["digest"], "size": descriptor["size"],
                            "platform": {"os": os_name, "architecture": arch}})
        index_bytes = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries},
                                 sort_keys=True).encode()
        descriptor = {"mediaType": OCI_INDEX, "digest": self._put(index_bytes), "size": len(index_bytes)}
        self.tag(tag, descriptor)
        return descriptor


# -- the base images -------------------------------------------------------------------------------


def busybox_layer() -> Layer:
    """A root filesystem of busybox-static and its applets as symlinks."""
    binary = Path(shutil.which("busybox") or "/bin/busybox")
    applets = subprocess.run([str(binary), "--list"], capture_output=True, text=True, check=True).stdout.split()
    files: dict[str, bytes | str] = {
        "bin/busybox": binary.read_bytes(),
        "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        "etc/group": "root:x:0:\nnogroup:x:65534:\n",
        "tmp/": b"", "root/": b"", "home/": b"", "proc/": b"", "sys/": b"", "dev/": b"",
    }
    return Layer(files=files, executables=["bin/busybox"],
                 symlinks={f"bin/{a}": "busybox" for a in applets if a != "busybox"})


def debootstrap_rootfs(target: Path) -> None:
    """A Debian bookworm minbase with python3; fails (never skips) when debootstrap cannot run."""
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    argv = ["debootstrap", "--variant=minbase", "--include=python3", "bookworm", str(staging), DEBIAN_MIRROR]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=DEBOOTSTRAP_TIMEOUT, check=False)
    except FileNotFoundError:
        pytest.fail("debootstrap is not installed: scripts/test.sh installs it (apt-get install debootstrap)")
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        pytest.fail(f"debootstrap of the Debian test image failed ({' '.join(argv)}):\n{tail}")
    staging.rename(target)


@dataclass
class BuiltImages:
    """The built images, tags of one OCI layout: ``busybox``, ``debian-python``, and what tests add."""

    layout: OCILayout

    @property
    def path(self) -> Path:
        return self.layout.path


def build_test_images(root: Path | None = None) -> BuiltImages:
    """Build (or reuse) the base images in ``root`` (default: the cache); safe beside another run."""
    root = (root or cache_dir()) / BUILDER_VERSION
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        layout = OCILayout(root / "oci")
        if layout.descriptor("busybox") is None:
            layout.build("busybox", [busybox_layer()], ImageSpec(cmd=["sh"]))
        if layout.descriptor("debian-python") is None:
            rootfs = root / "debian-python.rootfs"
            if not rootfs.is_dir():
                debootstrap_rootfs(rootfs)
            tree = Layer(tree=rootfs, tree_excludes=["dev", "proc", "sys", "run", "var/cache/apt/archives",
                                                     "var/lib/apt/lists", "var/log"])
            layout.build("debian-python", [tree], ImageSpec(cmd=["python3"]))
    return BuiltImages(layout)


# What `import torch` needs besides torch (its requirements); numpy for torch's own conversions.
_TORCH_PACKAGES = ("torch", "torchgen", "functorch", "sympy", "mpmath", "networkx", "filelock", "fsspec", "jinja2",
                   "markupsafe", "typing_extensions.py", "numpy", "numpy.libs")
_DIST_PACKAGES = "usr/local/lib/python3.11/dist-packages"
# Left out of the layer: headers and torch's own test suite (a sixth of the bytes to pull).
_TORCH_UNUSED = ("include", "test")


def build_torch_image(images: BuiltImages) -> str:
    """Tag (once; cached with the base images) ``debian-python`` plus a layer of this venv's torch
    (the CPU wheel: cp311, as Debian bookworm's python3), copied from site-packages; its tag, named
    by torch's version and the packages copied, so that a change of either builds it again."""
    import sysconfig

    import torch

    packages = hashlib.sha256(" ".join(_TORCH_PACKAGES + _TORCH_UNUSED).encode()).hexdigest()[:8]
    tag = f"debian-torch-{torch.__version__.replace('+', '-')}-{packages}"
    layout = images.layout
    with open(layout.path.parent / "torch-layer.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if layout.descriptor(tag) is None:
            site = Path(sysconfig.get_paths()["purelib"])
            staging = layout.path.parent / f"{tag}.staging"
            shutil.rmtree(staging, ignore_errors=True)
            target = staging / _DIST_PACKAGES
            target.mkdir(parents=True)
            for name in _TORCH_PACKAGES:
                if (site / name).exists():
                    # Hard links: the layer is read from them, nothing is copied on disk.
                    subprocess.run(["cp", "-al", str(site / name), str(target / name)], check=True)
            unused = [f"{_DIST_PACKAGES}/torch/{part}" for part in _TORCH_UNUSED]
            layout.build(tag, [Layer(tree=staging, tree_excludes=unused)], ImageSpec(cmd=["python3"]),
                         base="debian-python")
            shutil.rmtree(staging, ignore_errors=True)
    return tag


# -- registries ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Registry:
    """A running ``docker-registry`` on loopback; ``credentials`` is ``(user, password)`` behind token auth."""

    host: str
    storage: Path
    process: subprocess.Popen
    credentials: tuple[str, str] | None = None
    pushed: dict[str, str] = field(default_factory=dict)

    def push(self, images: BuiltImages | OCILayout | Path, tag: str, repository: str, *, zstd: bool = False,
             docker_format: bool = False) -> str:
        """Copy the image ``tag`` (an index with all its platforms) to ``host/repository`` and return
        the reference; ``zstd`` recompresses its layers with zstd on the way; ``docker_format``
        stores Docker's schema 2 manifests (a manifest list for an index) instead of OCI's."""
        path = images.path if isinstance(images, (BuiltImages, OCILayout)) else Path(images)
        reference = f"{self.host}/{repository}"
        argv = ["skopeo", "--insecure-policy", "copy", "--quiet", "--all", "--dest-tls-verify=false"]
        if self.credentials:
            argv += ["--dest-creds", ":".join(self.credentials)]
        if zstd:
            argv += ["--dest-compress", "--dest-compress-format", "zstd"]
        if docker_format:
            argv += ["--format", "v2s2"]
        argv += [f"oci:{path}:{tag}", f"docker://{reference}"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"skopeo push of {tag} to {reference} failed: {result.stderr.strip()}")
        self.pushed[repository] = reference
        return reference

    def blob_path(self, digest: str) -> Path:
        """Where the registry's filesystem driver keeps a blob's bytes."""
        hex_part = digest.split(":", 1)[1]
        return self.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hex_part[:2] / hex_part / "data"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class TokenServer:
    """The token service of Docker's auth flow: checks basic auth and grants the scopes asked for
    to ``user`` (anonymous callers get none), in a JWT signed by a key whose self-signed
    certificate is the registry's ``rootcertbundle``."""

    service = "trimaran-test-registry"
    issuer = "trimaran-test-token-issuer"

    def __init__(self, directory: Path, user: str, password: str) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.user, self.password = user, password
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.issuer)])
        now = datetime.datetime.now(datetime.timezone.utc)
        certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                       .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                       .not_valid_before(now - datetime.timedelta(days=1))
                       .not_valid_after(now + datetime.timedelta(days=30)).sign(self._key, hashes.SHA256()))
        self.certificate = directory / "token-cert.pem"
        self.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        self._x5c = base64.b64encode(certificate.public_bytes(serialization.Encoding.DER)).decode()
        server = self
        self.requests: list[tuple[str | None, str]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 -- http.server's name
                server._issue(self)

            def log_message(self, *args) -> None:  # noqa: ANN002 -- http.server's signature
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self._http.server_address[1]}/token"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def _issue(self, request: BaseHTTPRequestHandler) -> None:
        import jwt

        query = parse_qs(urlparse(request.path).query)
        header = request.headers.get("Authorization", "")
        subject = None
        if header.startswith("Basic "):
            user, _, password = base64.b64decode(header[6:]).decode(errors="replace").partition(":")
            if (user, password) != (self.user, self.password):
                self.requests.append((user, "refused"))
                request.send_response(401)
                request.send_header("Content-Type", "application/json")
                request.end_headers()
                request.wfile.write(b'{"errors":[{"code":"UNAUTHORIZED","message":"invalid username/password"}]}')
                return
            subject = user
        access = []
        for scope in query.get("scope", []):
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            if subject is not None:
                access.append({"type": kind, "name": name, "actions": actions.split(",")})
        self.requests.append((subject, "granted" if access else "anonymous"))
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": subject or "", "aud": self.service, "iat": now, "nbf": now - 60,
                  "exp": now + 600, "jti": os.urandom(8).hex(), "access": access}
        token = jwt.encode(claims, self._key, algorithm="ES256", headers={"x5c": [self._x5c]})
        body = json.dumps({"token": token, "access_token": token, "expires_in": 600}).encode()
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()


def start_registry(directory: Path, token_server: TokenServer | None = None, deadline: float = 30.0,
                   tls: tuple[Path, Path] | None = None) -> Registry:
    """A ``docker-registry`` serving plain HTTP on a free loopback port, its storage in ``directory``;
    HTTPS with ``tls`` (certificate, key)."""
    directory.mkdir(parents=True, exist_ok=True)
    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    if not Path(binary).exists():
        pytest.fail("docker-registry is not installed: scripts/test.sh installs it (apt-get install docker-registry)")
    last_error = ""
    for _attempt in range(3):  # another process may take the port between our probe and the bind
        port = free_port()
        config = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(directory / "storage")}, "delete": {"enabled": True}},
            "http": {"addr": f"127.0.0.1:{port}", "secret": os.urandom(16).hex()},
        }
        if tls is not None:
            config["http"]["tls"] = {"certificate": str(tls[0]), "key": str(tls[1])}
        if token_server is not None:
            config["auth"] = {"token": {"realm": token_server.realm, "service": token_server.service,
                                        "issuer": token_server.issuer,
                                        "rootcertbundle": str(token_server.certificate)}}
        config_path = directory / "config.yml"
        config_path.write_text(json.dumps(config))  # JSON is YAML
        log = open(directory / "registry.log", "ab")
        process = subprocess.Popen([binary, "serve", str(config_path)], stdout=log, stderr=log)
        log.close()
        end = time.monotonic() + deadline
        while time.monotonic() < end and process.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                credentials = (token_server.user, token_server.password) if token_server else None
                return Registry(f"127.0.0.1:{port}", directory / "storage", process, credentials)
            time.sleep(0.05)
        process.kill()
        process.wait()
        last_error = (directory / "registry.log").read_text(errors="replace")[-2000:]
    pytest.fail(f"docker-registry did not start:\n{last_error}")


# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def test_images() -> BuiltImages:
    """The base images (``busybox``, ``debian-python``), built once and cached between runs."""
    return build_test_images()


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A plain-HTTP registry on loopback for the session."""
    running = start_registry(tmp_path_factory.mktemp("registry"))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry behind token auth: ``auth_registry.credentials`` may pull and push, anyone else nothing."""
    directory = tmp_path_factory.mktemp("auth-registry")
    tokens = TokenServer(directory, "puller", os.urandom(8).hex())
    running = start_registry(directory, tokens)
    yield running
    running.stop()
    tokens.stop()


def docker_config_secret(registry_host: str, user: str, password: str, name: str = "pull-secret") -> dict:
    """A ``kubernetes.io/dockerconfigjson`` Secret as stored (data base64) for ``registry_host``."""
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    config = {"auths": {registry_host: {"username": user, "password": password, "auth": auth}}}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()}}
