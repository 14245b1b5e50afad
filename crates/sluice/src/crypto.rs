//! The binary's one TLS crypto provider: ring.
//!
//! The Parquet writer already builds ring in (`parquet`'s encryption, which the iceberg crate
//! asks for), so every TLS connection uses it too: PostgreSQL's, MySQL's, the admin server's
//! and the HTTP clients' (the schema registry, the Iceberg REST catalog, S3). One provider
//! instead of two keeps aws-lc out of the binary and out of every cold build.

use std::sync::{Arc, Once};

use rustls::crypto::CryptoProvider;

/// The provider, for the rustls configurations sluice builds itself.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes ring the process's default provider, once; a provider installed before stays.
/// reqwest is built without one of its own (`rustls-no-provider`) and panics when a client is
/// built with no default: call this before building one (object_store's S3 client included).
pub fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The rustls error in `error`'s chain, also where an `io::Error` wraps it (which `source()`
/// skips): a refused certificate, a handshake that failed.
pub fn find_rustls_error<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(found) = io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(found);
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_client_builds_once_the_provider_is_installed() {
        install();
        assert!(CryptoProvider::get_default().is_some());
        reqwest::Client::builder()
            .build()
            .expect("a client over rustls with ring");
    }
}
