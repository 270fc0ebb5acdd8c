//! Why the demo is stuck or failed, from what the cluster and the operator
//! say: the TrainJob's conditions, the Warning Events about it (and its
//! JobSet, which has its name), the ClusterTrainerPlugins that are not ready,
//! the operator's `/readyz?verbose` body and its WARN/ERROR log lines.
//!
//! Each source is read with a short bound and reported as unavailable when it
//! does not answer: a diagnosis never hangs and never hides the others.

#[allow(clippy::wildcard_imports)]
use super::*;
use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;

use super::live_view::trainjob_resource;

/// How long one source may take.
const SOURCE_TIMEOUT: Duration = Duration::from_secs(5);

/// WARN/ERROR lines of the operator log shown at most.
const LOG_LINES: usize = 20;

/// Last lines of the operator log shown when it has no WARN/ERROR line.
const QUIET_LOG_LINES: usize = 5;

/// Warning Events shown at most (the most recent).
const EVENTS: usize = 10;

/// The diagnosis as `demo: ` lines (no trailing newline). `job` is the
/// TrainJob as `(namespace, name)` when there is one.
pub(crate) async fn diagnose(
    client: &kube::Client,
    op: &Operator,
    job: Option<(&str, &str)>,
) -> String {
    let mut out = Vec::new();
    if let Some((ns, name)) = job {
        out.push(format!("conditions of TrainJob {ns}/{name}:"));
        out.extend(indent(trainjob_conditions(client, ns, name).await));
        out.push(format!("Warning Events about {ns}/{name}:"));
        out.extend(indent(warning_events(client, ns, name).await));
    }
    out.push("ClusterTrainerPlugins not Ready:".to_owned());
    out.extend(indent(plugins_not_ready(client).await));
    out.push(format!("operator http://{}/readyz?verbose:", op.addr));
    out.extend(indent(readyz_verbose(&op.addr).await));
    let log = std::fs::read_to_string(&op.log);
    match &log {
        Ok(text) => {
            let mut lines = warn_error_lines(text, LOG_LINES);
            let what = if lines.is_empty() {
                // What it was doing instead.
                lines = last_lines(text, QUIET_LOG_LINES);
                format!("no WARN or ERROR lines; its last {}:", lines.len())
            } else {
                format!("last {} WARN/ERROR lines:", lines.len())
            };
            out.push(format!("operator log {}: {what}", op.log.display()));
            out.extend(indent(lines));
        }
        Err(e) => out.push(format!(
            "operator log {}: cannot read: {e}",
            op.log.display()
        )),
    }
    out.iter()
        .map(|l| format!("demo: {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn indent(lines: Vec<String>) -> impl Iterator<Item = String> {
    lines.into_iter().map(|l| format!("  {l}"))
}

/// `f` with [`SOURCE_TIMEOUT`]; a timeout is an error line.
async fn bounded<F>(what: &str, f: F) -> Result<F::Output, String>
where
    F: std::future::Future,
{
    tokio::time::timeout(SOURCE_TIMEOUT, f)
        .await
        .map_err(|_| format!("({what}: no answer within {}s)", SOURCE_TIMEOUT.as_secs()))
}

async fn trainjob_conditions(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &trainjob_resource());
    match bounded("reading the TrainJob", api.get_opt(name)).await {
        Err(e) => vec![e],
        Ok(Err(e)) => vec![format!("(reading the TrainJob: {e})")],
        Ok(Ok(None)) => vec!["(the TrainJob does not exist)".to_owned()],
        Ok(Ok(Some(tj))) => condition_lines(&serde_json::to_value(&tj).unwrap_or_default()),
    }
}

/// One line per condition of `obj`: `Type=Status reason: message`, or
/// `(none)`.
pub(crate) fn condition_lines(obj: &Value) -> Vec<String> {
    let conditions = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if conditions.is_empty() {
        return vec!["(no conditions yet)".to_owned()];
    }
    let field = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    conditions
        .iter()
        .map(|c| {
            let mut line = format!("{}={}", field(c, "type"), field(c, "status"));
            for (label, key) in [("", "reason"), (": ", "message")] {
                let v = field(c, key);
                if !v.is_empty() {
                    line.push_str(if label.is_empty() { " " } else { label });
                    line.push_str(&v);
                }
            }
            line
        })
        .collect()
}

async fn warning_events(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let api = Api::<Event>::namespaced(client.clone(), ns);
    let lp = ListParams::default().fields(&format!("involvedObject.name={name},type=Warning"));
    match bounded("listing Events", api.list(&lp)).await {
        Err(e) => vec![e],
        Ok(Err(e)) => vec![format!("(listing Events: {e})")],
        Ok(Ok(list)) => event_lines(&list.items, EVENTS),
    }
}

/// The last `max` Warning Events, oldest first: `Kind/name reason (xN):
/// message`, or `(none)`.
pub(crate) fn event_lines(events: &[Event], max: usize) -> Vec<String> {
    let mut events: Vec<&Event> = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect();
    if events.is_empty() {
        return vec!["(none)".to_owned()];
    }
    // Most recent last: by last time seen, of whichever kind the event has.
    let seen = |e: &Event| {
        e.series
            .as_ref()
            .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
            .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
            .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    };
    events.sort_by_key(|e| seen(e));
    let skip = events.len().saturating_sub(max);
    events[skip..]
        .iter()
        .map(|e| {
            let count = e
                .series
                .as_ref()
                .and_then(|s| s.count)
                .or(e.count)
                .unwrap_or(1);
            format!(
                "{}/{} {}{}: {}",
                e.involved_object.kind.as_deref().unwrap_or("?"),
                e.involved_object.name.as_deref().unwrap_or("?"),
                e.reason.as_deref().unwrap_or("?"),
                if count > 1 {
                    format!(" (x{count})")
                } else {
                    String::new()
                },
                e.message.as_deref().unwrap_or("").trim()
            )
        })
        .collect()
}

/// The ClusterTrainerPlugin resource.
fn plugin_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trainforge.dev", "v1alpha1", "ClusterTrainerPlugin"),
        "clustertrainerplugins",
    )
}

