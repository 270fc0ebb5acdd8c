//! Which addresses an `https://` plugin source may reach, so that a
//! `ClusterTrainerPlugin` (or a tenant's `TrainerPlugin`, where the ceiling
//! allows https) cannot be used to probe the cluster's network or a cloud
//! metadata endpoint.
//!
//! Refused unless the operator allows them (`--plugin-fetch-allow-cidr`):
//! loopback, link-local (`169.254.0.0/16`, the cloud metadata address
//! included; `fe80::/10`), private (`10/8`, `172.16/12`, `192.168/16`,
//! `fc00::/7`), shared (`100.64/10`), unspecified, broadcast, multicast and
//! reserved addresses, and IPv6 forms of them (IPv4-mapped and -compatible,
//! NAT64 `64:ff9b::/96`, 6to4 `2002::/16`).
//!
//! Every way in is checked: a literal address in the URL before any
//! connection, every address a name resolves to (the resolver drops the
//! refused ones; a name with none left is refused), and every redirect
//! target (at most [`MAX_REDIRECTS`], never a loop, https only).
//! Clients that resolve on their own are given [`NetGuard::connect`]
//! instead (the OCI client, through `crate::oci::proxy`): it resolves a
//! name once and connects only to addresses it checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use ipnet::IpNet;

/// Redirects followed at most.
pub const MAX_REDIRECTS: usize = 5;

/// An address or name refused by the guard (found in a fetch error's
/// source chain to tell it from other network failures).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Why [`NetGuard::connect`] did not connect.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The guard refused the address (or every address of the name).
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The name did not resolve, or no allowed address answered in time.
    #[error("{target}: {message}")]
    Unreachable {
        /// `host:port` as asked for.
        target: String,
        /// What happened.
        message: String,
    },
}

/// The addresses https sources may reach: everything public, plus the
/// networks the operator allows.
#[derive(Debug, Clone, Default)]
pub struct NetGuard {
    allowed: Arc<Vec<IpNet>>,
}

impl NetGuard {
    /// A guard that also allows `allowed` (e.g. an in-cluster registry's
    /// network).
    pub fn new(allowed: Vec<IpNet>) -> Self {
        NetGuard {
            allowed: Arc::new(allowed),
        }
    }

    /// Whether `ip` may be reached; why not otherwise.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refused> {
        if self.allowed.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        match special(ip) {
            None => Ok(()),
            Some(what) => Err(Refused(format!(
                "{ip} is a {what} address, which plugin sources may not reach (allow it with --plugin-fetch-allow-cidr)"
            ))),
        }
    }

    /// Check the host of `url` when it is a literal address.
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), Refused> {
        let host = url.host_str().unwrap_or_default();
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        match literal.parse::<IpAddr>() {
            Ok(ip) => self.check(ip),
            // A name: checked when it is resolved.
            Err(_) => Ok(()),
        }
    }

    /// Check `host` (`name[:port]` or a literal address): every address a
    /// name resolves to must be allowed (used before a client that does
    /// not resolve through the guard, such as the OCI registry client).
    pub async fn check_host(&self, host: &str) -> Result<(), Refused> {
        let bare = match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':') => h,
            _ => host,
        };
        let literal = bare.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return self.check(ip);
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((literal, 0))
            .await
            .map_err(|e| Refused(format!("resolving {literal}: {e}")))?
            .collect();
        if addrs.is_empty() {
            return Err(Refused(format!("{literal} resolves to no address")));
        }
        for a in addrs {
            self.check(a.ip())
                .map_err(|e| Refused(format!("{literal} resolves to {}", e.0)))?;
        }
        Ok(())
    }

    /// Connect to `host:port`. A literal address is checked; a name is
    /// resolved once, its refused addresses dropped (none left: refused),
    /// and the allowed ones tried in order, each within `timeout`. The
    /// connection is to an address that was checked: a second lookup
    /// (DNS rebinding) has no say.
    pub async fn connect(
        &self,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<TcpStream, ConnectError> {
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        let target = format!("{host}:{port}");
        let unreachable = |message: String| ConnectError::Unreachable {
            target: target.clone(),
            message,
        };
        let addrs: Vec<SocketAddr> = match literal.parse::<IpAddr>() {
            Ok(ip) => {
                self.check(ip)?;
                vec![SocketAddr::new(ip, port)]
            }
            Err(_) => {
                let resolved: Vec<SocketAddr> =
                    tokio::time::timeout(timeout, tokio::net::lookup_host((literal, port)))
                        .await
                        .map_err(|_| unreachable("resolving timed out".to_owned()))?
                        .map_err(|e| unreachable(format!("resolving: {e}")))?
                        .collect();
                let first = resolved.first().copied();
                let allowed: Vec<SocketAddr> = resolved
                    .into_iter()
                    .filter(|a| self.check(a.ip()).is_ok())
                    .collect();
                if allowed.is_empty() {
                    let why = match first.map(|a| self.check(a.ip())) {
                        Some(Err(e)) => e.0,
                        _ => "no address".to_owned(),
                    };
                    return Err(Refused(format!("{literal} resolves to {why}")).into());
                }
                allowed
            }
        };
        let mut last = String::from("no address");
        for addr in addrs {
            match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: no answer within {}s", timeout.as_secs()),
            }
        }
        Err(unreachable(last))
    }

    /// The redirect policy: https only, at most [`MAX_REDIRECTS`], no loop,
    /// literal addresses checked (names are checked when resolved).
    pub fn redirect_policy(&self) -> reqwest::redirect::Policy {
        let guard = self.clone();
        reqwest::redirect::Policy::custom(move |attempt| {
            let next = attempt.url().clone();
            if attempt.previous().contains(&next) {
                let e = Refused(format!("redirect loop at {next}"));
                return attempt.error(e);
            }
            if attempt.previous().len() > MAX_REDIRECTS {
                let e = Refused(format!("more than {MAX_REDIRECTS} redirects"));
                return attempt.error(e);
            }
            if next.scheme() != "https" {
                let e = Refused(format!("redirect to {next}: https only"));
                return attempt.error(e);
            }
            match guard.check_url(&next) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        })
    }
}

