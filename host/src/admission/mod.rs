//! Admission webhooks served by the operator over HTTPS.
//!
//! - [`certs`]: the webhook CA and serving certificate (self-managed in a
//!   Secret, or read from files), and the webhooks' `caBundle`.
//! - [`tls`]: the HTTPS listener whose certificate is replaced without a
//!   restart.

pub mod certs;
pub mod tls;