async fn plugins_not_ready(client: &kube::Client) -> Vec<String> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &plugin_resource());
    let list = match bounded(
        "listing ClusterTrainerPlugins",
        api.list(&ListParams::default()),
    )
    .await
    {
        Err(e) => return vec![e],
        Ok(Err(e)) => return vec![format!("(listing ClusterTrainerPlugins: {e})")],
        Ok(Ok(list)) => list,
    };
    if list.items.is_empty() {
        return vec!["(there are none: no plugin is configured)".to_owned()];
    }
    let mut out = Vec::new();
    for p in &list.items {
        let name = p.metadata.name.as_deref().unwrap_or("?");
        let unhealthy = unhealthy_plugin_conditions(&serde_json::to_value(p).unwrap_or_default());
        out.extend(unhealthy.into_iter().map(|l| format!("{name}: {l}")));
    }
    if out.is_empty() {
        out.push(format!("(none: all {} are Ready)", list.items.len()));
    }
    out
}

/// The conditions of a ClusterTrainerPlugin that say something is wrong:
/// `Degraded=True`, any other type not `True`, or no conditions at all.
pub(crate) fn unhealthy_plugin_conditions(plugin: &Value) -> Vec<String> {
    let conditions = plugin
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if conditions.is_empty() {
        return vec!["(no conditions yet: the operator has not processed it)".to_owned()];
    }
    let wrong: Vec<Value> = conditions
        .into_iter()
        .filter(|c| {
            let status = c.get("status").and_then(Value::as_str);
            match c.get("type").and_then(Value::as_str) {
                Some("Degraded") => status == Some("True"),
                _ => status != Some("True"),
            }
        })
        .collect();
    if wrong.is_empty() {
        return Vec::new();
    }
    condition_lines(&serde_json::json!({"status": {"conditions": wrong}}))
}

async fn readyz_verbose(addr: &str) -> Vec<String> {
    match http_get(addr, "/readyz?verbose").await {
        None => vec!["(no answer)".to_owned()],
        Some((status, body)) => {
            let mut lines = vec![format!("HTTP {status}")];
            lines.extend(body.lines().map(str::to_owned));
            lines
        }
    }
}

/// The last `n` lines of a log at WARN or ERROR level: tracing's text lines
/// (`<time>  WARN <target>: …`, ANSI colours or not) and JSON lines
/// (`"level":"WARN"`).
pub(crate) fn warn_error_lines(log: &str, n: usize) -> Vec<String> {
    let lines: Vec<String> = log
        .lines()
        .map(strip_ansi)
        .filter(|l| {
            let text_level = l
                .split_whitespace()
                .take(3)
                .any(|w| w == "WARN" || w == "ERROR");
            text_level || l.contains(r#""level":"WARN""#) || l.contains(r#""level":"ERROR""#)
        })
        .collect();
    let skip = lines.len().saturating_sub(n);
    lines.into_iter().skip(skip).collect()
}

/// The last `n` lines of `log`, without ANSI escape sequences.
fn last_lines(log: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = log.lines().collect();
    let skip = lines.len().saturating_sub(n);
    lines[skip..].iter().map(|l| strip_ansi(l)).collect()
}

/// `line` without ANSI escape sequences (`ESC [ … letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Status and body of `GET http://addr/path` (plain HTTP/1.0, the body cut
/// at 64 KiB), `None` if unreachable within 2 s.
pub(crate) async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        (&mut s).take(64 * 1024).read_to_end(&mut buf).await.ok()?;
        parse_response(&buf)
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .ok()
        .flatten()
}

