"""Where a pull goes: registry mirrors and pull-through caches, configured as containerd and the
containers tools configure them, so one site file serves Trimaran and the node software beside it.

Two forms, read at every pull (as containerd reads its ``config_path``), so a mirror added while
the control plane runs counts at the next pull:

- containerd's ``hosts.toml`` (``docs/hosts.md``): ``<config_path>/<registry>/hosts.toml`` (or
  ``_default/hosts.toml``), whose ``[host."URL"]`` tables are tried in file order, then ``server``
  (the upstream; when omitted, the registry's own default, ``registry-1.docker.io`` for
  ``docker.io``, as containerd does). ``capabilities`` (``pull``: content by digest; ``resolve``: a
  tag to a digest), ``skip_verify``, ``ca`` and ``client`` are honoured; ``config_path`` is
  ``$TRIMARAN_REGISTRY_CONFIG_PATH``, else ``$TRIMARAN_HOME/certs.d``.
- containers-registries.conf(5) (Podman, CRI-O, skopeo): ``[[registry]]`` with ``prefix``,
  ``location``, ``insecure``, ``blocked`` and ``[[registry.mirror]]`` entries (``location``,
  ``insecure``, ``pull-from-mirror``: all, digest-only, tag-only), mirrors in order then the
  location, and ``unqualified-search-registries`` for short names (``busybox``) in order. The file
  is ``$TRIMARAN_REGISTRIES_CONF``, else ``$TRIMARAN_HOME/registries.conf``, with the drop-ins of
  ``registries.conf.d/*.conf`` beside it read after it, in name order.

A registry that has a ``hosts.toml`` directory takes it alone; otherwise registries.conf's entry;
otherwise the registry itself. Both files are parsed with tomllib (TOML 1.0; tomli before 3.11).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

from trimaran.runtime.images.reference import DEFAULT_REGISTRY, ImageReference

__all__ = ["MirrorConfigError", "PullPlan", "RegistryConfig", "RegistryEndpoint"]

# containerd's default upstream host for a registry name (its ``ConfigureHosts`` default).
_DEFAULT_SERVERS = {DEFAULT_REGISTRY: "registry-1.docker.io"}
_CAPABILITIES = {"pull", "resolve", "push"}
_PULL_FROM_MIRROR = {"all", "digest-only", "tag-only"}


class MirrorConfigError(ValueError):
    """A mirror configuration file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class RegistryEndpoint:
    """One host a pull may try: ``host`` (host[:port]) serves repositories under ``path`` (a
    registries.conf location's path; once bound to a name by :class:`PullPlan`, its whole repository)."""

    host: str
    path: str = ""
    tls_verify: bool = True
    ca: tuple[Path, ...] = ()
    client: tuple[tuple[Path, Path | None], ...] = ()
    resolve: bool = True
    pull: bool = True
    mirror: bool = False
    #: registries.conf's ``pull-from-mirror``: which references the mirror may serve.
    serves: str = "all"
    source: str = ""

    def bound(self, repository: str) -> RegistryEndpoint:
        """This host serving ``repository`` (below its own path)."""
        return dataclasses.replace(self, path="/".join(p for p in (self.path, repository) if p))

    def reference(self, ref: ImageReference) -> ImageReference:
        """``ref``'s tag or digest at this host, in the repository it was bound to."""
        return ImageReference(self.host, self.path, ref.tag, ref.digest)

    def may_serve(self, ref: ImageReference) -> bool:
        """Whether this host may answer ``ref``'s first request (its manifest): a digest needs
        ``pull``, a tag ``resolve``; registries.conf's digest-only and tag-only mirrors keep to theirs."""
        if ref.digest is not None:
            return self.pull and self.serves != "tag-only"
        return self.resolve and self.serves != "digest-only"

    @property
    def label(self) -> str:
        """How a failure message names it (containerd names each host it tried)."""
        role = "mirror" if self.mirror else "upstream"
        return f"{self.host} ({role}{', ' + self.source if self.source else ''})"


