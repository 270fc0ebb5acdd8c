//! A plugin of world `plugin` only (raw bindings of `wit/plugin.wit`, not
//! the SDK): it exports `guest` and not `naming`, as every plugin built
//! before the optional interfaces did. `build` emits the ConfigMap
//! `job-legacy` (the tests' TrainJob is `job`).
//!
//! Whether `describe` announces `object-names` (which it cannot serve) is
//! read from [`ANNOUNCE`], a block the tests patch in the compiled `.wasm`:
//! the marker followed by `1` announces it.

wit_bindgen::generate!({
    path: "../../../../wit",
    world: "plugin",
});

use exports::trainforge::plugin::guest::Guest;
use trainforge::plugin::types::*;

/// Marker + one byte the tests may set to `1`.
static ANNOUNCE: [u8; 32] = *b"TRAINFORGE-LEGACY-ANNOUNCE:0    ";

struct Legacy;

fn unchanged() -> Result<Mutation, PluginError> {
    Ok(Mutation {
        info: None,
        trainjob: None,
    })
}

impl Guest for Legacy {
    fn describe() -> Descriptor {
        let announce = std::hint::black_box(&ANNOUNCE[..])[27] == b'1';
        let mut phases = vec!["build".to_owned()];
        if announce {
            phases.push("object-names".to_owned());
        }
        Descriptor {
            name: "legacy".into(),
            version: "0.1.0".into(),
            wit_version: "0.1.0".into(),
            policy_keys: Vec::new(),
            phases,
            emits: vec![KindRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
            }],
            reads: Vec::new(),
            watches: Vec::new(),
            capabilities: Vec::new(),
        }
    }

    fn enforce_ml_policy(_: PhaseInput) -> Result<Mutation, PluginError> {
        unchanged()
    }

    fn enforce_pod_group_policy(_: PhaseInput) -> Result<Mutation, PluginError> {
        unchanged()
    }

    fn enforce_pod_spec(_: PhaseInput) -> Result<Mutation, PluginError> {
        unchanged()
    }

    fn pre_build(_: PhaseInput) -> Result<Mutation, PluginError> {
        unchanged()
    }

    fn build(_: PhaseInput) -> Result<Vec<String>, PluginError> {
        Ok(vec![
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"job-legacy"},"data":{"built":"against 0.1.0"}}"#
                .to_owned(),
        ])
    }

    fn validate(_: ValidateInput) -> Result<Validation, PluginError> {
        Ok(Validation {
            warnings: Vec::new(),
            errors: Vec::new(),
        })
    }

    fn status(_: PhaseInput) -> Result<Option<String>, PluginError> {
        Ok(None)
    }
}

export!(Legacy);
