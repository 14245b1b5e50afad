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
