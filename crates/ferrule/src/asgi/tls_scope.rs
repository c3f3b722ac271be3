//! `TlsScope`: the ASGI TLS extension of one connection (asgiref's TLS extension, version 0.2),
//! `scope["extensions"]["tls"]`.

use std::fmt::Write;
use std::sync::{Arc, OnceLock};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rustls::pki_types::CertificateDer;
use x509_cert::attr::AttributeTypeAndValue;
use x509_cert::der::asn1::{Ia5StringRef, PrintableStringRef, Utf8StringRef};
use x509_cert::der::oid::db::rfc4519;
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Decode, Tag, Tagged};

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

/// A certificate as PEM text (RFC 7468: base64 in lines of 64 between the two labels, LF line
/// ends). The base64 is data-encoding's: pem-rfc7468's constant-time encoder took 14,000
/// instructions a certificate, for a public one.
pub fn pem(der: &[u8]) -> String {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----\n";
    const END: &str = "-----END CERTIFICATE-----\n";
    let base64 = data_encoding::BASE64.encode(der);
    let mut text = String::with_capacity(BEGIN.len() + base64.len() * 65 / 64 + 1 + END.len());
    text.push_str(BEGIN);
    for line in base64.as_bytes().chunks(64) {
        text.push_str(std::str::from_utf8(line).unwrap_or_default());
        text.push('\n');
    }
    text.push_str(END);
    text
}

/// The certificate's subject as RFC 4514 writes a distinguished name (the last RDN first,
/// an RDN's attributes joined by `+`), as x509-cert writes it; None if it does not parse
/// (rustls accepted it, so it will).
fn subject_name(der: &[u8]) -> Option<String> {
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    let mut name = String::new();
    for (i, rdn) in cert.tbs_certificate.subject.0.iter().rev().enumerate() {
        if i > 0 {
            name.push(',');
        }
        for (j, attribute) in rdn.0.iter().enumerate() {
            if j > 0 {
                name.push('+');
            }
            write_attribute(&mut name, attribute);
        }
    }
    Some(name)
}

/// The attribute types RFC 4514 names (3, table), by the names it gives them.
const SHORT_NAMES: [(ObjectIdentifier, &str); 9] = [
    (rfc4519::CN, "CN"),
    (rfc4519::L, "L"),
    (rfc4519::ST, "ST"),
    (rfc4519::O, "O"),
    (rfc4519::OU, "OU"),
    (rfc4519::C, "C"),
    (rfc4519::STREET, "STREET"),
    (rfc4519::DC, "DC"),
    (rfc4519::UID, "UID"),
];

/// One attribute, `NAME=value`. x509-cert looks every type's name up in its whole OID
/// database (30,000 instructions a connection for a CN and an O): the nine types RFC 4514
/// names, with a string value, are written here, escaped as x509-cert escapes them; any other
/// attribute as x509-cert writes it.
fn write_attribute(out: &mut String, attribute: &AttributeTypeAndValue) {
    let key = SHORT_NAMES
        .iter()
        .find(|(oid, _)| *oid == attribute.oid)
        .map(|(_, key)| *key);
    let value = &attribute.value;
    let text = match value.tag() {
        Tag::PrintableString => PrintableStringRef::try_from(value).ok().map(|s| s.as_str()),
        Tag::Utf8String => Utf8StringRef::try_from(value).ok().map(|s| s.as_str()),
        Tag::Ia5String => Ia5StringRef::try_from(value).ok().map(|s| s.as_str()),
        _ => None,
    };
    let (Some(key), Some(text)) = (key, text) else {
        let _ = write!(out, "{attribute}");
        return;
    };
    out.push_str(key);
    out.push('=');
    // RFC 4514 2.4: the seven specials anywhere, `#` first and a space first or last, with a
    // backslash; control characters as a backslash and two hex digits.
    for (at, c) in text.char_indices() {
        let at_edge = at == 0 || at + 1 == text.len();
        if "\"+,;<>\\".contains(c) || (c == '#' && at == 0) || (c == ' ' && at_edge) {
            out.push('\\');
            out.push(c);
        } else if c.is_ascii_control() {
            let _ = write!(out, "\\{:02x}", c as u8);
        } else {
            out.push(c);
        }
    }
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
    fn names_are_written_as_x509_cert_writes_them() {
        let der = CertificateDer::from_pem_slice(CERT.as_bytes()).unwrap();
        let cert = x509_cert::Certificate::from_der(&der).unwrap();
        assert_eq!(
            subject_name(&der).unwrap(),
            cert.tbs_certificate.subject.to_string()
        );
        // Values that need escaping, in a type RFC 4514 names and in one it does not.
        for text in ["#lead", " both ", "a\"q\\b;<c>", "tab\there", "plain"] {
            for oid in [
                rfc4519::CN,
                rfc4519::DC,
                ObjectIdentifier::new_unwrap("2.5.4.97"),
            ] {
                let value = x509_cert::der::asn1::Any::new(Tag::Utf8String, text.as_bytes());
                let attribute = AttributeTypeAndValue {
                    oid,
                    value: value.unwrap(),
                };
                let mut ours = String::new();
                write_attribute(&mut ours, &attribute);
                assert_eq!(ours, attribute.to_string(), "{text:?}");
            }
        }
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
