"""Container images on the node: references, pull credentials, registry mirrors, and the
content-addressed store that pulls (skopeo) and unpacks (umoci) them for containers to run as
their root filesystem."""

from __future__ import annotations

from trimaran.runtime.images.credentials import RegistryCredential, credentials_from_secrets
from trimaran.runtime.images.mirrors import MirrorConfigError, RegistryConfig
from trimaran.runtime.images.reference import ImageReference, InvalidImageName, parse_reference
from trimaran.runtime.images.store import Image, ImageConfig, ImagePullError, ImageStore, host_platform

__all__ = ["Image", "ImageConfig", "ImagePullError", "ImageReference", "ImageStore", "InvalidImageName",
           "MirrorConfigError", "RegistryConfig", "RegistryCredential", "credentials_from_secrets", "host_platform",
           "parse_reference"]
