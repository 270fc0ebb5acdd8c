//! ClusterTrainerPlugin and TrainerPlugin validation (CREATE and UPDATE).
//!
//! A `TrainerPlugin` (a tenant's) is first held to its namespace: a
//! `configMap` source in another namespace, a `file://` URL and an unusable
//! `selector` are refused on their field. Then both kinds get the same
//! checks:
//!
//! - The run options must be usable ([`options`]): a `limits.timeout`
//!   or `limits.memory` out of range, or a `config` that cannot be
//!   serialised, is refused on that field.
//! - A `builtin` source must name a builtin plugin (`torch` or
//!   `plugin-torch`); otherwise `spec.source.builtin: Unsupported value`
//!   listing the builtin names.
//! - A builtin is loaded with the given options and asked to `validate` a
//!   small sample TrainJob ([`crate::pipeline::sample`]) within the request
//!   budget; if it answers `invalid-config`, the request is refused on
//!   `spec.config` with its message. A builtin that cannot be loaded with
//!   these options (kinds, grants) is refused on `spec` with the reason.
//!   Other failures of the sample call (time, traps) are not the spec's
//!   fault and are admitted with a warning.
//!
//! Components from a `configMap` or a URL (`https://`, `file://`) are not
//! fetched at admission: the request would wait on the network or the API
//! server, and the component can change after admission anyway. The plugin
//! catalog reports their problems in the object's status.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use trainforge_api::plugin::{FieldError, FieldErrorType, Phase, PluginError};
use trainforge_api::trainforge::v1alpha1::{
    ClusterTrainerPlugin, ClusterTrainerPluginSpec, TrainerPlugin,
};

use super::review::{Operation, Verdict};
use crate::controller::catalog::spec::{SpecError, options, plugin_source};
use crate::pipeline::sample;
use crate::plugin::builtin::find as find_builtin;
use crate::plugin::{self, CallScope, Limits, NoObjects, PluginRuntime, ValidateInput, builtin};

/// Why a ClusterTrainerPlugin review could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum PluginReviewError {
    /// The object is not a ClusterTrainerPlugin (or TrainerPlugin).
    #[error("decoding the {kind}: {message}")]
    Decode {
        /// The kind expected.
        kind: &'static str,
        /// The decoding error.
        message: String,
    },
    /// The plugin runtime used to try builtins could not be created.
    #[error("creating the plugin runtime: {0}")]
    Runtime(String),
}

/// The field error for options the operator cannot use.
fn spec_error(e: &SpecError) -> FieldError {
    let field = match e {
        SpecError::Timeout(_) => "spec.limits.timeout",
        SpecError::Memory(_) => "spec.limits.memory",
        SpecError::Concurrency(_) => "spec.limits.concurrency",
        SpecError::Config(_) => "spec.config",
    };
    FieldError::invalid(field, e.to_string())
}

/// How a plugin review may try a builtin: loaded with the runtime the
/// function gives, its sample `validate` call given at most the duration.
/// `None`: the checks that need no plugin only (what admission answers when
/// trying did not finish within its deadline).
pub type TryWith<'a> = Option<(&'a dyn Fn() -> Result<Arc<PluginRuntime>, String>, Duration)>;

/// Review a ClusterTrainerPlugin; a builtin is tried as `try_with` says.
pub fn review_plugin(
    operation: Operation,
    object: &Value,
    try_with: TryWith<'_>,
) -> Result<Verdict, PluginReviewError> {
    if !matches!(operation, Operation::Create | Operation::Update) {
        return Ok(Verdict::allow(Vec::new()));
    }
    let ctp: ClusterTrainerPlugin =
        serde_json::from_value(object.clone()).map_err(|e| PluginReviewError::Decode {
            kind: "ClusterTrainerPlugin",
            message: e.to_string(),
        })?;
    review_spec(&ctp.spec, try_with)
}

