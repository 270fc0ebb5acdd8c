//! The operator's API requests, counted from kube-apiserver's audit log
//! (one JSON `audit.k8s.io/v1` Event per request, written when its response
//! completed; the policy records only the operator's user).

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// Verbs that change objects.
const WRITES: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

/// One request: when it was received, its verb and resource
/// (`resource` or `resource/subresource`).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `requestReceivedTimestamp`.
    pub at: Timestamp,
    /// `verb` (`get`, `list`, `watch`, `create`, `patch`, …).
    pub verb: String,
    /// `objectRef.resource[/subresource]`, or the request URI for
    /// non-resource requests (`/readyz`, discovery).
    pub resource: String,
}

/// The requests of `user` in the log at `path` (lines that are not audit
/// Events are skipped).
pub fn read(path: &Path, user: &str) -> std::io::Result<Vec<Request>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text.lines().filter_map(|l| parse(l, user)).collect())
}

fn parse(line: &str, user: &str) -> Option<Request> {
    let v: Value = serde_json::from_str(line).ok()?;
    if v.pointer("/user/username").and_then(Value::as_str) != Some(user) {
        return None;
    }
    let at = v
        .get("requestReceivedTimestamp")
        .and_then(Value::as_str)?
        .parse()
        .ok()?;
    let verb = v.get("verb").and_then(Value::as_str)?.to_owned();
    let resource = match v.pointer("/objectRef/resource").and_then(Value::as_str) {
        Some(r) => match v.pointer("/objectRef/subresource").and_then(Value::as_str) {
            Some(s) => format!("{r}/{s}"),
            None => r.to_owned(),
        },
        None => v
            .get("requestURI")
            .and_then(Value::as_str)
            .map(|u| u.split('?').next().unwrap_or(u).to_owned())
            .unwrap_or_default(),
    };
    Some(Request { at, verb, resource })
}

/// Requests received in `[from, to)`, counted by verb and by
/// `verb resource`.
#[derive(Debug, Default)]
pub struct Counts {
    /// Requests by verb.
    pub by_verb: BTreeMap<String, u64>,
    /// Requests by `verb resource`.
    pub by_verb_resource: BTreeMap<String, u64>,
}

impl Counts {
    /// Count the requests of `all` received in `[from, to)`.
    pub fn of(all: &[Request], from: Timestamp, to: Timestamp) -> Counts {
        let mut c = Counts::default();
        for r in all.iter().filter(|r| r.at >= from && r.at < to) {
            *c.by_verb.entry(r.verb.clone()).or_default() += 1;
            *c.by_verb_resource
                .entry(format!("{} {}", r.verb, r.resource))
                .or_default() += 1;
        }
        c
    }

    /// All writes.
    pub fn writes(&self) -> u64 {
        self.by_verb
            .iter()
            .filter(|(v, _)| WRITES.contains(&v.as_str()))
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests of one verb.
    pub fn verb(&self, verb: &str) -> u64 {
        self.by_verb.get(verb).copied().unwrap_or(0)
    }

    /// `verb resource=n` for every pair, writes first, most frequent first.
    pub fn breakdown(&self) -> String {
        let mut rows: Vec<(&String, &u64)> = self.by_verb_resource.iter().collect();
        rows.sort_by(|a, b| {
            let write = |k: &str| !WRITES.iter().any(|w| k.starts_with(&format!("{w} ")));
            (write(a.0), std::cmp::Reverse(a.1)).cmp(&(write(b.0), std::cmp::Reverse(b.1)))
        });
        rows.iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = "system:serviceaccount:trainforge-system:trainforge-operator";

    fn line(user: &str, at: &str, verb: &str, resource: &str, sub: Option<&str>) -> String {
        let mut object = serde_json::json!({"resource": resource, "namespace": "ns"});
        if let Some(s) = sub {
            object["subresource"] = s.into();
        }
        serde_json::json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "stage": "ResponseComplete",
            "requestURI": format!("/apis/x/{resource}?watch=true"), "verb": verb,
            "user": {"username": user}, "objectRef": object,
            "requestReceivedTimestamp": at,
        })
        .to_string()
    }

    #[test]
    fn counts_only_the_user_in_the_window_by_verb_and_resource() {
        let log = [
            line(
                USER,
                "2026-01-01T00:00:01.000000Z",
                "patch",
                "jobsets",
                None,
            ),
            line(
                USER,
                "2026-01-01T00:00:02.000000Z",
                "patch",
                "trainjobs",
                Some("status"),
            ),
            line(
                USER,
                "2026-01-01T00:00:02.500000Z",
                "get",
                "configmaps",
                None,
            ),
            line(
                "admin",
                "2026-01-01T00:00:02.000000Z",
                "create",
                "trainjobs",
                None,
            ),
            line(
                USER,
                "2026-01-01T00:00:09.000000Z",
                "create",
                "events",
                None,
            ),
            "not json".to_owned(),
        ]
        .join("\n");
        let dir = std::env::temp_dir().join(format!("bench-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        std::fs::write(&path, log).unwrap();
        let all = read(&path, USER).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(all.len(), 4);
        let c = Counts::of(
            &all,
            "2026-01-01T00:00:00Z".parse().unwrap(),
            "2026-01-01T00:00:05Z".parse().unwrap(),
        );
        assert_eq!(c.writes(), 2);
        assert_eq!(c.verb("get"), 1);
        assert_eq!(c.verb("create"), 0, "outside the window or another user");
        assert_eq!(
            c.breakdown(),
            "patch jobsets=1, patch trainjobs/status=1, get configmaps=1"
        );
    }
}
