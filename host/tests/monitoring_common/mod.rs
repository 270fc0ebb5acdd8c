//! The shipped monitoring's queries (`manifests/monitoring`: the Grafana
//! dashboard's panels and the PrometheusRule's alerts), parsed as PromQL,
//! and the operator families they read. Shared by the offline test (a
//! fresh registry's scrape) and the control-plane test (a running
//! operator's scrape).

#![allow(dead_code)]

use std::path::PathBuf;

use promql_parser::parser::{self, Expr};
use promql_parser::util::{ExprVisitor, walk_expr};
use serde_json::Value;

fn monitoring() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/monitoring")
}

/// The dashboard's JSON.
pub fn dashboard() -> Value {
    let text = std::fs::read_to_string(monitoring().join("grafana-dashboard.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The PrometheusRule, as JSON.
pub fn rules() -> Value {
    let text = std::fs::read_to_string(monitoring().join("prometheusrule.yaml")).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// Every query: (where it is, its PromQL with Grafana's variables given
/// values Prometheus accepts).
pub fn queries() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard()["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            out.push((
                format!("dashboard panel {}", panel["title"]),
                expr.replace("$__rate_interval", "5m"),
            ));
        }
    }
    for group in rules()["spec"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            out.push((
                format!("alert {}", rule["alert"]),
                rule["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    out
}

struct Names(Vec<String>);

impl ExprVisitor for Names {
    type Error = String;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
        let selector = match expr {
            Expr::VectorSelector(vs) => Some(vs),
            Expr::MatrixSelector(ms) => Some(&ms.vs),
            _ => None,
        };
        if let Some(name) = selector.and_then(|vs| vs.name.clone()) {
            self.0.push(name);
        }
        Ok(true)
    }
}

/// The series names `expr` selects, or why it is not PromQL.
pub fn series(expr: &str) -> Result<Vec<String>, String> {
    let ast = parser::parse(expr)?;
    let mut names = Names(Vec::new());
    walk_expr(&mut names, &ast)?;
    Ok(names.0)
}

/// The family a series belongs to, as `# TYPE` declares it (less a
/// counter's `_total`, a histogram's `_bucket`, `_count`, `_sum`).
pub fn family(series: &str) -> &str {
    ["_bucket", "_count", "_sum", "_total"]
        .iter()
        .find_map(|s| series.strip_suffix(s))
        .unwrap_or(series)
}

/// What is wrong with the queries against `scrape` (OpenMetrics text): a
/// query that is not PromQL, or a `trainforge_` series no family of the
/// scrape declares. Also returns how many `trainforge_` series were checked.
pub fn problems(scrape: &str) -> (Vec<String>, usize) {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (place, expr) in queries() {
        match series(&expr) {
            Err(e) => wrong.push(format!("{place}: not PromQL ({e}): {expr}")),
            Ok(names) => {
                for name in names.iter().filter(|n| n.starts_with("trainforge_")) {
                    checked += 1;
                    let declared = format!("# TYPE {} ", family(name));
                    if !scrape.contains(&declared) {
                        wrong.push(format!(
                            "{place} reads {name}, which the operator does not export"
                        ));
                    }
                }
            }
        }
    }
    (wrong, checked)
}

/// The operator's registry with one sample in every family
/// (prometheus-client leaves out families without samples).
pub fn with_every_family() -> trainforge::ops::Metrics {
    use std::time::Duration;
    let m = trainforge::ops::Metrics::new();
    m.set_remembered(1);
    m.reconcile_done("trainjob", Duration::from_millis(1), Err("Build"));
    m.reconcile_done("trainjob", Duration::from_millis(1), Ok(()));
    m.api_write("apply", "JobSet");
    m.status_server_answered(200);
    m.apply_error("JobSet");
    m.noop_resync();
    m.render_reused();
    m.swap_trainjobs(1);
    m.swap_rerendered();
    m.swap_remaining(1);
    m.plugins_not_serving(1);
    m.reconciles_waiting(1);
    m.jobset_ready(Duration::from_secs(1));
    m.plugin_call("torch", "build", Duration::from_micros(1), Some("Trap"), 1);
    m.plugin_call(
        "team/env",
        "build",
        Duration::from_micros(1),
        Some("Busy"),
        1,
    );
    m.admission_done("trainjob", "CREATE", "allowed", Duration::from_millis(1));
    m.admission_plugin_call("torch", "failed", Some("Timeout"), Duration::from_millis(1));
    trainforge::plugin::CallObserver::on_load(
        &m,
        "torch",
        "failed",
        Some("CompileTimeout"),
        Duration::from_secs(1),
    );
    m
}

/// The `trainforge_` families `scrape` declares (`# TYPE` lines).
pub fn declared(scrape: &str) -> Vec<&str> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .filter(|f| f.starts_with("trainforge_"))
        .collect()
}
