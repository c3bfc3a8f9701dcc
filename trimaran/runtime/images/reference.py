"""Image references as Docker and the kubelet read them (the distribution's reference grammar).

``busybox`` means ``docker.io/library/busybox:latest``; a first component with a dot, a colon or
named ``localhost`` is a registry; a digest pins the content and a tag beside it is only a label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEFAULT_REGISTRY = "docker.io"
DEFAULT_TAG = "latest"
# The registry whose repositories without a namespace live under ``library/``; Docker also
# accepts the legacy index host for it.
_DOCKER_HUB_ALIASES = ("docker.io", "index.docker.io")
_MAX_NAME_LENGTH = 255

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_DOMAIN = re.compile(
    r"(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*"
    r"|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
)
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}")
_SHA256_HEX = re.compile(r"[a-f0-9]{64}")


class InvalidImageName(ValueError):
    """An ``image:`` that is not a reference; the message is the kubelet's ``InvalidImageName`` text."""


@dataclass(frozen=True)
class ImageReference:
    """A normalised reference: ``registry/repository[:tag][@digest]``."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None
    #: Written without a registry (``busybox``): registries.conf's unqualified-search-registries
    #: may look for it elsewhere than Docker Hub. Not part of the name.
    short: bool = field(default=False, compare=False)

    @property
    def name(self) -> str:
        """``registry/repository``: the image without tag or digest."""
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text

    def with_digest(self, digest: str) -> ImageReference:
        """This repository pinned to ``digest`` (no tag): what a pull of a resolved tag fetches."""
        return ImageReference(self.registry, self.repository, None, digest)

    @property
    def is_loopback(self) -> bool:
        """The registry is on this machine, where plain HTTP is allowed as Docker and containerd allow."""
        host = self.registry.rsplit(":", 1)[0] if not self.registry.startswith("[") else self.registry
        host = host.split("]")[0].lstrip("[")
        return host in ("localhost", "::1") or host.startswith("127.")


def _invalid(image: str, reason: str) -> InvalidImageName:
    return InvalidImageName(f'couldn\'t parse image name "{image}": invalid reference format: {reason}')


def parse_reference(image: str) -> ImageReference:
    """Parse and normalise ``image`` as Docker does; raises :class:`InvalidImageName`.

    >>> str(parse_reference("busybox"))
    'docker.io/library/busybox:latest'
    >>> str(parse_reference("127.0.0.1:5000/team/app@sha256:" + "a" * 64))
    '127.0.0.1:5000/team/app@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'
    """
    if not isinstance(image, str) or not image:
        raise _invalid(str(image or ""), "the image name is empty")
    if image != image.strip():
        raise _invalid(image, "the image name has leading or trailing whitespace")
    rest, digest = image, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise _invalid(image, f"digest {digest!r} is not algorithm:hex")
        algorithm, hex_part = digest.split(":", 1)
        if algorithm == "sha256" and not _SHA256_HEX.fullmatch(hex_part):
            raise _invalid(image, f"sha256 digest {digest!r} must be 64 lowercase hex characters")
    tag = None
    last_slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > last_slash:
        rest, tag = rest[:colon], rest[colon + 1:]
        if not _TAG.fullmatch(tag):
            raise _invalid(image, f"tag {tag!r} must be 1-128 letters, digits, '_', '.' or '-', "
                                  "not starting with '.' or '-'")
    registry, path, short = DEFAULT_REGISTRY, rest, True
    first, sep, remainder = rest.partition("/")
    if sep and (any(c in first for c in ".:") or first == "localhost" or first != first.lower()):
        short = False
        if not _DOMAIN.fullmatch(first):
            raise _invalid(image, f"registry {first!r} is not a host name with an optional port")
        registry, path = first, remainder
    if not path:
        raise _invalid(image, "the repository name is empty")
    if path != path.lower():
        raise _invalid(image, f"repository name ({path}) must be lowercase")
    for component in path.split("/"):
        if not _COMPONENT.fullmatch(component):
            raise _invalid(image, f"repository path component {component!r} must be lowercase letters and digits "
                                  "separated by '.', '_', '__' or '-'")
    if registry in _DOCKER_HUB_ALIASES:
        registry = DEFAULT_REGISTRY
        if "/" not in path:
            path = f"library/{path}"
    if len(f"{registry}/{path}") > _MAX_NAME_LENGTH:
        raise _invalid(image, f"repository name must not be longer than {_MAX_NAME_LENGTH} characters")
    if tag is None and digest is None:
        tag = DEFAULT_TAG
    return ImageReference(registry, path, tag, digest, short)
