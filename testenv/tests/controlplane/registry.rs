//! The loopback OCI registry: starts, answers `GET /v2/`, and is gone after
//! `stop` (what a "registry is down" test relies on). Skips like the
//! control-plane tests when the binary is not built, unless
//! `TRAINFORGE_TESTENV_REQUIRED=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use trainforge_testenv::paths::Paths;
use trainforge_testenv::{Error, Registry};

/// `GET /v2/` over HTTP/1.0: the whole response.
fn get_v2(addr: &str) -> String {
    let sock: SocketAddr = addr.parse().unwrap();
    let mut s = TcpStream::connect_timeout(&sock, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET /v2/ HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    response
}

#[tokio::test]
async fn registry_serves_v2_and_stops() {
    let logs =
        std::env::temp_dir().join(format!("trainforge-registry-test-{}", std::process::id()));
    std::fs::create_dir_all(&logs).unwrap();
    let mut registry = match Registry::start(&Paths::from_env(), &logs, None).await {
        Ok(r) => r,
        Err(e @ Error::NotBuilt { .. }) if !trainforge_testenv::required() => {
            // The line require! prints for the control-plane tests.
            common::report(&format!(
                "trainforge-testenv: SKIPPING control-plane test: {e}. Run `make controlplane` to build it; \
                 set TRAINFORGE_TESTENV_REQUIRED=1 to make this a failure."
            ));
            let _ = std::fs::remove_dir_all(&logs);
            return;
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&logs);
            panic!("starting the registry: {e}")
        }
    };
    let addr = registry.addr().to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    assert_eq!(registry.url(), format!("http://{addr}"));

    let response = get_v2(&addr);
    let status = response.lines().next().unwrap_or_default();
    assert!(
        status.starts_with("HTTP/1.") && status.contains(" 200 "),
        "GET /v2/: {response}"
    );
    assert!(
        response
            .to_ascii_lowercase()
            .contains("docker-distribution-api-version: registry/2.0"),
        "GET /v2/: {response}"
    );

    registry.stop();
    assert!(!registry.is_running());
    let sock: SocketAddr = addr.parse().unwrap();
    let after = TcpStream::connect_timeout(&sock, Duration::from_secs(2));
    assert!(
        after.is_err(),
        "{addr} still accepts connections after stop"
    );
    let log = std::fs::read_to_string(registry.log()).unwrap();
    assert!(log.contains("GET /v2/"), "request not logged:\n{log}");
    drop(registry);
    let _ = std::fs::remove_dir_all(&logs);
}