/// Review a TrainerPlugin in `namespace`: held to its namespace, then the
/// checks of a ClusterTrainerPlugin on its spec.
pub fn review_trainer_plugin(
    operation: Operation,
    object: &Value,
    namespace: &str,
    try_with: TryWith<'_>,
) -> Result<Verdict, PluginReviewError> {
    if !matches!(operation, Operation::Create | Operation::Update) {
        return Ok(Verdict::allow(Vec::new()));
    }
    let tp: TrainerPlugin =
        serde_json::from_value(object.clone()).map_err(|e| PluginReviewError::Decode {
            kind: "TrainerPlugin",
            message: e.to_string(),
        })?;
    let mut errors = Vec::new();
    let source = &tp.spec.plugin.source;
    if let Some(cm) = &source.config_map
        && cm.namespace != namespace
    {
        errors.push(FieldError {
            error_type: FieldErrorType::Forbidden,
            field: "spec.source.configMap.namespace".into(),
            bad_value: None,
            detail: format!(
                "a TrainerPlugin's ConfigMap must be in its own namespace {namespace:?}, not {:?}",
                cm.namespace
            ),
        });
    }
    if source
        .url
        .as_deref()
        .is_some_and(|u| u.starts_with("file://"))
    {
        errors.push(FieldError::forbidden(
            "spec.source.url",
            "a TrainerPlugin cannot read the operator's file system; use oci://, https:// or a ConfigMap",
        ));
    }
    if source.pull_secret.is_some() {
        errors.push(FieldError::forbidden(
            "spec.source.pullSecret",
            "a TrainerPlugin cannot use the operator's registry credentials",
        ));
    }
    if let Some(sel) = &tp.spec.selector
        && let Err(e) = kube::core::Selector::try_from(sel.clone())
    {
        errors.push(FieldError::invalid("spec.selector", e.to_string()));
    }
    if !errors.is_empty() {
        return Ok(Verdict::forbidden(&errors, Vec::new()));
    }
    review_spec(&tp.spec.plugin, try_with)
}

