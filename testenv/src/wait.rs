//! Bounded waits: every wait in this crate has a deadline.

use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::Error;

/// Poll `f` every `every` until it returns `Some`, or fail after `timeout`.
/// `on_tick` runs before each poll and may abort the wait (e.g. when the
/// component being waited for has exited).
pub async fn poll_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut on_tick: impl FnMut() -> Result<(), Error>,
    mut f: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        on_tick()?;
        if let Ok(Some(v)) = tokio::time::timeout(every.max(Duration::from_secs(5)), f()).await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                after: timeout,
                log_tail: None,
            });
        }
        tokio::time::sleep(every).await;
    }
}

/// Plain-HTTP `GET http://127.0.0.1:<port><path>`: status code and body.
/// Blocking, with short socket timeouts; used for etcd and JobSet health.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// HTTPS `GET <path>` against a server whose certificate is signed by `ca_pem`
/// (kube-controller-manager, kube-scheduler health endpoints), anonymously.
pub async fn https_get(port: u16, path: &str, ca_pem: &str) -> Option<(u16, String)> {
    let url: http::Uri = format!("https://127.0.0.1:{port}").parse().ok()?;
    let mut config = kube::Config::new(url);
    config.root_cert = Some(vec![pem_to_der(ca_pem)?]);
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(3));
    let client = kube::Client::try_from(config).ok()?;
    let req = http::Request::get(path).body(Vec::new()).ok()?;
    match client.request_text(req).await {
        Ok(body) => Some((200, body)),
        Err(kube::Error::Api(s)) => Some((s.code, s.message)),
        Err(_) => None,
    }
}

/// Decode the first PEM block (base64 between the armour lines).
pub fn pem_to_der(pem: &str) -> Option<Vec<u8>> {
    let b64: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64_decode(&b64)
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = ALPHABET.iter().position(|a| *a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}
