//! `TlsScope`: the ASGI TLS extension of one connection (asgiref's TLS extension, version 0.2),
//! `scope["extensions"]["tls"]`.

use std::sync::{Arc, OnceLock};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rustls::pki_types::CertificateDer;
use x509_cert::der::Decode;

/// What the TLS extension says of one connection, read off rustls once its handshake is done
/// (without the GIL), and the Python dict made of it on the connection's first request: every
/// request on the connection is handed that same dict.
pub struct TlsScope {
    /// The server's own certificate (the leaf of its chain), PEM; one string per server.
    server_cert: Option<Arc<str>>,
    /// The client's certificates as it sent them, leaf first, PEM.
    client_cert_chain: Vec<String>,
    /// The leaf's subject as an RFC 4514 string.
    client_cert_name: Option<String>,
    /// The TLS version's number on the wire (0x0303 is TLS 1.2, 0x0304 TLS 1.3).
    tls_version: Option<u16>,
    /// The cipher suite's IANA number; None where the TLS library does not tell (QUIC).
    cipher_suite: Option<u16>,
    python: OnceLock<Py<PyDict>>,
}

impl TlsScope {
    /// `client_certs` as rustls verified them (rustls refuses a connection whose certificate
    /// fails verification, so there is never a `client_cert_error` to report).
    pub fn new(
        server_cert: Option<Arc<str>>,
        client_certs: &[CertificateDer<'_>],
        tls_version: Option<u16>,
        cipher_suite: Option<u16>,
    ) -> Self {
        let client_cert_name = client_certs.first().and_then(|leaf| subject_name(leaf));
        Self {
            server_cert,
            client_cert_chain: client_certs.iter().map(|cert| pem(cert)).collect(),
            client_cert_name,
            tls_version,
            cipher_suite,
            python: OnceLock::new(),
        }
    }

    /// The TLS connection rustls has finished the handshake of, serving `server_cert`.
    pub fn of_connection(server_cert: Option<Arc<str>>, connection: &rustls::CommonState) -> Self {
        Self::new(
            server_cert,
            connection.peer_certificates().unwrap_or_default(),
            connection.protocol_version().map(u16::from),
            connection
                .negotiated_cipher_suite()
                .map(|suite| u16::from(suite.suite())),
        )
    }

    /// The extension's dict, made on the first call and shared by every later one.
    pub fn python<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if let Some(dict) = self.python.get() {
            return Ok(dict.bind(py).clone());
        }
        let dict = PyDict::new(py);
        dict.set_item(intern!(py, "server_cert"), self.server_cert.as_deref())?;
        let chain = PyList::new(py, &self.client_cert_chain)?;
        dict.set_item(intern!(py, "client_cert_chain"), chain)?;
        dict.set_item(
            intern!(py, "client_cert_name"),
            self.client_cert_name.as_deref(),
        )?;
        dict.set_item(intern!(py, "client_cert_error"), py.None())?;
        dict.set_item(intern!(py, "tls_version"), self.tls_version)?;
        dict.set_item(intern!(py, "cipher_suite"), self.cipher_suite)?;
        // Another thread may have made one meanwhile: the first stored is the one shared.
        let _ = self.python.set(dict.unbind());
        Ok(self.python.get().expect("just set").bind(py).clone())
    }
}

/// A certificate as PEM text (RFC 7468).
pub fn pem(der: &[u8]) -> String {
    pem_rfc7468::encode_string("CERTIFICATE", pem_rfc7468::LineEnding::LF, der).unwrap_or_default()
}

/// The certificate's subject as RFC 4514 writes a distinguished name; None if it does not
/// parse (rustls accepted it, so it will).
fn subject_name(der: &[u8]) -> Option<String> {
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    Some(cert.tbs_certificate.subject.to_string())
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::pem::PemObject;

    use super::*;

    /// A self-signed certificate whose subject is C=NZ, O=Ferrule, CN=`client, one+two` (in
    /// that order), made with Python's `cryptography`.
    const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBXzCCAQWgAwIBAgIBBzAKBggqhkjOPQQDAjA5MQswCQYDVQQGEwJOWjEQMA4G
A1UECgwHRmVycnVsZTEYMBYGA1UEAwwPY2xpZW50LCBvbmUrdHdvMB4XDTI2MDEw
MTAwMDAwMFoXDTM1MTIzMDAwMDAwMFowOTELMAkGA1UEBhMCTloxEDAOBgNVBAoM
B0ZlcnJ1bGUxGDAWBgNVBAMMD2NsaWVudCwgb25lK3R3bzBZMBMGByqGSM49AgEG
CCqGSM49AwEHA0IABNv4JUQto2D2GnK3p+evkR7cGzAFsNBh91CWMHwccHM7IqRu
AKezA7QSKsdW7xW5FnUw2iDaZz4E7miI+W9grrYwCgYIKoZIzj0EAwIDSAAwRQIg
cntpLt2T0OlS0QQjD2XkImr48YvtPALoF5gcXoDD57wCIQDdWu1v+ZVrTrOjeNsL
9m9ku7JTjFJITommYM1sHDR53g==
-----END CERTIFICATE-----
";

    #[test]
    fn the_subject_is_written_as_rfc_4514_says() {
        let der = CertificateDer::from_pem_slice(CERT.as_bytes()).unwrap();
        // What `cryptography`'s `Name.rfc4514_string()` gives for it: last RDN first, and
        // the comma and plus in the value escaped.
        let name = subject_name(&der);
        assert_eq!(
            name.as_deref(),
            Some("CN=client\\, one\\+two,O=Ferrule,C=NZ")
        );
    }

    #[test]
    fn pem_gives_back_the_certificate_as_it_was() {
        let der = CertificateDer::from_pem_slice(CERT.as_bytes()).unwrap();
        assert_eq!(pem(&der), CERT);
    }

    #[test]
    fn a_malformed_certificate_has_no_name() {
        assert_eq!(subject_name(b"not DER"), None);
    }
}
