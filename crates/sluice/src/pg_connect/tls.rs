//! The rustls side of libpq's `sslmode`: the client configuration, the trusted roots, the
//! client certificate and key, and the verifiers tokio-postgres cannot express (accept any
//! certificate, chain only).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::url::{ConfigError, RootCert, TlsSettings, Verify};

/// The crypto provider: the binary's one (src/crypto.rs).
fn provider() -> Arc<CryptoProvider> {
    crate::crypto::provider()
}

/// The rustls client configuration for these settings.
///
/// # Errors
///
/// Unreadable or invalid certificate and key files, with the key and the fix.
pub fn rustls_config(tls: &TlsSettings) -> Result<ClientConfig, ConfigError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError(format!("TLS setup failed: {e}")))?;
    let verify = tls.verify();
    let verifier: Arc<dyn ServerCertVerifier> = if verify == Verify::Nothing {
        Arc::new(AcceptAnyCert(provider.clone()))
    } else {
        let roots = Arc::new(root_store(tls)?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| ConfigError(format!("sslrootcert holds no usable CA: {e}")))?;
        if verify == Verify::Chain {
            Arc::new(ChainOnly(webpki))
        } else {
            webpki
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert, "sslcert")?;
            check_key_permissions(key)?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                ConfigError(format!(
                    "sslkey {} cannot be read as a PEM private key ({e}): give the client \
                     certificate's key file",
                    key.display()
                ))
            })?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                ConfigError(format!(
                    "sslcert {} and sslkey {} do not make a client identity ({e})",
                    cert.display(),
                    key.display()
                ))
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    config.enable_sni = tls.sni;
    Ok(config)
}

fn root_store(tls: &TlsSettings) -> Result<RootCertStore, ConfigError> {
    let mut store = RootCertStore::empty();
    match &tls.root_cert {
        Some(RootCert::System) => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ignored = store.add(cert);
            }
            if store.is_empty() {
                return Err(ConfigError(
                    "sslrootcert=system but the system's trust store is empty: install the CA \
                     certificates (ca-certificates) or give sslrootcert=<file>"
                        .into(),
                ));
            }
        }
        Some(RootCert::File(path)) => {
            for cert in read_certs(path, "sslrootcert")? {
                store.add(cert).map_err(|e| {
                    ConfigError(format!(
                        "sslrootcert {} holds a certificate that is not a usable CA ({e})",
                        path.display()
                    ))
                })?;
            }
        }
        None => {
            let default =
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".postgresql/root.crt"));
            match default.filter(|p| p.exists()) {
                Some(path) => {
                    for cert in read_certs(&path, "sslrootcert")? {
                        let _ignored = store.add(cert);
                    }
                }
                None => {
                    return Err(ConfigError(format!(
                        "sslmode={} needs a root certificate but sslrootcert is not set (and \
                         ~/.postgresql/root.crt does not exist): set sslrootcert=<CA file> or \
                         sslrootcert=system, or use sslmode=require to skip verification",
                        tls.mode.as_str()
                    )));
                }
            }
        }
    }
    Ok(store)
}

fn read_certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            ConfigError(format!(
                "{key} {} cannot be read as PEM certificates ({e}): give a readable PEM file",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(ConfigError(format!(
            "{key} {} holds no certificate: give a PEM file with BEGIN CERTIFICATE blocks",
            path.display()
        )));
    }
    Ok(certs)
}

/// libpq refuses a private key others can read: owned by us, mode 0600 or less; owned by root,
/// 0640 or less.
fn check_key_permissions(path: &Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| {
        ConfigError(format!(
            "sslkey {} cannot be read ({e}): give the client certificate's key file",
            path.display()
        ))
    })?;
    let mode = meta.mode() & 0o777;
    let allowed = if meta.uid() == 0 { 0o640 } else { 0o600 };
    if mode & !allowed != 0 {
        return Err(ConfigError(format!(
            "sslkey {} has permissions {mode:04o}: the private key must not be readable by \
             others (u=rw (0600) or less if owned by you, u=rw,g=r (0640) or less if owned by \
             root); run chmod 600 {}",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

/// `require` without a root certificate: encrypted, not authenticated (as libpq). Signatures
/// are still checked so the handshake proves possession of the certificate's key.
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the host name is not checked. webpki
/// checks the chain before the name, so a name error means the chain was good.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

// --- tokio-postgres adapter -----------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg_connect::url::SslMode;

    #[test]
    fn loose_key_permissions_are_refused_as_libpq() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sluice-key-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("client.key");
        std::fs::write(&key, "not a key").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = check_key_permissions(&key).unwrap_err();
        assert!(e.0.contains("0644") && e.0.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_key_permissions(&key).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn verification_without_a_root_certificate_is_refused_with_the_way_out() {
        let tls = TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: Some(RootCert::File(PathBuf::from("/nonexistent/ca.pem"))),
            cert: None,
            key: None,
            sni: true,
        };
        let e = rustls_config(&tls).unwrap_err();
        assert!(e.0.contains("sslrootcert /nonexistent/ca.pem"), "{e}");
    }
}
