//! `plugin-minimal`: a complete Trainforge plugin in one file.
//!
//! When a runtime's `mlPolicy` has a `minimal` entry, it
//! - sets `MINIMAL_GREETING` on the trainer's `node` container
//!   (enforce-ml-policy; the greeting comes from the plugin config),
//! - emits a ConfigMap `<trainjob>-minimal` (build),
//! - rejects TrainJobs that set `MINIMAL_GREETING` themselves (validate).
//!
//! Build the component:
//! `cargo build --profile plugin --target wasm32-wasip2 -p plugin-minimal`
//! → `target/wasm32-wasip2/plugin/plugin_minimal.wasm`, then try it with
//! `trainforge plugin inspect` / `trainforge plugin run`.

use trainforge_sdk::prelude::*;

/// The policy key this plugin serves.
pub const POLICY: &str = "mlPolicy.minimal";
/// The env var it owns.
pub const ENV: &str = "MINIMAL_GREETING";

/// Plugin configuration (`--config` JSON).
#[derive(Debug, serde::Deserialize)]
#[serde(default)]
struct Config {
    greeting: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            greeting: "hello".into(),
        }
    }
}

/// The plugin. Stateless: a fresh value is made for every call.
#[derive(Default)]
pub struct Minimal;

impl Plugin for Minimal {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("minimal", env!("CARGO_PKG_VERSION"))
            .policy_key(POLICY)
            .phase(Phase::EnforceMlPolicy)
            .phase(Phase::Build)
            .phase(Phase::Validate)
            .emits("v1", "ConfigMap")
            .build()
    }

    fn enforce_ml_policy(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
        if ctx.policy(POLICY).is_none() {
            return Ok(());
        }
        let greeting = ctx.config_as::<Config>()?.greeting;
        let Some(trainer) = ctx.pod_set_by_ancestor("trainer").map(|p| p.name.clone()) else {
            return Ok(());
        };
        ctx.set_env(&trainer, "node", ENV, &greeting)
    }

    fn build(&self, ctx: &PhaseContext) -> Result<Vec<Value>, PluginError> {
        if ctx.policy(POLICY).is_none() {
            return Ok(Vec::new());
        }
        let greeting = ctx.config_as::<Config>()?.greeting;
        Ok(vec![json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": format!("{}-minimal", ctx.trainjob_name()),
                "namespace": ctx.trainjob_namespace(),
                "ownerReferences": [ctx.owner_reference()],
            },
            "data": { "greeting": greeting },
        })])
    }

    fn validate(&self, ctx: &ValidateContext) -> Result<Validation, PluginError> {
        let mut v = Validation::default();
        if ctx.policy(POLICY).is_none() {
            return Ok(v);
        }
        let env = ctx
            .trainjob()
            .pointer("/spec/trainer/env")
            .and_then(Value::as_array);
        if env
            .into_iter()
            .flatten()
            .any(|e| e.get("name").and_then(Value::as_str) == Some(ENV))
        {
            v.errors.push(FieldError::invalid(
                "spec.trainer.env",
                format!("must not set {ENV}; it is managed by the minimal plugin"),
            ));
        }
        Ok(v)
    }
}

trainforge_sdk::export_plugin!(Minimal);

#[cfg(test)]
mod tests {
    use super::*;
    use trainforge_sdk::testing::{Harness, RuntimeFixture};

    fn info(with_policy: bool) -> Info {
        let policy = if with_policy {
            json!({"minimal": {}})
        } else {
            json!({"torch": {}})
        };
        let runtime = json!({"spec": {"mlPolicy": policy, "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"metadata": {"labels": {trainforge_sdk::ANCESTOR_LABEL: "trainer"}},
                         "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "img"}]}}}}
        }]}}}});
        RuntimeFixture::new(runtime).info().expect("valid runtime")
    }

    fn trainjob() -> Value {
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
               "metadata": {"name": "job", "namespace": "team", "uid": "u-1"}, "spec": {}})
    }

    #[test]
    fn sets_env_and_emits_configmap() {
        let out = Harness::<Minimal>::new(trainjob(), info(true))
            .with_config(json!({"greeting": "hi"}))
            .run()
            .expect("plugin runs");
        let node = out
            .info
            .pod_set("node")
            .and_then(|p| p.container("node"))
            .expect("node");
        assert_eq!(node.env[0].name, ENV);
        assert_eq!(node.env[0].value.as_deref(), Some("hi"));
        assert_eq!(out.objects.len(), 1);
        assert_eq!(out.objects[0]["metadata"]["name"], "job-minimal");
        assert_eq!(
            out.objects[0]["metadata"]["ownerReferences"][0]["uid"],
            "u-1"
        );
    }

    #[test]
    fn does_nothing_without_its_policy() {
        let out = Harness::<Minimal>::new(trainjob(), info(false))
            .run()
            .expect("plugin runs");
        assert!(out.objects.is_empty());
        assert_eq!(out.info, info(false));
    }

    #[test]
    fn rejects_reserved_env() {
        let mut tj = trainjob();
        tj["spec"]["trainer"] = json!({"env": [{"name": ENV, "value": "x"}]});
        let v = Harness::<Minimal>::new(tj, info(true))
            .validate(None)
            .expect("validates");
        assert_eq!(v.errors.len(), 1);
        assert_eq!(v.errors[0].field, "spec.trainer.env");
    }

    #[test]
    fn bad_config_is_reported() {
        let err = Harness::<Minimal>::new(trainjob(), info(true))
            .with_config(json!({"greeting": 5}))
            .run()
            .expect_err("config rejected");
        assert!(matches!(err, PluginError::InvalidConfig(_)));
    }
}
