//! TLS for a server without an ingress in front: a certificate chain and its key from PEM
//! files, served with rustls and its ring provider (TLS 1.2 and 1.3, HTTP/1.1 by ALPN).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// A server's TLS identity, ready to accept connections.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls { .. }")
    }
}

impl Tls {
    /// Reads the certificate chain (PEM, leaf first) and the private key (PEM: PKCS#8, PKCS#1
    /// or SEC1).
    ///
    /// # Errors
    /// Which file could not be read or used, and why.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Tls, String> {
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("{}: not a PEM certificate chain: {e}", cert.display()))?;
        if chain.is_empty() {
            return Err(format!("{}: holds no certificate", cert.display()));
        }
        let key_der = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| format!("{}: not a PEM private key: {e}", key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_single_cert(chain, key_der)
            .map_err(|e| {
                format!(
                    "{} and {}: the key does not fit the certificate: {e}",
                    cert.display(),
                    key.display()
                )
            })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }
}