@dataclass(frozen=True)
class PullPlan:
    """The hosts to try for one name: ``ref`` as the configuration resolved it (a short name's
    candidate registry, say), and its ``endpoints`` in order."""

    ref: ImageReference
    endpoints: tuple[RegistryEndpoint, ...]


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as stream:
            return tomllib.load(stream)
    except tomllib.TOMLDecodeError as error:
        raise MirrorConfigError(f"{path}: not valid TOML: {error}") from None
    except OSError as error:
        raise MirrorConfigError(f"{path}: cannot be read: {error.strerror or error}") from None


def _strings(value: Any, path: Path, field: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise MirrorConfigError(f"{path}: {field} must be a string or a list of strings")


def _bool(value: Any, path: Path, field: str) -> bool:
    if not isinstance(value, bool):
        raise MirrorConfigError(f"{path}: {field} must be true or false, not {value!r}")
    return value


def _url_host(url: str, path: Path, field: str, *, override_path: bool) -> tuple[str, str]:
    """``(scheme, host[:port])`` of a hosts.toml URL; a host without a scheme is HTTPS, as containerd's."""
    parts = urlsplit(url if "://" in url else f"https://{url}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise MirrorConfigError(f"{path}: {field} {url!r} is not an http(s) URL with a host")
    if parts.path.rstrip("/") not in ("", "/v2") or override_path:
        # skopeo reaches registries at /v2/ only; a mirror under another path cannot be pulled from.
        raise MirrorConfigError(f"{path}: {field} {url!r}: only registries served at /v2 are supported "
                                "(an API path of its own, override_path, is not)")
    return parts.scheme, parts.netloc


def _files(value: Any, base: Path, path: Path, field: str) -> tuple[Path, ...]:
    return tuple((base / p) if not Path(p).is_absolute() else Path(p) for p in _strings(value, path, field))


def _client_pairs(value: Any, base: Path, path: Path) -> tuple[tuple[Path, Path | None], ...]:
    """hosts.toml's ``client``: a cert, a [cert, key] pair, or a list of either."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise MirrorConfigError(f"{path}: client must be a path, a [cert, key] pair or a list of them")
    if len(value) == 2 and all(isinstance(v, str) for v in value) and not value[1].endswith((".crt", ".cert")):
        value = [value]
    pairs = []
    for item in value:
        files = _files(item, base, path, "client")
        if len(files) > 2:
            raise MirrorConfigError(f"{path}: client entries are a cert or a [cert, key] pair")
        pairs.append((files[0], files[1] if len(files) == 2 else None))
    return tuple(pairs)


def _hosts_toml_endpoint(url: str, table: dict[str, Any], path: Path, *, mirror: bool) -> RegistryEndpoint:
    field = f'[host."{url}"]' if mirror else "server"
    scheme, host = _url_host(url, path, field, override_path=bool(table.get("override_path")))
    capabilities = _strings(table.get("capabilities", ["pull", "resolve", "push"]), path, f"{field} capabilities")
    unknown = set(capabilities) - _CAPABILITIES
    if unknown:
        raise MirrorConfigError(f"{path}: {field} capabilities: unknown {sorted(unknown)} "
                                f"(known: {sorted(_CAPABILITIES)})")
    skip_verify = _bool(table.get("skip_verify", False), path, f"{field} skip_verify")
    return RegistryEndpoint(
        host=host, tls_verify=scheme == "https" and not skip_verify,
        ca=_files(table["ca"], path.parent, path, f"{field} ca") if "ca" in table else (),
        client=_client_pairs(table["client"], path.parent, path) if "client" in table else (),
        resolve="resolve" in capabilities, pull="pull" in capabilities, mirror=mirror,
        source=str(path))


def hosts_toml_endpoints(config_path: Path, registry: str) -> tuple[RegistryEndpoint, ...] | None:
    """The hosts containerd would try for ``registry`` under ``config_path``, or None when no
    ``hosts.toml`` applies (no directory for it and no ``_default``)."""
    for name in (registry, "_default"):
        path = config_path / name / "hosts.toml"
        if path.is_file():
            break
    else:
        return None
    document = _read_toml(path)
    hosts = document.get("host") or {}
    if not isinstance(hosts, dict) or not all(isinstance(t, dict) for t in hosts.values()):
        raise MirrorConfigError(f'{path}: host entries must be tables: [host."https://mirror:5000"]')
    endpoints = [_hosts_toml_endpoint(url, table, path, mirror=True) for url, table in hosts.items()]
    server = document.get("server")
    if server is not None and not isinstance(server, str):
        raise MirrorConfigError(f"{path}: server must be a URL string")
    if server:
        upstream = _hosts_toml_endpoint(server, document, path, mirror=False)
    else:
        # containerd's default for a namespace without ``server``: the registry itself (plain
        # HTTP for loopback), with every capability.
        loopback = ImageReference(registry, "x", None, None).is_loopback
        upstream = RegistryEndpoint(host=_DEFAULT_SERVERS.get(registry, registry), tls_verify=not loopback,
                                    source=str(path))
    return (*endpoints, _upstream_named(upstream, registry))


def _upstream_named(endpoint: RegistryEndpoint, registry: str) -> RegistryEndpoint:
    """skopeo (containers/image) maps ``docker.io`` to its API host and keys credentials by it, so
    the default Docker Hub host is asked for by its registry name."""
    if _DEFAULT_SERVERS.get(registry) == endpoint.host:
        return dataclasses.replace(endpoint, host=registry)
    return endpoint


def _split_location(location: str, path: Path, field: str) -> tuple[str, str]:
    if not isinstance(location, str) or not location or "://" in location:
        raise MirrorConfigError(f"{path}: {field} must be host[:port][/path] without a scheme, not {location!r}")
    host, _, prefix = location.partition("/")
    return host, prefix.strip("/")


def _prefix_matches(prefix: str, name: str) -> bool:
    """containers-registries.conf(5)'s prefix match: a whole path prefix, or ``*.domain`` for hosts."""
    if prefix.startswith("*."):
        host = name.split("/", 1)[0]
        return fnmatch.fnmatchcase(host, prefix) and host != prefix[2:]
    return name == prefix or name.startswith(prefix.rstrip("/") + "/")


def _entry_prefix(entry: dict[str, Any]) -> str:
    return entry.get("prefix") or entry["location"]


@dataclass(frozen=True)
class _RegistriesConf:
    """registries.conf and its drop-ins: ``registries`` are ``(entry, the file it came from)``."""

    search: tuple[str, ...]
    registries: tuple[tuple[dict[str, Any], Path], ...]

    @classmethod
    def load(cls, paths: list[Path]) -> _RegistriesConf:
        """Read ``paths`` in order (the file, then ``registries.conf.d/*.conf`` sorted): a later
        file's ``unqualified-search-registries`` replaces the earlier, and its ``[[registry]]``
        replaces an earlier one of the same prefix (containers-registries.conf.d(5))."""
        search: tuple[str, ...] = ()
        registries: dict[str, tuple[dict[str, Any], Path]] = {}
        for path in paths:
            document = _read_toml(path)
            if "unqualified-search-registries" in document:
                search = tuple(_strings(document["unqualified-search-registries"], path,
                                        "unqualified-search-registries"))
            entries = document.get("registry", [])
            if not isinstance(entries, list) or not all(isinstance(r, dict) for r in entries):
                raise MirrorConfigError(f"{path}: registry entries must be [[registry]] tables")
            for index, entry in enumerate(entries):
                if not entry.get("prefix") and not entry.get("location"):
                    raise MirrorConfigError(f"{path}: [[registry]] #{index + 1} has neither prefix nor location")
                for mirror in entry.get("mirror") or []:
                    mode = mirror.get("pull-from-mirror", "all")
                    if mode not in _PULL_FROM_MIRROR:
                        raise MirrorConfigError(f"{path}: [[registry.mirror]] {mirror.get('location')!r}: "
                                                f"pull-from-mirror must be one of {sorted(_PULL_FROM_MIRROR)}")
                registries[_entry_prefix(entry)] = (entry, path)
        return cls(search, tuple(registries.values()))

    def endpoints(self, ref: ImageReference) -> tuple[tuple[RegistryEndpoint, ...], str] | None:
        """The hosts for ``ref`` (mirrors, then the location) and the repository path they serve
        it under, from the longest matching prefix; None when no entry matches."""
        name = ref.name
        matching = [(entry, path) for entry, path in self.registries if _prefix_matches(_entry_prefix(entry), name)]
        if not matching:
            return None
        best, path = max(matching, key=lambda found: len(_entry_prefix(found[0])))
        prefix = _entry_prefix(best)
        if best.get("blocked"):
            raise MirrorConfigError(f"{path}: registry {prefix!r} is blocked (blocked = true)")
        # The part of the name below the prefix; a wildcard prefix keeps the whole name's path.
        rest = name.split("/", 1)[1] if prefix.startswith("*.") else name[len(prefix):].lstrip("/")
        source = str(path)
        endpoints = []
        for mirror in best.get("mirror") or []:
            host, path_prefix = _split_location(mirror.get("location"), path, "[[registry.mirror]] location")
            endpoints.append(RegistryEndpoint(
                host=host, path=path_prefix,
                tls_verify=not _bool(mirror.get("insecure", False), path, "mirror insecure"),
                mirror=True, serves=mirror.get("pull-from-mirror", "all"), source=source))
        # A wildcard entry's location is the name's own host (containers-registries.conf(5)).
        location = best.get("location") or (ref.registry if prefix.startswith("*.") else prefix)
        host, path_prefix = _split_location(location, path, "[[registry]] location")
        insecure = _bool(best.get("insecure", False), path, "registry insecure")
        endpoints.append(_upstream_named(RegistryEndpoint(host=host, path=path_prefix, tls_verify=not insecure,
                                                          source=source), ref.registry))
        return tuple(endpoints), rest


class RegistryConfig:
    """The node's mirror configuration: ``config_path`` (containerd's hosts.toml directories) and
    ``registries_conf`` (containers-registries.conf(5)); either may be absent."""

    def __init__(self, config_path: Path | None = None, registries_conf: Path | None = None) -> None:
        self.config_path = config_path
        self.registries_conf = registries_conf

    @classmethod
    def for_home(cls, home: Path, environ: dict[str, str] | None = None) -> RegistryConfig:
        """``$TRIMARAN_REGISTRY_CONFIG_PATH`` / ``$TRIMARAN_REGISTRIES_CONF``, else under ``home``."""
        env = os.environ if environ is None else environ
        config_path = env.get("TRIMARAN_REGISTRY_CONFIG_PATH") or str(home / "certs.d")
        registries_conf = env.get("TRIMARAN_REGISTRIES_CONF") or str(home / "registries.conf")
        return cls(Path(config_path), Path(registries_conf))

    def _conf(self) -> _RegistriesConf | None:
        if self.registries_conf is None:
            return None
        drop_ins = self.registries_conf.parent / "registries.conf.d"
        paths = [self.registries_conf] if self.registries_conf.is_file() else []
        paths += sorted(drop_ins.glob("*.conf")) if drop_ins.is_dir() else []
        return _RegistriesConf.load(paths) if paths else None

    def plans(self, ref: ImageReference) -> list[PullPlan]:
        """Where to look for ``ref``, in order: one plan per candidate name (a short name's search
        registries), each with its hosts. Raises :class:`MirrorConfigError`."""
        conf = self._conf()
        candidates = [ref]
        if ref.short and conf is not None and conf.search:
            candidates = [_in_registry(ref, registry) for registry in conf.search]
        return [self._plan(candidate, conf) for candidate in candidates]

    def _plan(self, ref: ImageReference, conf: _RegistriesConf | None) -> PullPlan:
        if self.config_path is not None:
            endpoints = hosts_toml_endpoints(self.config_path, ref.registry)
            if endpoints is not None:
                return PullPlan(ref, tuple(e.bound(ref.repository) for e in endpoints))
        found = conf.endpoints(ref) if conf is not None else None
        if found is not None:
            endpoints, rest = found
            return PullPlan(ref, tuple(e.bound(rest) for e in endpoints))
        own = RegistryEndpoint(host=ref.registry, tls_verify=not ref.is_loopback)
        return PullPlan(ref, (own.bound(ref.repository),))


def _in_registry(ref: ImageReference, registry: str) -> ImageReference:
    """A short name's candidate in one search registry (Docker Hub puts single names in ``library/``)."""
    path = ref.repository
    if ref.registry == DEFAULT_REGISTRY and path.startswith("library/") and path.count("/") == 1:
        path = path.split("/", 1)[1]
    if registry in (DEFAULT_REGISTRY, "index.docker.io") and "/" not in path:
        path = f"library/{path}"
    return ImageReference(DEFAULT_REGISTRY if registry == "index.docker.io" else registry, path, ref.tag,
                          ref.digest)
