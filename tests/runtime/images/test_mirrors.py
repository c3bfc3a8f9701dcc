"""Registry mirrors: images under their public names (``busybox``, ``nginx:1.27``) pulled through
a mirror on loopback (the distribution's registry), configured as containerd's hosts.toml or as
containers-registries.conf(5), with the upstream unreachable, as on an offline site."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.imagekit import BuiltImages, ImageSpec, Layer, Registry, start_registry
from trimaran.runtime.images import ImagePullError, ImageStore, RegistryConfig, parse_reference

AMD64 = ("linux", "amd64")
PUBLIC = {"busybox": "library/busybox:latest", "nginx:1.27": "library/nginx:1.27",
          "python:3.11-slim": "library/python:3.11-slim"}


@pytest.fixture(scope="module")
def mirror(registry: Registry, test_images: BuiltImages) -> Registry:
    """The session registry holding Docker Hub's names, as a pull-through cache would."""
    for repository in PUBLIC.values():
        registry.push(test_images, "busybox", repository)
    return registry


@pytest.fixture
def dead_hosts() -> Iterator[list[str]]:
    """Loopback addresses that refuse connections (bound, never listening), held for the test."""
    sockets = [socket.socket() for _ in range(3)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    yield [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
    for s in sockets:
        s.close()


def hosts_toml(config_path: Path, registry: str, text: str) -> None:
    (config_path / registry).mkdir(parents=True, exist_ok=True)
    (config_path / registry / "hosts.toml").write_text(text)


def store_with(tmp_path: Path, *, config_path: Path | None = None, registries_conf: Path | None = None) -> ImageStore:
    return ImageStore(tmp_path / "images", platform=AMD64,
                      registries=RegistryConfig(config_path, registries_conf))


@pytest.mark.parametrize("image", ["docker.io/library/busybox", "busybox", "nginx:1.27", "python:3.11-slim"])
def test_public_names_come_from_the_hosts_toml_mirror(tmp_path: Path, mirror: Registry, dead_hosts: list[str],
                                                      image: str) -> None:
    config = tmp_path / "certs.d"
    # The upstream is a dead address: the pull can only have come from the mirror.
    hosts_toml(config, "docker.io", f'server = "http://{dead_hosts[0]}"\n\n'
                                    f'[host."http://{mirror.host}"]\n  capabilities = ["pull", "resolve"]\n')
    store = store_with(tmp_path, config_path=config)
    image_ref = parse_reference(image)
    pulled = store.pull(image_ref)
    assert pulled.reference == str(image_ref) and pulled.reference.startswith("docker.io/library/")
    assert (pulled.rootfs / "bin" / "busybox").is_file()
    assert store.lookup(image_ref) == pulled


def test_mirrors_are_tried_in_file_order_then_the_upstream(tmp_path: Path, mirror: Registry, test_images: BuiltImages,
                                                           dead_hosts: list[str]) -> None:
    other = start_registry(tmp_path / "second")
    try:
        layout = test_images.layout
        layout.build("mirror-marked", [Layer(files={"etc/which-mirror": "second"})], ImageSpec(cmd=["sh"]),
                     base="busybox")
        other.push(test_images, "mirror-marked", "library/busybox:latest")
        config = tmp_path / "certs.d"
        # A dead mirror first, then the second registry, then the first: the second one serves.
        hosts_toml(config, "docker.io", f'server = "http://{dead_hosts[0]}"\n'
                                        f'[host."http://{dead_hosts[1]}"]\n'
                                        f'[host."http://{other.host}"]\n'
                                        f'[host."http://{mirror.host}"]\n')
        pulled = store_with(tmp_path, config_path=config).pull(parse_reference("busybox"))
        assert (pulled.rootfs / "etc" / "which-mirror").read_text() == "second"
        # Swapped, the first registry serves, and its image has no marker.
        hosts_toml(config, "docker.io", f'[host."http://{mirror.host}"]\n[host."http://{other.host}"]\n')
        again = store_with(tmp_path / "b", config_path=config).pull(parse_reference("busybox"))
        assert not (again.rootfs / "etc" / "which-mirror").exists()
        # A name the first mirror lacks goes on to the next.
        other.push(test_images, "mirror-marked", "team/only-second:1")
        only = store_with(tmp_path / "c", config_path=config).pull(parse_reference("team/only-second:1"))
        assert (only.rootfs / "etc" / "which-mirror").read_text() == "second"
    finally:
        other.stop()


def test_a_failure_names_every_host_tried(tmp_path: Path, dead_hosts: list[str]) -> None:
    config = tmp_path / "certs.d"
    first, second, upstream = dead_hosts
    hosts_toml(config, "docker.io", f'server = "http://{upstream}"\n[host."http://{first}"]\n'
                                    f'[host."http://{second}"]\n  capabilities = ["pull", "resolve"]\n')
    store = store_with(tmp_path, config_path=config)
    with pytest.raises(ImagePullError) as failure:
        store.pull(parse_reference("busybox"))
    message = str(failure.value)
    assert message.startswith('failed to pull image "docker.io/library/busybox:latest": every host tried failed')
    positions = [message.index(f"{host} (") for host in (first, second, upstream)]
    assert positions == sorted(positions), message
    assert message.count("is unreachable") == 3 and "mirror" in message and "upstream" in message
    assert str(config / "docker.io" / "hosts.toml") in message


def test_a_pull_only_mirror_serves_digests_not_tags(tmp_path: Path, mirror: Registry, dead_hosts: list[str]) -> None:
    config = tmp_path / "certs.d"
    hosts_toml(config, "docker.io", f'server = "http://{dead_hosts[0]}"\n'
                                    f'[host."http://{mirror.host}"]\n  capabilities = ["pull"]\n')
    store = store_with(tmp_path, config_path=config)
    with pytest.raises(ImagePullError) as failure:
        store.pull(parse_reference("busybox"))
    # Only the upstream may turn the tag into a digest; the mirror was not asked.
    assert dead_hosts[0] in str(failure.value) and mirror.host not in str(failure.value)
    digest = store_with(tmp_path / "probe", config_path=None).pull(
        parse_reference(f"{mirror.host}/library/busybox:latest")).digest
    pinned = store.pull(parse_reference(f"busybox@{digest}"))
    assert pinned.digest == digest


def test_a_pull_only_mirror_serves_the_content_the_upstream_resolved(tmp_path: Path, mirror: Registry,
                                                                     test_images: BuiltImages) -> None:
    upstream = start_registry(tmp_path / "upstream")
    try:
        upstream.push(test_images, "busybox", "library/busybox:latest")
        # The upstream keeps its manifests but has lost its layers: only the mirror can serve them.
        layout_manifest = test_images.layout.manifest("busybox")
        for layer in layout_manifest["layers"]:
            upstream.blob_path(layer["digest"]).unlink()
        config = tmp_path / "certs.d"
        hosts_toml(config, "docker.io", f'server = "http://{upstream.host}"\n'
                                        f'[host."http://{mirror.host}"]\n  capabilities = ["pull"]\n')
        pulled = store_with(tmp_path, config_path=config).pull(parse_reference("busybox"))
        assert (pulled.rootfs / "bin" / "busybox").is_file()
        # Without the mirror, the upstream's missing layer is the failure.
        hosts_toml(config, "docker.io", f'server = "http://{upstream.host}"\n')
        with pytest.raises(ImagePullError):
            store_with(tmp_path / "alone", config_path=config).pull(parse_reference("busybox"))
    finally:
        upstream.stop()


def test_a_default_directory_serves_every_registry(tmp_path: Path, mirror: Registry, dead_hosts: list[str]) -> None:
    config = tmp_path / "certs.d"
    hosts_toml(config, "_default", f'server = "http://{dead_hosts[0]}"\n[host."http://{mirror.host}"]\n')
    pulled = store_with(tmp_path, config_path=config).pull(parse_reference("nginx:1.27"))
    assert pulled.reference == "docker.io/library/nginx:1.27"


def test_registries_conf_mirrors_and_search_registries(tmp_path: Path, mirror: Registry, test_images: BuiltImages,
                                                       dead_hosts: list[str]) -> None:
    conf = tmp_path / "registries.conf"
    conf.write_text(f'[[registry]]\nprefix = "docker.io"\nlocation = "{dead_hosts[0]}"\ninsecure = true\n\n'
                    f'[[registry.mirror]]\nlocation = "{dead_hosts[1]}"\ninsecure = true\n\n'
                    f'[[registry.mirror]]\nlocation = "{mirror.host}"\ninsecure = true\n')
    store = store_with(tmp_path, registries_conf=conf)
    assert store.pull(parse_reference("python:3.11-slim")).reference == "docker.io/library/python:3.11-slim"
    # A mirror under a path: docker.io/library/busybox is <mirror>/hub/library/busybox there.
    mirror.push(test_images, "busybox", "hub/library/busybox:latest")
    conf.write_text(f'[[registry]]\nprefix = "docker.io"\nlocation = "{dead_hosts[0]}"\n\n'
                    f'[[registry.mirror]]\nlocation = "{mirror.host}/hub"\ninsecure = true\n')
    assert store.pull(parse_reference("docker.io/library/busybox")).digest
    # A short name is looked for in the search registries in order (the dead one first).
    mirror.push(test_images, "busybox", "searched/app:2")
    conf.write_text(f'unqualified-search-registries = ["{dead_hosts[2]}", "{mirror.host}"]\n')
    found = store.pull(parse_reference("searched/app:2"))
    assert found.reference == "docker.io/searched/app:2" and (found.rootfs / "bin" / "busybox").is_file()


def test_registries_conf_drop_ins_replace_entries_of_their_prefix(tmp_path: Path, mirror: Registry,
                                                                 dead_hosts: list[str]) -> None:
    conf = tmp_path / "registries.conf"
    conf.write_text(f'[[registry]]\nprefix = "docker.io"\nlocation = "{dead_hosts[0]}"\ninsecure = true\n')
    store = store_with(tmp_path, registries_conf=conf)
    with pytest.raises(ImagePullError, match=dead_hosts[0]):
        store.pull(parse_reference("busybox"))
    (tmp_path / "registries.conf.d").mkdir()
    (tmp_path / "registries.conf.d" / "50-mirror.conf").write_text(
        f'[[registry]]\nprefix = "docker.io"\nlocation = "{dead_hosts[1]}"\ninsecure = true\n'
        f'[[registry.mirror]]\nlocation = "{mirror.host}"\ninsecure = true\n')
    # Read after it, in name order: this one's docker.io entry is the one that counts.
    (tmp_path / "registries.conf.d" / "90-blocked.conf").write_text(
        '[[registry]]\nprefix = "quay.io"\nblocked = true\n')
    assert store.pull(parse_reference("busybox")).digest
    with pytest.raises(ImagePullError, match=r"90-blocked.conf: registry 'quay.io' is blocked"):
        store.pull(parse_reference("quay.io/team/app:1"))


def test_registries_conf_digest_only_mirror_and_blocked_registry(tmp_path: Path, mirror: Registry,
                                                                 dead_hosts: list[str]) -> None:
    conf = tmp_path / "registries.conf"
    conf.write_text(f'[[registry]]\nprefix = "docker.io"\nlocation = "{dead_hosts[0]}"\ninsecure = true\n\n'
                    f'[[registry.mirror]]\nlocation = "{mirror.host}"\ninsecure = true\n'
                    'pull-from-mirror = "digest-only"\n\n'
                    '[[registry]]\nprefix = "quay.io"\nblocked = true\n')
    store = store_with(tmp_path, registries_conf=conf)
    with pytest.raises(ImagePullError, match=dead_hosts[0]):
        store.pull(parse_reference("busybox"))
    with pytest.raises(ImagePullError, match="registry 'quay.io' is blocked"):
        store.pull(parse_reference("quay.io/team/app:1"))


@pytest.mark.parametrize(("text", "says"), [
    ("server = [", "not valid TOML"),
    ('[host."http://127.0.0.1:1"]\n  capabilities = ["fetch"]\n', "unknown ['fetch']"),
    ('[host."https://mirror.example/v3/proxy"]\n', "only registries served at /v2"),
    ('[host."http://127.0.0.1:1"]\n  skip_verify = "yes"\n', "skip_verify must be true or false"),
])
def test_a_bad_hosts_toml_is_a_clear_pull_error(tmp_path: Path, text: str, says: str) -> None:
    config = tmp_path / "certs.d"
    hosts_toml(config, "docker.io", text)
    with pytest.raises(ImagePullError) as failure:
        store_with(tmp_path, config_path=config).pull(parse_reference("busybox"))
    assert "registry mirror configuration" in str(failure.value) and says in str(failure.value)
    assert str(config / "docker.io" / "hosts.toml") in str(failure.value)


def test_the_home_and_environment_name_the_files(tmp_path: Path) -> None:
    default = RegistryConfig.for_home(tmp_path, {})
    assert (default.config_path, default.registries_conf) == (tmp_path / "certs.d", tmp_path / "registries.conf")
    named = RegistryConfig.for_home(tmp_path, {"TRIMARAN_REGISTRY_CONFIG_PATH": "/etc/containerd/certs.d",
                                               "TRIMARAN_REGISTRIES_CONF": "/etc/containers/registries.conf"})
    assert named.config_path == Path("/etc/containerd/certs.d")
    assert named.registries_conf == Path("/etc/containers/registries.conf")


def _certificates(directory: Path) -> tuple[Path, Path, Path, Path]:
    """A CA, a server certificate for 127.0.0.1 it signed (and its key), and an unrelated CA."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject: str, key, issuer: str, signer, *, ca: bool):  # noqa: ANN001, ANN202
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    paths = []
    ca_key, other_key, server_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = certificate("test mirror CA", ca_key, "test mirror CA", ca_key, ca=True)
    other = certificate("another CA", other_key, "another CA", other_key, ca=True)
    server = certificate("127.0.0.1", server_key, "test mirror CA", ca_key, ca=False)
    for name, cert in (("ca.crt", ca), ("server.crt", server), ("other.crt", other)):
        paths.append(directory / name)
        paths[-1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key = directory / "server.key"
    key.write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    return paths[0], paths[1], key, paths[2]


def test_an_https_mirror_is_verified_with_its_ca_or_skip_verify(tmp_path: Path, test_images: BuiltImages,
                                                                dead_hosts: list[str]) -> None:
    ca, certificate, key, other = _certificates(tmp_path)
    mirror = start_registry(tmp_path / "tls-registry", tls=(certificate, key))
    try:
        # skopeo's own push, verified with the CA, proves the registry serves that certificate.
        certs = tmp_path / "push-certs"
        certs.mkdir()
        (certs / "ca.crt").write_bytes(ca.read_bytes())
        pushed = subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet", "--dest-cert-dir", str(certs),
                                 f"oci:{test_images.path}:busybox", f"docker://{mirror.host}/library/busybox:latest"],
                                capture_output=True, text=True, timeout=300, check=False)
        assert pushed.returncode == 0, pushed.stderr
        config = tmp_path / "certs.d"
        for index, (extra, works) in enumerate([(f'ca = "{ca}"', True), (f'ca = "{other}"', False),
                                                (f'ca = "{other}"\n  skip_verify = true', True)]):
            hosts_toml(config, "docker.io", f'server = "http://{dead_hosts[0]}"\n'
                                            f'[host."https://{mirror.host}"]\n  {extra}\n')
            store = store_with(tmp_path / f"store-{index}", config_path=config)
            if works:
                assert (store.pull(parse_reference("busybox")).rootfs / "bin" / "busybox").is_file()
            else:
                with pytest.raises(ImagePullError, match="certificate signed by unknown authority"):
                    store.pull(parse_reference("busybox"))
    finally:
        mirror.stop()
