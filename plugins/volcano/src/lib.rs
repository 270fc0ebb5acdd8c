//! Volcano: gang scheduling with Volcano (Kubeflow Trainer's
//! `plugins/volcano`). Runs when the runtime has
//! `podGroupPolicy.volcano`.
//!
//! - **enforce-pod-group-policy**: pod annotation
//!   `scheduling.k8s.io/group-name: <job>` on every pod;
//! - **build**: `scheduling.volcano.sh/v1beta1` PodGroup `<job>` with
//!   `minMember`/`minResources` (same sums as coscheduling), `queue` from
//!   the JobSet annotation `scheduling.volcano.sh/queue-name`,
//!   `priorityClassName` from the last pod template that sets one, and
//!   `networkTopology` ([`topology`]: the `topologyKey`/`networkPolicy` form
//!   is translated to Volcano's `mode`) — unless it already exists and the
//!   TrainJob is not suspended;
//! - **validate**: non-empty queue name, existing PriorityClasses.

#[path = "../../coscheduling/src/gang.rs"]
pub mod gang;
pub mod topology;

use trainforge_sdk::api::scheduling::volcano as pg;
use trainforge_sdk::api::trainer::v1alpha1::VolcanoPodGroupPolicySource;
use trainforge_sdk::prelude::*;

/// The policy key this plugin serves.
pub const POLICY: &str = "podGroupPolicy.volcano";
/// Kind of the PodGroup.
pub const KIND: &str = "PodGroup";
/// `apiVersion` of PriorityClass (cluster-scoped; read in `validate`).
pub const PRIORITY_CLASS_API_VERSION: &str = "scheduling.k8s.io/v1";
/// Kind PriorityClass.
pub const PRIORITY_CLASS_KIND: &str = "PriorityClass";
/// Built-in priority classes that always exist; seeing one ends the check.
pub const SYSTEM_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// The plugin. Stateless.
#[derive(Default)]
pub struct Volcano;

/// `priorityClassName` of every pod template that sets one, in job order.
pub fn priority_class_names(info: &Info) -> Vec<String> {
    info.template_spec
        .obj
        .get("replicatedJobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|j| {
            j.pointer("/template/spec/template/spec/priorityClassName")
                .and_then(Value::as_str)
        })
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The PodGroup object for TrainJob `name` (pure).
pub fn pod_group(
    name: &str,
    namespace: &str,
    owner: Value,
    info: &Info,
    policy: &VolcanoPodGroupPolicySource,
) -> Result<Value, PluginError> {
    let mut spec = json!({"minMember": gang::min_member(info)});
    let resources = gang::min_resources(info)?;
    if let Value::Object(m) = &mut spec {
        // Omitted (not `{}`) when no pod requests anything.
        if !resources.is_empty() {
            m.insert("minResources".into(), json!(resources));
        }
        if let Some(q) = info.annotations.get(pg::ANNOTATION_QUEUE_NAME) {
            m.insert("queue".into(), json!(q));
        }
        if let Some(pc) = priority_class_names(info).pop() {
            m.insert("priorityClassName".into(), json!(pc));
        }
        if let Some(nt) = &policy.network_topology {
            let t = topology::to_volcano(nt)?;
            m.insert(
                "networkTopology".into(),
                serde_json::to_value(t).map_err(|e| PluginError::Internal(e.to_string()))?,
            );
        }
    }
    Ok(json!({
        "apiVersion": pg::API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner]},
        "spec": spec,
    }))
}

impl Plugin for Volcano {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("volcano", env!("CARGO_PKG_VERSION"))
            .policy_key(POLICY)
            .phase(Phase::EnforcePodGroupPolicy)
            .phase(Phase::Build)
            .phase(Phase::Validate)
            .emits(pg::API_VERSION, KIND)
            .object_name(pg::API_VERSION, KIND, "")
            .reads(pg::API_VERSION, KIND)
            .reads(PRIORITY_CLASS_API_VERSION, PRIORITY_CLASS_KIND)
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
            .pod_annotations
            .insert(pg::ANNOTATION_KUBE_GROUP_NAME.to_owned(), name);
        Ok(())
    }

    fn build(&self, ctx: &PhaseContext) -> Result<Vec<Value>, PluginError> {
        let Some(policy) = ctx.policy_as::<VolcanoPodGroupPolicySource>(POLICY)? else {
            return Ok(Vec::new());
        };
        let (name, ns) = (ctx.trainjob_name(), ctx.trainjob_namespace());
        if !gang::should_apply_for(ctx, &KindRef::new(pg::API_VERSION, KIND))? {
            return Ok(Vec::new());
        }
        Ok(vec![pod_group(
            name,
            ns,
            ctx.owner_reference(),
            ctx.info(),
            &policy,
        )?])
    }

    fn validate(&self, ctx: &ValidateContext) -> Result<Validation, PluginError> {
        let mut v = Validation::default();
        if ctx.policy(POLICY).is_none() {
            return Ok(v);
        }
        if ctx
            .info()
            .annotations
            .get(pg::ANNOTATION_QUEUE_NAME)
            .is_some_and(String::is_empty)
        {
            let mut e = FieldError::invalid(
                format!("spec.annotations[{}]", pg::ANNOTATION_QUEUE_NAME),
                "Volcano queue name must not be empty",
            );
            e.bad_value = Some("\"\"".into());
            v.errors.push(e);
        }
        if let Some(nt) = ctx.policy(&format!("{POLICY}.networkTopology")) {
            let parsed = serde_json::from_value(nt.clone())
                .map_err(|e| PluginError::InvalidInput(format!("{POLICY}.networkTopology: {e}")))
                .and_then(|nt| topology::to_volcano(&nt));
            if let Err(e) = parsed {
                v.errors
                    .push(FieldError::invalid("spec.runtimeRef", e.to_string()));
            }
        }
        let kind = KindRef::new(PRIORITY_CLASS_API_VERSION, PRIORITY_CLASS_KIND);
        for pc in priority_class_names(ctx.info()) {
            if SYSTEM_PRIORITY_CLASSES.contains(&pc.as_str()) {
                break;
            }
            match ctx.host().get_object(&kind, "", &pc) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    let mut e = FieldError::invalid(
                        "spec.templateSpec.priorityClassName",
                        format!("PriorityClass {pc:?} doesn't exist: priorityclasses.scheduling.k8s.io {pc:?} not found"),
                    );
                    e.bad_value = Some(json!(pc).to_string());
                    v.errors.push(e);
                }
                // The cluster cannot be asked (e.g. `render` without a cluster,
                // or the read is not granted): say so instead of rejecting.
                Err(err) => v.warnings.push(format!(
                    "spec.templateSpec.priorityClassName: could not check that PriorityClass {pc:?} exists: {err}"
                )),
            }
        }
        Ok(v)
    }
}

trainforge_sdk::export_plugin!(Volcano);

#[cfg(test)]
mod tests;
