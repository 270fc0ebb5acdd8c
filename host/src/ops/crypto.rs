//! The process's TLS crypto: rustls with the `ring` provider, for every
//! client and server the operator runs (API client, plugin fetches, OCI
//! registries, the admission listener).

use std::sync::Once;

/// Install rustls' ring provider as the process default (once; a provider
/// installed earlier by someone else is kept).
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
    });
}
