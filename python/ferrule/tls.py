"""``--ssl-*``: read the certificate, key and CA files for the server's TLS (rustls, in Rust).

The key may be an encrypted PEM (``--ssl-keyfile-password``); it is decrypted here, with the
``cryptography`` package, so the Rust side only ever sees plain PEM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ferrule.config import Config


class TlsConfigError(Exception):
    """A TLS option that cannot be used: the message says which and why."""


@dataclass(frozen=True)
class TlsFiles:
    cert: bytes
    key: bytes
    ca_certs: bytes | None
    cert_reqs: int


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"Cannot read the {what} {path!r}: {exc.strerror or exc}") from exc


def _decrypt(key: bytes, password: str) -> bytes:
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError as exc:  # pragma: no cover - cryptography is a dependency of the extra
        raise TlsConfigError("--ssl-keyfile-password needs the 'cryptography' package") from exc
    try:
        private = serialization.load_pem_private_key(key, password=password.encode())
    except (TypeError, ValueError) as exc:
        raise TlsConfigError(f"Cannot decrypt the key file with the password given: {exc}") from exc
    return private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load(config: Config) -> TlsFiles | None:
    """The TLS files the options name, read; None when TLS is off."""
    if config.ssl_certfile is None and config.ssl_keyfile is None:
        return None
    if config.ssl_certfile is None:
        raise TlsConfigError("--ssl-keyfile needs --ssl-certfile, the certificate chain")
    cert = _read(config.ssl_certfile, "certificate file")
    # As uvicorn (ssl's load_cert_chain): without --ssl-keyfile the key is in the same PEM.
    key = cert if config.ssl_keyfile is None else _read(config.ssl_keyfile, "key file")
    if config.ssl_keyfile_password is not None:
        key = _decrypt(key, config.ssl_keyfile_password)
    ca_certs = None
    if config.ssl_ca_certs is not None:
        ca_certs = _read(config.ssl_ca_certs, "CA certificates file")
    if config.ssl_cert_reqs not in (0, 1, 2):
        raise TlsConfigError("--ssl-cert-reqs must be 0 (none), 1 (optional) or 2 (required)")
    if config.ssl_cert_reqs and ca_certs is None:
        raise TlsConfigError("--ssl-cert-reqs 1 or 2 needs --ssl-ca-certs to check certificates")
    return TlsFiles(cert, key, ca_certs, config.ssl_cert_reqs)
