//! Operations: metrics, health endpoints, leader election, shutdown.
