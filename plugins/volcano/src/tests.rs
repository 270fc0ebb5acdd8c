//! Plugin-level tests.

use super::*;
use pretty_assertions::assert_eq;
use trainforge_sdk::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use trainforge_sdk::testing::{Harness, RuntimeFixture};
use trainforge_sdk::{ANCESTOR_LABEL, FieldErrorType, HostError, LogLevel};

/// The product example `clustertrainingruntime-torch-distributed.yaml`
/// (Volcano policy in the portable form: `topologyKey`, `networkPolicy`), optionally with pod priority classes.
fn info(priority: &[Option<&str>], queue: Option<&str>) -> Info {
    let jobs: Vec<Value> = priority
        .iter()
        .enumerate()
        .map(|(i, pc)| {
            let mut pod = json!({"containers": [{"name": "node", "image": "pytorch"}]});
            if let Some(pc) = pc {
                pod["priorityClassName"] = json!(pc);
            }
            json!({"name": if i == 0 { "node".to_string() } else { format!("job{i}") }, "template": {
                "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                "spec": {"template": {"spec": pod}}}})
        })
        .collect();
    let mut meta = json!({"labels": {"runtime-type": "cluster-wide"}});
    if let Some(q) = queue {
        meta["annotations"] = json!({"scheduling.volcano.sh/queue-name": q});
    }
    let runtime = json!({"spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
        "podGroupPolicy": {"volcano": {"networkTopology": {"topologyKey": "topology.kubernetes.io/zone", "networkPolicy": "Best-effort"}}},
        "template": {"metadata": meta, "spec": {"replicatedJobs": jobs}}}});
    let mut i = RuntimeFixture::new(runtime).info().expect("runtime");
    for ps in &mut i.template_spec.pod_sets {
        ps.single_pod_requests
            .insert("cpu".into(), Quantity("4".into()));
        ps.single_pod_requests
            .insert("memory".into(), Quantity("16Gi".into()));
    }
    i.template_spec.pod_sets[0].count = Some(2);
    i
}

fn trainjob(suspend: bool) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "tj", "namespace": "ml", "uid": "u"}, "spec": {"suspend": suspend}})
}

#[test]
fn annotation_and_pod_group_with_translated_topology() {
    let out = Harness::<Volcano>::new(
        trainjob(false),
        info(&[Some("high"), None, Some("higher")], Some("research")),
    )
    .run()
    .expect("runs");
    assert_eq!(
        out.info
            .scheduler
            .pod_annotations
            .get("scheduling.k8s.io/group-name")
            .map(String::as_str),
        Some("tj")
    );
    assert!(out.info.scheduler.pod_labels.is_empty());
    assert_eq!(
        out.objects,
        vec![json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "tj", "namespace": "ml", "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob", "name": "tj", "uid": "u", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {
                "minMember": 4,
                "minResources": {"cpu": "16", "memory": "64Gi"},
                "queue": "research",
                "priorityClassName": "higher",
                "networkTopology": {"mode": "soft", "highestTierAllowed": 1}
            }
        })]
    );
}

#[test]
fn no_queue_priority_or_topology_when_not_configured() {
    let mut i = info(&[None], None);
    i.runtime_policy.pod_group_policy = Some(json!({"volcano": {}}));
    let out = Harness::<Volcano>::new(trainjob(false), i)
        .run()
        .expect("runs");
    assert_eq!(
        out.objects[0]["spec"],
        json!({"minMember": 2, "minResources": {"cpu": "8", "memory": "32Gi"}})
    );
}

#[test]
fn existing_pod_group_is_frozen_unless_suspended() {
    let existing = json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "tj", "namespace": "ml"}});
    let mut h = Harness::<Volcano>::new(trainjob(false), info(&[None], None));
    h.host.insert(existing.clone());
    assert!(h.run().expect("runs").objects.is_empty());
    let mut h = Harness::<Volcano>::new(trainjob(true), info(&[None], None));
    h.host.insert(existing);
    assert_eq!(h.run().expect("runs").objects.len(), 1);
}

#[test]
fn nothing_without_the_policy() {
    let mut i = info(&[None], None);
    i.runtime_policy.pod_group_policy = Some(json!({"coscheduling": {}}));
    let out = Harness::<Volcano>::new(trainjob(false), i.clone())
        .run()
        .expect("runs");
    assert!(out.objects.is_empty());
    assert_eq!(out.info, i);
    assert_eq!(
        Harness::<Volcano>::new(trainjob(false), i)
            .validate(None)
            .expect("validates"),
        Validation::default()
    );
}

fn priority_class(name: &str) -> Value {
    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": 1000})
}

#[test]
fn empty_queue_name_is_rejected() {
    let v = Harness::<Volcano>::new(trainjob(false), info(&[None], Some("")))
        .validate(None)
        .expect("validates");
    assert_eq!(v.errors.len(), 1);
    assert_eq!(
        v.errors[0].field,
        "spec.annotations[scheduling.volcano.sh/queue-name]"
    );
    assert_eq!(v.errors[0].detail, "Volcano queue name must not be empty");
    assert_eq!(v.errors[0].error_type, FieldErrorType::Invalid);
}

#[test]
fn priority_classes_must_exist() {
    let mut h = Harness::<Volcano>::new(
        trainjob(false),
        info(&[Some("high"), Some("missing")], Some("q")),
    );
    h.host.insert(priority_class("high"));
    let v = h.validate(None).expect("validates");
    assert_eq!(v.errors.len(), 1);
    assert_eq!(v.errors[0].field, "spec.templateSpec.priorityClassName");
    assert_eq!(
        v.errors[0].detail,
        "PriorityClass \"missing\" doesn't exist: priorityclasses.scheduling.k8s.io \"missing\" not found"
    );
}

#[test]
fn system_priority_class_ends_the_check() {
    let v = Harness::<Volcano>::new(
        trainjob(false),
        info(&[Some("system-node-critical"), Some("missing")], None),
    )
    .validate(None)
    .expect("validates");
    assert!(v.errors.is_empty());
}

/// A host whose cache cannot answer (e.g. `render` without a cluster).
struct NoCluster;
impl Host for NoCluster {
    fn get_object(&self, _: &KindRef, _: &str, _: &str) -> Result<Option<Value>, HostError> {
        Err(HostError::Unavailable("no cluster".into()))
    }
    fn random_bytes(&self, _: u32) -> Result<Vec<u8>, HostError> {
        Err(HostError::Denied("no".into()))
    }
    fn log(&self, _: LogLevel, _: &str) {}
}

#[test]
fn unanswerable_priority_class_lookup_is_a_warning() {
    let ctx = ValidateContext::new(
        trainjob(false),
        None,
        info(&[Some("high")], None),
        json!({}),
        &NoCluster,
    );
    let v = Volcano.validate(&ctx).expect("validates");
    assert!(v.errors.is_empty());
    assert_eq!(v.warnings.len(), 1);
    assert!(v.warnings[0].contains("could not check that PriorityClass \"high\" exists"));
}

#[test]
fn describe_declares_reads() {
    let d = Volcano.describe();
    assert_eq!(d.name, "volcano");
    assert_eq!(d.policy_keys, vec![POLICY]);
    assert!(
        d.reads
            .contains(&KindRef::new("scheduling.k8s.io/v1", "PriorityClass"))
    );
    assert_eq!(
        d.emits,
        vec![KindRef::new("scheduling.volcano.sh/v1beta1", "PodGroup")]
    );
}
