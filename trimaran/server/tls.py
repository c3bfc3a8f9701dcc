"""The control plane's certificate authority and serving certificate.

Kubernetes clients in pods (``config.load_incluster_config()``) insist on HTTPS and a CA file, and
a server bound off loopback must not send tokens in clear, so each home has its own CA
(``$TRIMARAN_HOME/pki/ca.crt``, its key 0600) and a serving certificate for loopback, this host's
name and the address it binds. The CA goes into the kubeconfig and into every pod's
``ca.crt``; the serving certificate is re-issued when the address it must name changes.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trimaran.server.tokens import write_private

_CA_DAYS = 3650
_CERT_DAYS = 825


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    cert: Path
    key: Path

    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()


def _names(host: str, extra_ips: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    dns = ["localhost", socket.gethostname(), "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    ips = ["127.0.0.1", "::1", *extra_ips]
    try:
        ipaddress.ip_address(host)
        if host not in ("0.0.0.0", "::"):
            ips.append(host)
    except ValueError:
        dns.append(host)
    return sorted(set(dns)), sorted(set(ips))


def ensure_pki(home: Path, host: str = "127.0.0.1", extra_ips: Sequence[str] = ()) -> Pki:
    """The home's CA and a serving certificate valid for ``host`` (and ``extra_ips``: where pods
    reach the API on the pod network), made on first use."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    pki_dir = home / "pki"
    pki = Pki(pki_dir / "ca.crt", pki_dir / "server.crt", pki_dir / "server.key")
    ca_key_path = pki_dir / "ca.key"
    names_path = pki_dir / "server.names"
    now = datetime.datetime.now(datetime.timezone.utc)
    pem = serialization.Encoding.PEM
    private = serialization.PrivateFormat.PKCS8

    if not (pki.ca_cert.exists() and ca_key_path.exists()):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"trimaran-ca@{socket.gethostname()}")])
        ca = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
              .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=_CA_DAYS))
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                           content_commitment=False, key_encipherment=False,
                                           data_encipherment=False, key_agreement=False,
                                           encipher_only=False, decipher_only=False), critical=True)
              .sign(ca_key, hashes.SHA256()))
        write_private(ca_key_path, ca_key.private_bytes(pem, private, serialization.NoEncryption()))
        write_private(pki.ca_cert, ca.public_bytes(pem))
        pki.ca_cert.chmod(0o644)
        names_path.unlink(missing_ok=True)

    dns, ips = _names(host, extra_ips)
    wanted = "\n".join(dns + ips)
    if pki.cert.exists() and pki.key.exists() and names_path.exists() and names_path.read_text() == wanted:
        return pki
    ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.DNSName(n) for n in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trimaran-apiserver")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=_CERT_DAYS))
            .add_extension(x509.SubjectAlternativeName(san), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    write_private(pki.key, key.private_bytes(pem, private, serialization.NoEncryption()))
    write_private(pki.cert, cert.public_bytes(pem))
    names_path.write_text(wanted)
    return pki


__all__ = ["Pki", "ensure_pki"]