fn review_spec(
    spec: &ClusterTrainerPluginSpec,
    try_with: TryWith<'_>,
) -> Result<Verdict, PluginReviewError> {
    let opts = match options(spec, &Limits::default()) {
        Ok(o) => o,
        Err(e) => return Ok(Verdict::forbidden(&[spec_error(&e)], Vec::new())),
    };
    let Some(name) = spec.source.builtin.as_deref() else {
        return Ok(Verdict::allow(Vec::new()));
    };
    let Some(b) = find_builtin(name) else {
        let supported = builtin::names()
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        return Ok(Verdict::forbidden(
            &[FieldError {
                error_type: FieldErrorType::NotSupported,
                field: "spec.source.builtin".into(),
                bad_value: serde_json::to_string(name).ok(),
                detail: format!("supported values: {supported}"),
            }],
            Vec::new(),
        ));
    };
    let Some((runtime, budget)) = try_with else {
        return Ok(Verdict::allow(vec![format!(
            "builtin plugin {name:?} was not tried with this configuration within the admission \
             deadline (loading it took longer); the plugin's status says whether it serves"
        )]));
    };
    let rt = runtime().map_err(PluginReviewError::Runtime)?;
    let src = plugin_source(
        format!("builtin:{}", b.crate_name),
        bytes::Bytes::from_static(b.wasm),
        None,
        true,
        &opts,
        Arc::new(NoObjects),
    );
    let loaded = match rt.load(src) {
        Ok(p) => p,
        Err(e) => {
            return Ok(Verdict::forbidden(
                &[FieldError::invalid("spec", e.to_string())],
                Vec::new(),
            ));
        }
    };
    if !loaded.implements(Phase::Validate) {
        return Ok(Verdict::allow(Vec::new()));
    }
    let Ok((trainjob, info)) = sample::inputs(&[]) else {
        return Ok(Verdict::allow(Vec::new()));
    };
    let input = ValidateInput {
        trainjob: trainjob.to_string(),
        old_trainjob: None,
        info: serde_json::to_string(&info).unwrap_or_default(),
    };
    Ok(
        match loaded.validate_within(&input, &CallScope::default(), Some(budget)) {
            Ok(_) => Verdict::allow(Vec::new()),
            Err(plugin::Error::Plugin {
                error: PluginError::InvalidConfig(m),
                ..
            }) => Verdict::forbidden(&[FieldError::invalid("spec.config", m)], Vec::new()),
            Err(e) => Verdict::allow(vec![format!(
                "builtin plugin {name:?} could not be tried with this configuration ({}): {e}",
                e.reason()
            )]),
        },
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::plugin::RuntimeConfig;
    use serde_json::json;
    use std::sync::OnceLock;

    fn rt() -> Result<Arc<PluginRuntime>, String> {
        static RT: OnceLock<Arc<PluginRuntime>> = OnceLock::new();
        if let Some(r) = RT.get() {
            return Ok(r.clone());
        }
        let r = Arc::new(PluginRuntime::new(RuntimeConfig::default()).map_err(|e| e.to_string())?);
        Ok(RT.get_or_init(|| r).clone())
    }

    fn ctp(spec: Value) -> Value {
        json!({"apiVersion": "trainforge.dev/v1alpha1", "kind": "ClusterTrainerPlugin",
            "metadata": {"name": "p"}, "spec": spec})
    }

    fn review(spec: Value) -> Verdict {
        review_plugin(
            Operation::Create,
            &ctp(spec),
            Some((&rt, Duration::from_secs(3))),
        )
        .unwrap()
    }

    #[test]
    fn a_known_builtin_is_admitted() {
        let v = review(json!({"source": {"builtin": "torch"}, "config": {"x": 1}}));
        assert!(v.allowed, "{v:?}");
        let v = review(json!({"source": {"builtin": "plugin-jobset"}}));
        assert!(v.allowed, "{v:?}");
    }

    #[test]
    fn an_unknown_builtin_lists_the_names() {
        let v = review(json!({"source": {"builtin": "tensorflow"}}));
        assert!(!v.allowed);
        assert!(
            v.message.starts_with(
                "spec.source.builtin: Unsupported value: \"tensorflow\": supported values: "
            ),
            "{}",
            v.message
        );
        assert!(v.message.contains("\"torch\""), "{}", v.message);
    }

    #[test]
    fn bad_limits_are_refused_on_their_field() {
        let v = review(json!({"source": {"builtin": "torch"}, "limits": {"timeout": "forever"}}));
        assert!(
            v.message
                .starts_with("spec.limits.timeout: Invalid value: "),
            "{}",
            v.message
        );
        let v = review(json!({"source": {"builtin": "torch"}, "limits": {"memory": "2Gi"}}));
        assert!(
            v.message.starts_with("spec.limits.memory: Invalid value: "),
            "{}",
            v.message
        );
    }

    #[test]
    fn other_sources_are_not_fetched() {
        let v = review(json!({"source": {"url": "https://example.invalid/p.wasm"},
            "sha256": "0000000000000000000000000000000000000000000000000000000000000000"}));
        assert!(v.allowed, "{v:?}");
        assert!(
            review_plugin(
                Operation::Delete,
                &json!(null),
                Some((&rt, Duration::from_secs(1)))
            )
            .unwrap()
            .allowed
        );
        assert!(
            review_plugin(
                Operation::Create,
                &json!({"spec": 1}),
                Some((&rt, Duration::from_secs(1)))
            )
            .is_err()
        );
    }

    #[test]
    fn without_trying_the_checks_still_hold_and_a_builtin_is_admitted_with_a_warning() {
        let check = |spec: Value| review_plugin(Operation::Create, &ctp(spec), None).unwrap();
        let v = check(json!({"source": {"builtin": "torch"}, "config": {"x": 1}}));
        assert!(v.allowed, "{v:?}");
        assert!(
            v.warnings.len() == 1
                && v.warnings[0].contains("not tried")
                && v.warnings[0].contains("torch"),
            "{v:?}"
        );
        assert!(!check(json!({"source": {"builtin": "tensorflow"}})).allowed);
        let v = check(json!({"source": {"builtin": "torch"}, "limits": {"timeout": "forever"}}));
        assert!(
            !v.allowed && v.message.contains("spec.limits.timeout"),
            "{v:?}"
        );
        // A TrainerPlugin is held to its namespace before anything is tried.
        let tp = |source: Value| {
            json!({"apiVersion": "trainforge.dev/v1alpha1", "kind": "TrainerPlugin",
                "metadata": {"name": "p", "namespace": "team"}, "spec": {"source": source}})
        };
        let v = review_trainer_plugin(
            Operation::Create,
            &tp(json!({"builtin": "torch"})),
            "team",
            None,
        )
        .unwrap();
        assert!(v.allowed && v.warnings.len() == 1, "{v:?}");
        let v = review_trainer_plugin(
            Operation::Create,
            &tp(json!({"url": "file:///etc/passwd"})),
            "team",
            None,
        )
        .unwrap();
        assert!(!v.allowed && v.message.contains("spec.source.url"), "{v:?}");
    }
}
