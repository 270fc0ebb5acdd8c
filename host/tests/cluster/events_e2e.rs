//! What clients of the operator see of a TrainJob it cannot serve, on a
//! real API server (api mode, the operator binary with no plugins):
//!
//! - its Warning Event (no runtime: `TrainJobResourcesCreationFailed`,
//!   repeated by retries into one Event with a count) is a core `v1` Event the Kubeflow Python SDK's
//!   `get_job_events` keeps: listed without selectors in the namespace,
//!   `involvedObject.kind` TrainJob and `.name` the job, `firstTimestamp`
//!   set (also found with the field selector on `involvedObject`), with
//!   `lastTimestamp`, `count` and `source.component`;
//! - the Event's creator, which gives no field manager, is recorded under
//!   the first word of the operator's `User-Agent` (`trainforge`);
//! - once its runtime exists, the TrainJob's status (`PluginsReady=False`)
//!   is written under field manager `trainer`
//!   (subresource `status`), not `unknown`;
//! - a transition's Event is written exactly once, before the status that
//!   records it: while a ValidatingAdmissionPolicy refuses every status
//!   write of a TrainJob (as a crash between the two would leave it), its
//!   transitions' Events are there, once each, however often the reconcile
//!   is retried, and still once each when the status is finally written.
//!
//! Skips (passes with a note on stderr) when the control plane is not built;
//! `TRAINFORGE_TESTENV_REQUIRED=1` makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use crate::operator_common::*;
use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;
use serde_json::{Value, json};
use trainforge_testenv::Mode;

const TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn events_reach_the_sdk_and_writes_name_their_manager() {
    let Some(env) = trainforge_testenv::require!(Mode::Api) else {
        return;
    };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("events").await.unwrap();
    // A TrainJob of a runtime that does not exist: admission would refuse
    // it; the Events under test are the controller's, so the webhooks skip
    // this namespace.
    bypass_admission(&client, &ns).await;
    let op = Operator::start(env, "operator-events", &["--resync-seconds", "30"]);
    apply(
        &client,
        &trainjob_object(&ns, "job", "torch-distributed", json!({})),
    )
    .await;

    // As the SDK does: every Event of the namespace, filtered client-side.
    let events = kube::Api::<Event>::namespaced(client.clone(), &ns);
    let sdk_view = |list: Vec<Event>| -> Vec<Event> {
        list.into_iter()
            .filter(|e| {
                matches!(
                    e.involved_object.kind.as_deref(),
                    Some("TrainJob" | "JobSet" | "Job" | "Pod")
                ) && e.involved_object.name.as_deref() == Some("job")
                    && e.first_timestamp.is_some()
            })
            .collect()
    };
    // Without plugins the TrainJob also gets a `NoServingPlugins` Warning;
    // the Events are listed by name, so which comes first is chance.
    let ev = eventually("a Warning Event the SDK keeps", TIMEOUT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        sdk_view(list.items).into_iter().find(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("TrainJobResourcesCreationFailed")
        })
    })
    .await;
    assert!(
        ev.message
            .as_deref()
            .unwrap_or_default()
            .starts_with("TrainJob resources reconciliation failed: "),
        "{ev:?}"
    );
    assert_eq!(ev.involved_object.kind.as_deref(), Some("TrainJob"));
    assert!(ev.involved_object.uid.is_some());
    assert!(ev.last_timestamp.is_some() && ev.count >= Some(1), "{ev:?}");
    assert_eq!(
        ev.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("trainer-trainjob-controller")
    );
    assert_eq!(
        ev.reporting_component.as_deref(),
        Some("trainer-trainjob-controller")
    );

    // The same Event through the field selector on the involved object.
    let selected = events
        .list(&ListParams::default().fields("involvedObject.kind=TrainJob,involvedObject.name=job"))
        .await
        .unwrap();
    assert!(
        selected
            .items
            .iter()
            .any(|e| e.metadata.name == ev.metadata.name && e.first_timestamp.is_some()),
        "{:?}",
        selected.items
    );

    // Created without a field manager: named after the User-Agent.
    let managers: Vec<&str> = ev
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    assert_eq!(managers, ["trainforge"], "{:?}", ev.metadata.managed_fields);

    // Retries repeat the Event: one object, counted.
    let repeated = eventually("the Event counted again", TIMEOUT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        let same: Vec<Event> = sdk_view(list.items)
            .into_iter()
            .filter(|e| e.reason == ev.reason)
            .collect();
        same.iter().any(|e| e.count >= Some(2)).then_some(same)
    })
    .await;
    assert_eq!(repeated.len(), 1, "aggregated into one Event: {repeated:?}");
    assert_eq!(repeated[0].metadata.name, ev.metadata.name);
    assert_eq!(repeated[0].first_timestamp, ev.first_timestamp);

    // With its runtime present the TrainJob gets a status
    // (PluginsReady=False: no plugins), written as `trainer`.
    for d in docs(
        &root().join("manifests/runtimes/torch-distributed.yaml"),
        None,
    ) {
        apply(&client, &d).await;
    }
    let job = eventually("the TrainJob status written", TIMEOUT, || async {
        let job = trainjob(&client, &ns, "job").await?;
        job.pointer("/status/conditions")
            .and_then(|c| c.as_array())
            .is_some_and(|c| !c.is_empty())
            .then_some(job)
    })
    .await;
    let entries = job["metadata"]["managedFields"].as_array().unwrap();
    let status_writers: Vec<&str> = entries
        .iter()
        .filter(|e| e["subresource"] == "status")
        .filter_map(|e| e["manager"].as_str())
        .collect();
    assert_eq!(status_writers, ["trainer"], "{entries:#?}");
    let ours = entries
        .iter()
        .find(|e| e["subresource"] == "status")
        .unwrap();
    assert!(
        ours.pointer("/fieldsV1/f:status/f:conditions").is_some(),
        "{ours:#}"
    );

    // Every status write of TrainJobs in this namespace is refused.
    let policy = format!("freeze-{ns}");
    apply(
        &client,
        &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {"failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["trainer.kubeflow.org"],
                    "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["trainjobs/status"]}]},
                "validations": [{"expression": "false", "message": "status frozen by the test"}]}}),
    )
    .await;
    apply(
        &client,
        &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy, "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}}),
    )
    .await;
    // The policy is in force once a status write of its own is refused.
    let trainjobs = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "trainer.kubeflow.org",
            "v1alpha1",
            "TrainJob",
        )),
    );
    eventually("the policy in force", TIMEOUT, || async {
        let refused = trainjobs
            .patch_status(
                "job",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": {"jobsStatus": []}})),
            )
            .await
            .is_err();
        refused.then_some(())
    })
    .await;
    let transition_events = |name: &'static str| {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.unwrap();
            let mut seen: Vec<(String, i32)> = list
                .items
                .into_iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(name))
                .map(|e| (e.reason.unwrap_or_default(), e.count.unwrap_or(0)))
                .collect();
            seen.sort();
            seen
        }
    };
    apply(
        &client,
        &trainjob_object(&ns, "frozen", "torch-distributed", json!({"suspend": true})),
    )
    .await;
    let once = vec![
        ("NoServingPlugins".to_owned(), 1),
        ("Suspended".to_owned(), 1),
    ];
    eventually(
        "the transitions' Events, status refused",
        TIMEOUT,
        || async { (transition_events("frozen").await == once).then_some(()) },
    )
    .await;
    // The reconcile fails on the status and is retried; the Events stay one
    // each, and the status is still not written.
    let retried = |text: &str| metric(text, "trainforge_reconcile_errors_total", &[]);
    let before = retried(&op.scrape().await);
    eventually("three more failed reconciles", TIMEOUT, || async {
        (retried(&op.scrape().await) >= before + 3.0).then_some(())
    })
    .await;
    assert_eq!(transition_events("frozen").await, once);
    let frozen = trainjob(&client, &ns, "frozen").await.unwrap();
    assert!(frozen.get("status").is_none_or(Value::is_null), "{frozen}");
    // Written at last: still one Event per transition.
    delete(
        &client,
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        None,
        &policy,
    )
    .await;
    eventually("the frozen TrainJob's status written", TIMEOUT, || async {
        let tj = trainjob(&client, &ns, "frozen").await?;
        is_true(&tj, "Suspended").then_some(())
    })
    .await;
    assert_eq!(
        transition_events("frozen").await,
        once,
        "{}",
        op.log_tail(20)
    );
    delete(
        &client,
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        None,
        &policy,
    )
    .await;
}
