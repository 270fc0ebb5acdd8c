//! CoScheduling: gang scheduling with scheduler-plugins (Kubeflow Trainer's
//! `plugins/coscheduling`). Runs when the runtime has
//! `podGroupPolicy.coscheduling`.
//!
//! - **enforce-pod-group-policy**: pod label
//!   `scheduling.x-k8s.io/pod-group: <job>` on every pod (through
//!   `info.scheduler.podLabels`, stamped by the JobSet plugin);
//! - **build**: `scheduling.x-k8s.io/v1alpha1` PodGroup `<job>` with
//!   `minMember` = Σ counts, `minResources` = Σ requests × count and
//!   `scheduleTimeoutSeconds` (default 60) — unless it already exists and
//!   the TrainJob is not suspended.

pub mod gang;

use trainforge_sdk::api::scheduling::coscheduling as pg;
use trainforge_sdk::api::trainer::v1alpha1::CoschedulingPodGroupPolicySource;
use trainforge_sdk::api::trainer::v1alpha1::constants::DEFAULT_SCHEDULE_TIMEOUT_SECONDS;
use trainforge_sdk::prelude::*;

/// The policy key this plugin serves.
pub const POLICY: &str = "podGroupPolicy.coscheduling";
/// Kind of the PodGroup.
pub const KIND: &str = "PodGroup";

/// The plugin. Stateless.
#[derive(Default)]
pub struct Coscheduling;

/// The PodGroup object for TrainJob `name` (pure).
pub fn pod_group(
    name: &str,
    namespace: &str,
    owner: Value,
    info: &Info,
    timeout: i32,
) -> Result<Value, PluginError> {
    let mut spec = json!({"minMember": gang::min_member(info)});
    let resources = gang::min_resources(info)?;
    if let Value::Object(m) = &mut spec {
        // Omitted (not `{}`) when no pod requests anything.
        if !resources.is_empty() {
            m.insert("minResources".into(), json!(resources));
        }
        m.insert("scheduleTimeoutSeconds".into(), json!(timeout));
    }
    Ok(json!({
        "apiVersion": pg::API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner]},
        "spec": spec,
    }))
}

impl Plugin for Coscheduling {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("coscheduling", env!("CARGO_PKG_VERSION"))
            .policy_key(POLICY)
            .phase(Phase::EnforcePodGroupPolicy)
            .phase(Phase::Build)
            .emits(pg::API_VERSION, KIND)
            .object_name(pg::API_VERSION, KIND, "")
            .reads(pg::API_VERSION, KIND)
            .watches(pg::API_VERSION, KIND)
            .build()
    }

    fn enforce_pod_group_policy(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
        if ctx.policy(POLICY).is_none() {
            return Ok(());
        }
        let name = ctx.trainjob_name().to_owned();
        ctx.info_mut()
            .scheduler
            .pod_labels
            .insert(pg::LABEL_POD_GROUP.to_owned(), name);
        Ok(())
    }

    fn build(&self, ctx: &PhaseContext) -> Result<Vec<Value>, PluginError> {
        let Some(policy) = ctx.policy_as::<CoschedulingPodGroupPolicySource>(POLICY)? else {
            return Ok(Vec::new());
        };
        let (name, ns) = (ctx.trainjob_name(), ctx.trainjob_namespace());
        if !gang::should_apply_for(ctx, &KindRef::new(pg::API_VERSION, KIND))? {
            return Ok(Vec::new());
        }
        let timeout = policy
            .schedule_timeout_seconds
            .unwrap_or(DEFAULT_SCHEDULE_TIMEOUT_SECONDS);
        Ok(vec![pod_group(
            name,
            ns,
            ctx.owner_reference(),
            ctx.info(),
            timeout,
        )?])
    }
}

trainforge_sdk::export_plugin!(Coscheduling);

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use trainforge_sdk::ANCESTOR_LABEL;
    use trainforge_sdk::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use trainforge_sdk::testing::{Harness, RuntimeFixture};

    /// The product example `clustertrainingruntime-multi-node.yaml` with the
    /// trainer label added, after the host set numNodes 4 and 8 GPUs.
    fn info(policy: Value) -> Info {
        let runtime = json!({"spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "podGroupPolicy": policy,
            "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.0.0"}]}}}}}]}}}});
        let mut i = RuntimeFixture::new(runtime).info().expect("runtime");
        i.template_spec.pod_sets[0].count = Some(4);
        i.template_spec.pod_sets[0]
            .single_pod_requests
            .insert("nvidia.com/gpu".into(), Quantity("8".into()));
        i
    }

    fn trainjob(suspend: bool) -> Value {
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
               "metadata": {"name": "pytorch-distributed", "namespace": "default", "uid": "u"},
               "spec": {"suspend": suspend}})
    }

    #[test]
    fn brief_multi_node_example_min_member_4_timeout_300() {
        let out = Harness::<Coscheduling>::new(
            trainjob(false),
            info(json!({"coscheduling": {"scheduleTimeoutSeconds": 300}})),
        )
        .run()
        .expect("runs");
        assert_eq!(
            out.info
                .scheduler
                .pod_labels
                .get("scheduling.x-k8s.io/pod-group")
                .map(String::as_str),
            Some("pytorch-distributed")
        );
        assert_eq!(
            out.objects,
            vec![json!({
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "pytorch-distributed", "namespace": "default", "ownerReferences": [{
                    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "pytorch-distributed",
                    "uid": "u", "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"minMember": 4, "minResources": {"nvidia.com/gpu": "32"}, "scheduleTimeoutSeconds": 300}
            })]
        );
    }

    #[test]
    fn timeout_defaults_to_60_and_empty_min_resources_are_omitted() {
        let mut i = info(json!({"coscheduling": {}}));
        i.template_spec.pod_sets[0].single_pod_requests.clear();
        let out = Harness::<Coscheduling>::new(trainjob(false), i)
            .run()
            .expect("runs");
        assert_eq!(
            out.objects[0]["spec"],
            json!({"minMember": 4, "scheduleTimeoutSeconds": 60})
        );
    }

    #[test]
    fn existing_pod_group_is_frozen_unless_suspended() {
        let existing = json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                              "metadata": {"name": "pytorch-distributed", "namespace": "default"}});
        let mut h =
            Harness::<Coscheduling>::new(trainjob(false), info(json!({"coscheduling": {}})));
        h.host.insert(existing.clone());
        assert!(h.run().expect("runs").objects.is_empty());
        let mut h = Harness::<Coscheduling>::new(trainjob(true), info(json!({"coscheduling": {}})));
        h.host.insert(existing);
        assert_eq!(h.run().expect("runs").objects.len(), 1);
    }

    #[test]
    fn nothing_without_the_policy() {
        let i = info(json!({"volcano": {}}));
        let out = Harness::<Coscheduling>::new(trainjob(false), i.clone())
            .run()
            .expect("runs");
        assert!(out.objects.is_empty());
        assert_eq!(out.info, i);
    }
}