/// The resolver: the system's, with refused addresses dropped.
impl reqwest::dns::Resolve for NetGuard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (ok, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
                addrs.into_iter().partition(|a| guard.check(a.ip()).is_ok());
            if ok.is_empty() {
                let why = refused
                    .first()
                    .and_then(|a| guard.check(a.ip()).err())
                    .map_or_else(|| "no address".to_owned(), |e| e.0);
                let e: Box<dyn std::error::Error + Send + Sync> =
                    Box::new(Refused(format!("{host} resolves to {why}")));
                return Err(e);
            }
            let it: reqwest::dns::Addrs = Box::new(ok.into_iter());
            Ok(it)
        })
    }
}

/// What kind of special-purpose address `ip` is (`None`: a public one).
fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_private() {
        Some("private")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (carrier-grade NAT)")
    } else if ip.is_unspecified() || a == 0 {
        Some("unspecified")
    } else if ip.is_broadcast() {
        Some("broadcast")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if a >= 240 {
        Some("reserved")
    } else if a == 192 && b == 0 && ip.octets()[2] == 0 {
        Some("IETF protocol")
    } else if a == 198 && (b == 18 || b == 19) {
        Some("benchmarking")
    } else {
        None
    }
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return special_v4(v4);
    }
    let seg = ip.segments();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if (seg[0] & 0xffc0) == 0xfe80 {
        Some("link-local")
    } else if (seg[0] & 0xfe00) == 0xfc00 {
        Some("private (unique local)")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if seg[..6] == [0, 0, 0, 0, 0, 0] {
        // IPv4-compatible (deprecated): judge the embedded address.
        special_v4(Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            seg[6] as u8,
            (seg[7] >> 8) as u8,
            seg[7] as u8,
        ))
        .or(Some("IPv4-compatible"))
    } else if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
        // NAT64: judge the embedded IPv4 address.
        special_v4(Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            seg[6] as u8,
            (seg[7] >> 8) as u8,
            seg[7] as u8,
        ))
    } else if seg[0] == 0x2002 {
        special_v4(Ipv4Addr::new(
            (seg[1] >> 8) as u8,
            seg[1] as u8,
            (seg[2] >> 8) as u8,
            seg[2] as u8,
        ))
    } else if seg[0] == 0x2001 && seg[1] == 0x0db8 {
        Some("documentation")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn special_addresses_are_refused_public_ones_not() {
        let g = NetGuard::default();
        for refused in [
            "127.0.0.1",
            "127.8.9.10",
            "169.254.169.254",
            "10.0.0.1",
            "172.16.5.4",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "ff02::1",
        ] {
            let ip: IpAddr = refused.parse().unwrap();
            let e = g.check(ip).unwrap_err();
            assert!(e.0.starts_with(&ip.to_string()), "{e}");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(g.check(public.parse().unwrap()).is_ok(), "{public}");
        }
    }

    #[test]
    fn allowed_networks_pass() {
        let g = NetGuard::new(vec![
            "10.96.0.0/12".parse().unwrap(),
            "127.0.0.1/32".parse().unwrap(),
        ]);
        assert!(g.check("10.96.4.2".parse().unwrap()).is_ok());
        assert!(g.check("127.0.0.1".parse().unwrap()).is_ok());
        assert!(g.check("127.0.0.2".parse().unwrap()).is_err());
        assert!(g.check("169.254.169.254".parse().unwrap()).is_err());
    }

    #[test]
    fn literal_hosts_in_urls() {
        let g = NetGuard::default();
        let url = |s: &str| reqwest::Url::parse(s).unwrap();
        assert!(
            g.check_url(&url("https://169.254.169.254/latest/meta-data"))
                .is_err()
        );
        assert!(g.check_url(&url("https://[::1]:8443/p.wasm")).is_err());
        assert!(g.check_url(&url("https://[::ffff:a9fe:a9fe]/")).is_err());
        assert!(g.check_url(&url("https://example.com/p.wasm")).is_ok());
    }
}
