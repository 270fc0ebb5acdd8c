//! The shipped monitoring (`manifests/monitoring`) against the operator's
//! registry: every dashboard query and alert expression is PromQL and reads
//! only families the operator declares; the alerts are well formed.

use crate::monitoring_common::{
    declared, family, problems, queries, rules, series, with_every_family,
};

#[test]
fn every_query_is_promql_over_exported_families() {
    let scrape = with_every_family().encode();
    // Every family the registry registers (host/src/ops/metrics.rs) has
    // its sample here: a new family needs one in `with_every_family`.
    let registered = include_str!("../../src/ops/metrics.rs")
        .matches("registry.register(")
        .count();
    assert_eq!(declared(&scrape).len(), registered, "{scrape}");
    let (wrong, checked) = problems(&scrape);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked >= 20, "only {checked} trainforge_ series read");
    // The check finds what is wrong: a family that does not exist, and a
    // query that is not PromQL.
    assert!(!scrape.contains(&format!("# TYPE {} ", family("trainforge_no_such_total"))));
    assert!(series("sum(rate(trainforge_reconcile_total[5m])").is_err());
    assert_eq!(
        series("histogram_quantile(0.9, sum by (le) (rate(trainforge_a_bucket[5m]))) / b").unwrap(),
        ["trainforge_a_bucket", "b"]
    );
    assert!(queries().len() >= 20);
}

/// Alerts a platform team needs are there, each with a severity, a
/// duration it must hold for, a summary and a description.
#[test]
fn alerts_are_complete() {
    let rules = rules();
    assert_eq!(rules["kind"], "PrometheusRule");
    let mut alerts = Vec::new();
    for group in rules["spec"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["alert"].as_str().unwrap();
            alerts.push(name.to_owned());
            assert!(
                matches!(
                    rule["labels"]["severity"].as_str(),
                    Some("warning" | "critical")
                ),
                "{name}: severity"
            );
            let hold = rule["for"].as_str().unwrap_or_default();
            assert!(
                promql_parser::util::parse_duration(hold).is_ok_and(|d| !d.is_zero()),
                "{name}: for {hold:?}"
            );
            for key in ["summary", "description"] {
                assert!(
                    rule["annotations"][key]
                        .as_str()
                        .is_some_and(|s| s.len() > 10),
                    "{name}: {key}"
                );
            }
        }
    }
    for wanted in [
        "TrainforgePluginFailing",
        "TrainforgePluginNotServing",
        "TrainforgePluginLoadFailing",
        "TrainforgeReconcileErrors",
        "TrainforgeAdmissionSlow",
        "TrainforgeOperatorDown",
    ] {
        assert!(
            alerts.iter().any(|a| a == wanted),
            "{wanted} missing: {alerts:?}"
        );
    }
}