/// Status code and body of an HTTP/1.x response.
pub(crate) fn parse_response(bytes: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(bytes);
    // "HTTP/1.1 200 OK"
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.trim_end().to_owned())
        .unwrap_or_default();
    Some((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    #[test]
    fn warn_and_error_lines_of_text_and_json_logs_only_the_last_n() {
        let log = "\
2026-01-01T00:00:00.000001Z  INFO trainforge: serving /readyz
2026-01-01T00:00:00.000002Z  WARN trainforge::controller: no plugin set serves TrainJobs
2026-01-01T00:00:00.000003Z ERROR trainforge::controller: reconcile failed: no builtin plugin \"torch\"
\u{1b}[2m2026-01-01T00:00:00.000004Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m trainforge: coloured
{\"timestamp\":\"t\",\"level\":\"ERROR\",\"fields\":{\"message\":\"json error\"}}
{\"timestamp\":\"t\",\"level\":\"INFO\",\"fields\":{\"message\":\"WARN in a message is not a level\"}}
2026-01-01T00:00:00.000005Z  INFO trainforge: message mentions ERROR late in the line
";
        let all = warn_error_lines(log, 20);
        assert_eq!(all.len(), 4, "{all:#?}");
        assert!(all[0].contains("no plugin set serves TrainJobs"));
        assert!(all[1].contains("reconcile failed"));
        assert_eq!(
            all[2],
            "2026-01-01T00:00:00.000004Z  WARN trainforge: coloured"
        );
        assert!(all[3].contains("json error"));
        let last2 = warn_error_lines(log, 2);
        assert_eq!(last2, all[2..].to_vec());
    }

    #[test]
    fn conditions_are_listed_with_reason_and_message() {
        let tj = json!({"status": {"conditions": [
            {"type": "Created", "status": "True", "reason": "JobsCreationFailed",
             "message": "no plugin set serves TrainJobs"},
            {"type": "Complete", "status": "False"},
        ]}});
        assert_eq!(
            condition_lines(&tj),
            vec![
                "Created=True JobsCreationFailed: no plugin set serves TrainJobs",
                "Complete=False"
            ]
        );
        assert_eq!(
            condition_lines(&json!({"spec": {}})),
            vec!["(no conditions yet)"]
        );
    }

    fn event(kind: &str, reason: &str, type_: &str, secs: i64, count: Option<i32>) -> Event {
        Event {
            involved_object: ObjectReference {
                kind: Some(kind.into()),
                name: Some("demo".into()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(format!("{reason} happened")),
            type_: Some(type_.into()),
            count,
            last_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(secs).unwrap(),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn warning_events_most_recent_last_and_capped() {
        let events = vec![
            event("TrainJob", "Late", "Warning", 30, Some(3)),
            event("TrainJob", "Normal", "Normal", 40, None),
            event("JobSet", "Early", "Warning", 10, None),
            event("TrainJob", "Middle", "Warning", 20, Some(1)),
        ];
        assert_eq!(
            event_lines(&events, 10),
            vec![
                "JobSet/demo Early: Early happened",
                "TrainJob/demo Middle: Middle happened",
                "TrainJob/demo Late (x3): Late happened",
            ]
        );
        assert_eq!(
            event_lines(&events, 1),
            vec!["TrainJob/demo Late (x3): Late happened"]
        );
        assert_eq!(event_lines(&events[1..2], 10), vec!["(none)"]);
    }

    #[test]
    fn plugin_conditions_that_say_something_is_wrong() {
        let healthy = json!({"status": {"conditions": [
            {"type": "Fetched", "status": "True"},
            {"type": "Ready", "status": "True"},
            {"type": "Degraded", "status": "False", "reason": "AsExpected"},
        ]}});
        assert!(unhealthy_plugin_conditions(&healthy).is_empty());
        let broken = json!({"status": {"conditions": [
            {"type": "Fetched", "status": "False", "reason": "NotFound",
             "message": "no builtin plugin \"torch\" (builtins: )"},
            {"type": "Ready", "status": "False"},
            {"type": "Degraded", "status": "True", "reason": "FetchFailed"},
        ]}});
        assert_eq!(
            unhealthy_plugin_conditions(&broken),
            vec![
                "Fetched=False NotFound: no builtin plugin \"torch\" (builtins: )",
                "Ready=False",
                "Degraded=True FetchFailed",
            ]
        );
        assert_eq!(unhealthy_plugin_conditions(&json!({})).len(), 1);
    }

    #[test]
    fn http_response_status_and_body() {
        let r = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 30\r\n\r\n[-]plugins: no plugin set\nnot ready\n";
        assert_eq!(
            parse_response(r),
            Some((503, "[-]plugins: no plugin set\nnot ready".to_owned()))
        );
        assert_eq!(
            parse_response(b"HTTP/1.0 200 OK\r\n\r\nok"),
            Some((200, "ok".into()))
        );
        assert_eq!(parse_response(b"garbage"), None);
    }
}
