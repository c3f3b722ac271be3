"""Certificates made at test time with ``cryptography``, for the TLS tests: a CA, a server
certificate for ``127.0.0.1``/``localhost`` signed by it, a client certificate signed by it, the
server key again as an encrypted PKCS8 PEM (password :data:`KEY_PASSWORD`), and a client
certificate from another ("rogue") CA. The ``certs`` fixture
(``tests/conftest.py``) makes them once per session."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "correct horse battery staple"


@dataclass(frozen=True)
class Certs:
    """PEM files in a temporary directory."""

    ca: Path
    server_cert: Path
    server_key: Path
    server_key_encrypted: Path  # encrypted PKCS8 of the same key, password KEY_PASSWORD
    client_cert: Path
    client_key: Path
    rogue_client_cert: Path  # signed by a CA the server does not trust
    rogue_client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ferrule tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _certificate(
    subject: str,
    issuer: x509.Name | None,
    key: ec.EllipticCurvePrivateKey,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
) -> x509.CertificateBuilder:
    """What a CA and a leaf certificate share: names, validity (yesterday to a month from
    now), basic constraints, key usage and key identifiers; signed later by the caller."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer or _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )


def _make_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    cert = _certificate(common_name, None, key, key, ca=True).sign(key, hashes.SHA256())
    return cert, key


def _make_leaf(
    common_name: str,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    server: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = _certificate(common_name, ca_cert.subject, key, ca_key, ca=False).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False
    )
    if server:
        names: list[x509.GeneralName] = [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(
    path: Path,
    key: ec.EllipticCurvePrivateKey,
    encryption: serialization.KeySerializationEncryption | None = None,
) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            encryption or serialization.NoEncryption(),
        )
    )
    return path


def make_certs(folder: Path) -> Certs:
    """The certificates and keys, as PEM files in ``folder``."""
    ca_cert, ca_key = _make_ca("ferrule test CA")
    server_cert, server_key = _make_leaf("localhost", ca_cert, ca_key, server=True)
    client_cert, client_key = _make_leaf("ferrule test client", ca_cert, ca_key, server=False)
    rogue_ca_cert, rogue_ca_key = _make_ca("rogue CA")
    rogue_cert, rogue_key = _make_leaf("rogue client", rogue_ca_cert, rogue_ca_key, server=False)
    encrypted = serialization.BestAvailableEncryption(KEY_PASSWORD.encode())
    return Certs(
        ca=_write_cert(folder / "ca.pem", ca_cert),
        server_cert=_write_cert(folder / "server.pem", server_cert),
        server_key=_write_key(folder / "server.key", server_key),
        server_key_encrypted=_write_key(folder / "server-encrypted.key", server_key, encrypted),
        client_cert=_write_cert(folder / "client.pem", client_cert),
        client_key=_write_key(folder / "client.key", client_key),
        rogue_client_cert=_write_cert(folder / "rogue-client.pem", rogue_cert),
        rogue_client_key=_write_key(folder / "rogue-client.key", rogue_key),
    )
