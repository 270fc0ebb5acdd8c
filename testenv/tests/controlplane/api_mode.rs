//! Api mode (etcd + kube-apiserver): CRD installation and server-side apply
//! field ownership as the real API server implements it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use trainforge_testenv::{Mode, manifests};

#[tokio::test]
async fn crds_are_installed_and_established() {
    let Some(env) = trainforge_testenv::require!(Mode::Api) else {
        return;
    };
    let client = env.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let mut expected: Vec<String> = vec![
        "jobsets.jobset.x-k8s.io".into(),
        "podgroups.scheduling.x-k8s.io".into(),
        "podgroups.scheduling.volcano.sh".into(),
    ];
    // Ours, from crds/*.yaml (may be none yet).
    let own = trainforge_testenv::paths::Paths::from_env().own_crds;
    for file in manifests::yaml_files(&own).unwrap() {
        for doc in manifests::load_yaml_docs(&file).unwrap() {
            if doc["kind"] == "CustomResourceDefinition" {
                expected.push(doc["metadata"]["name"].as_str().unwrap().to_string());
            }
        }
    }
    for name in &expected {
        let crd = crds
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name}: {e}"));
        let established = crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        assert!(established, "CRD {name} is not Established");
        assert!(env.crds().contains(name), "{name} missing from env.crds()");
    }
    common::report(&format!("testenv figures:\n{}", env.figures()));
}

#[tokio::test]
async fn server_side_apply_conflict_and_force() {
    let Some(env) = trainforge_testenv::require!(Mode::Api) else {
        return;
    };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("ssa").await.unwrap();
    let api = common::jobsets(&client, &ns);

    // Field manager `trainer` applies a JobSet (as JSON) with suspend: true.
    let mut js = common::jobset(
        "ssa",
        &ns,
        vec![common::replicated_job("workers", 1, 1, json!({}))],
    );
    js["spec"]["suspend"] = json!(true);
    let applied = api
        .patch("ssa", &PatchParams::apply("trainer"), &Patch::Apply(&js))
        .await
        .unwrap();
    assert_eq!(applied.data["spec"]["suspend"], json!(true));

    // Another manager sets the same field to a different value: 409 Conflict.
    let other = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": { "name": "ssa", "namespace": ns },
        "spec": { "suspend": false }
    });
    let err = api
        .patch("ssa", &PatchParams::apply("other"), &Patch::Apply(&other))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}")
    };
    assert_eq!(status.code, 409, "{status:?}");
    assert_eq!(status.reason, "Conflict", "{status:?}");
    assert!(
        status.message.contains(r#"conflict with "trainer""#)
            && status.message.contains(".spec.suspend"),
        "unexpected message: {}",
        status.message
    );
    // Nothing changed.
    assert_eq!(
        api.get("ssa").await.unwrap().data["spec"]["suspend"],
        json!(true)
    );

    // With force the apply succeeds and ownership of .spec.suspend moves.
    let forced = api
        .patch(
            "ssa",
            &PatchParams::apply("other").force(),
            &Patch::Apply(&other),
        )
        .await
        .unwrap();
    assert_eq!(forced.data["spec"]["suspend"], json!(false));
    let owns_suspend = |manager: &str| {
        forced.metadata.managed_fields.iter().flatten().any(|m| {
            m.manager.as_deref() == Some(manager)
                && m.operation.as_deref() == Some("Apply")
                && m.fields_v1
                    .as_ref()
                    .is_some_and(|f| f.0.pointer("/f:spec/f:suspend").is_some())
        })
    };
    assert!(
        owns_suspend("other"),
        "other should own .spec.suspend: {:?}",
        forced.metadata.managed_fields
    );
    assert!(
        !owns_suspend("trainer"),
        "trainer should have lost .spec.suspend"
    );
    // trainer still owns the rest of what it applied.
    let trainer_owns_jobs = forced.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some("trainer")
            && m.fields_v1.as_ref().is_some_and(|f| {
                f.0.pointer("/f:spec/f:replicatedJobs")
                    .is_some_and(Value::is_object)
            })
    });
    assert!(
        trainer_owns_jobs,
        "trainer should still own .spec.replicatedJobs"
    );
}
