//! TLS with rustls (`--ssl-*`): the server's certificate and key, optional client certificates,
//! and ALPN offering the HTTP versions `--http` allows. Python reads the files (and decrypts
//! a password-protected key); this module gets PEM bytes.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::asgi::settings::HttpVersions;
use crate::asgi::tls_scope::pem;

/// How a server's connections are made TLS: the acceptor, and the server's certificate as the
/// scope's TLS extension gives it.
#[derive(Clone)]
pub struct TlsServing {
    pub acceptor: TlsAcceptor,
    /// The leaf of the server's chain, PEM, shared by every connection's scope.
    pub server_cert: Arc<str>,
}

/// The TLS material Python has read (`ferrule.tls.TlsFiles`), PEM.
#[derive(FromPyObject)]
pub struct TlsFiles<'py> {
    cert: Bound<'py, PyBytes>,
    key: Bound<'py, PyBytes>,
    ca_certs: Option<Bound<'py, PyBytes>>,
    /// `ssl.CERT_NONE`, `CERT_OPTIONAL` or `CERT_REQUIRED`.
    cert_reqs: u8,
}

impl TlsFiles<'_> {
    /// The acceptor for these files, offering `versions` by ALPN, with the server's certificate.
    pub fn serving(&self, versions: HttpVersions) -> PyResult<TlsServing> {
        let mut alpn = Vec::new();
        if versions.h2 {
            alpn.push(b"h2".to_vec());
        }
        if versions.h1 {
            alpn.push(b"http/1.1".to_vec());
        }
        let acceptor = TlsAcceptor::from(Arc::new(self.server_config(alpn)?));
        Ok(TlsServing {
            acceptor,
            server_cert: self.server_cert()?,
        })
    }

    /// The server's own certificate, the first of its chain, as PEM.
    pub fn server_cert(&self) -> PyResult<Arc<str>> {
        let leaf = CertificateDer::pem_slice_iter(self.cert.as_bytes())
            .next()
            .ok_or_else(|| PyValueError::new_err("the certificate file holds no PEM certificate"))?
            .map_err(|err| bad("cannot read the certificate file", err))?;
        Ok(pem(&leaf).into())
    }

    /// rustls' settings for these files, offering the `alpn` protocols (QUIC's TLS takes these
    /// with `h3`).
    pub fn server_config(&self, alpn: Vec<Vec<u8>>) -> PyResult<ServerConfig> {
        let mut config = server_config(
            self.cert.as_bytes(),
            self.key.as_bytes(),
            self.ca_certs.as_ref().map(|ca| ca.as_bytes()),
            ClientCerts::from_ssl_constant(self.cert_reqs)?,
        )?;
        config.alpn_protocols = alpn;
        Ok(config)
    }
}

/// What `--ssl-cert-reqs` asks of clients (the values of Python's `ssl.CERT_*`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ClientCerts {
    None,
    Optional,
    Required,
}

impl ClientCerts {
    fn from_ssl_constant(value: u8) -> PyResult<Self> {
        match value {
            0 => Ok(ClientCerts::None),
            1 => Ok(ClientCerts::Optional),
            2 => Ok(ClientCerts::Required),
            _ => Err(PyValueError::new_err("ssl_cert_reqs must be 0, 1 or 2")),
        }
    }
}

fn bad(what: &str, err: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{what}: {err}"))
}

/// rustls' settings for `cert_chain` / `key` (PEM), verifying clients against `ca_certs` (PEM)
/// as `client_certs` says.
fn server_config(
    cert_chain: &[u8],
    key: &[u8],
    ca_certs: Option<&[u8]>,
    client_certs: ClientCerts,
) -> PyResult<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_slice_iter(cert_chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| bad("cannot read the certificate file", err))?;
    if certs.is_empty() {
        return Err(PyValueError::new_err(
            "the certificate file holds no PEM certificate",
        ));
    }
    let key =
        PrivateKeyDer::from_pem_slice(key).map_err(|err| bad("cannot read the key file", err))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|err| bad("TLS setup", err))?;
    let builder = match (ca_certs, client_certs) {
        (_, ClientCerts::None) => builder.with_no_client_auth(),
        (None, _) => {
            return Err(PyValueError::new_err(
                "ssl_cert_reqs asks for client certificates: give ssl_ca_certs to check them",
            ))
        }
        (Some(ca_certs), required) => {
            let mut roots = RootCertStore::empty();
            for ca in CertificateDer::pem_slice_iter(ca_certs) {
                let ca = ca.map_err(|err| bad("cannot read the CA certificates file", err))?;
                roots
                    .add(ca)
                    .map_err(|err| bad("bad CA certificate", err))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if required == ClientCerts::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|err| bad("client certificate verifier", err))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder
        .with_single_cert(certs, key)
        .map_err(|err| bad("the certificate and key do not make a TLS identity", err))
}
