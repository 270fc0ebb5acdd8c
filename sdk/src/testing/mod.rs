//! A native test harness: run a plugin's phases without Wasm, in a normal
//! `cargo test`, the way the host would (phases in order, the TrainJob and
//! info threaded through, `build` output checked against `emits`), starting
//! from the info the operator builds ([`RuntimeFixture`]).
//!
//! ```
//! use trainforge_sdk::prelude::*;
//! use trainforge_sdk::testing::Harness;
//!
//! #[derive(Default)]
//! struct Noop;
//! impl Plugin for Noop {
//!     fn describe(&self) -> Descriptor { DescriptorBuilder::new("noop", "0").build() }
//! }
//!
//! let out = Harness::<Noop>::new(json!({"metadata": {"name": "j", "namespace": "ns"}}), Info::default())
//!     .run()
//!     .unwrap();
//! assert!(out.objects.is_empty());
//! ```

#[cfg(not(target_arch = "wasm32"))]
mod fixture;

#[cfg(not(target_arch = "wasm32"))]
pub use fixture::{FixtureError, RUNTIME_NAME, RuntimeFixture, TRAINJOB_NAME};

use crate::Plugin;
use crate::context::{PhaseContext, ValidateContext};
use crate::host::{Host, HostError, LogLevel};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeMap;
use trainforge_api::plugin::{
    Info, KindRef, ObjectKey, Phase, PluginError, Validation, object_key,
};

/// An in-memory [`Host`]: objects you put in, deterministic "random" bytes,
/// and a record of log lines. Like the real host, it refuses reads of kinds
/// not declared in `reads` (set by [`Harness`]).
#[derive(Debug, Default)]
pub struct MockHost {
    objects: BTreeMap<ObjectKey, Value>,
    reads: Option<Vec<KindRef>>,
    random_granted: bool,
    /// Log lines recorded, in order.
    pub logs: RefCell<Vec<(LogLevel, String)>>,
}

impl MockHost {
    /// Add an object (JSON with apiVersion, kind, metadata.namespace/name).
    pub fn insert(&mut self, object: Value) {
        self.objects.insert(object_key(&object), object);
    }
}

impl Host for MockHost {
    fn get_object(
        &self,
        kind: &KindRef,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, HostError> {
        if let Some(reads) = &self.reads
            && !reads.contains(kind)
        {
            return Err(HostError::Denied(format!(
                "{kind} is not declared in reads"
            )));
        }
        Ok(self
            .objects
            .get(&(kind.clone(), namespace.to_owned(), name.to_owned()))
            .cloned())
    }

    fn random_bytes(&self, len: u32) -> Result<Vec<u8>, HostError> {
        if !self.random_granted {
            return Err(HostError::Denied(
                "capability `random` not requested".into(),
            ));
        }
        Ok((0..len).map(|i| (i % 251) as u8).collect())
    }

    fn log(&self, level: LogLevel, message: &str) {
        self.logs.borrow_mut().push((level, message.to_owned()));
    }
}

/// The result of [`Harness::run`].
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The info after every enforce/pre-build phase.
    pub info: Info,
    /// The in-memory TrainJob after every phase.
    pub trainjob: Value,
    /// Objects returned by `build`.
    pub objects: Vec<Value>,
    /// Status returned by `status`.
    pub status: Option<Value>,
}

/// Runs one plugin natively.
pub struct Harness<P: Plugin> {
    plugin: P,
    /// The host served to the plugin; add objects with [`MockHost::insert`].
    pub host: MockHost,
    trainjob: Value,
    info: Info,
    config: Value,
}

impl<P: Plugin> Harness<P> {
    /// A harness for `P` with a TrainJob and info.
    pub fn new(trainjob: Value, info: Info) -> Self {
        let plugin = P::default();
        let d = plugin.describe();
        let host = MockHost {
            reads: Some(d.reads.clone()),
            random_granted: d.capabilities.iter().any(|c| c == "random"),
            ..MockHost::default()
        };
        Harness {
            plugin,
            host,
            trainjob,
            info,
            config: Value::Object(Default::default()),
        }
    }

    /// A harness for `P` with a TrainJob and the info the operator builds
    /// for it on `runtime` ([`RuntimeFixture::info_for`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn for_runtime(trainjob: Value, runtime: &RuntimeFixture) -> Result<Self, FixtureError> {
        let info = runtime.info_for(&trainjob)?;
        Ok(Self::new(trainjob, info))
    }

    /// Set the plugin configuration.
    pub fn with_config(mut self, config: Value) -> Self {
        self.config = config;
        self
    }

    /// Run one phase on the current TrainJob/info, keeping its changes.
    /// `build`, `validate` and `status` are run by [`Harness::run`] instead.
    /// The phase is called even when the plugin does not serve the runtime
    /// (unlike the host; see [`Harness::served`]), so it can be tested alone.
    pub fn run_phase(&mut self, phase: Phase) -> Result<(), PluginError> {
        let (trainjob, info, config) = self.inputs()?;
        let mut ctx = PhaseContext::from_json_lazy(&trainjob, &info, &config, &self.host)?;
        match phase {
            Phase::EnforceMlPolicy => self.plugin.enforce_ml_policy(&mut ctx)?,
            Phase::EnforcePodGroupPolicy => self.plugin.enforce_pod_group_policy(&mut ctx)?,
            Phase::EnforcePodSpec => self.plugin.enforce_pod_spec(&mut ctx)?,
            Phase::PreBuild => self.plugin.pre_build(&mut ctx)?,
            Phase::Build | Phase::Validate | Phase::Status => return Ok(()),
        }
        if let Some(e) = ctx.input_error() {
            return Err(e);
        }
        let (info, trainjob) = ctx.changed_json()?;
        if let Some(i) = info {
            self.info = serde_json::from_str(&i).map_err(|e| internal("info written back", e))?;
        }
        if let Some(t) = trainjob {
            self.trainjob =
                serde_json::from_str(&t).map_err(|e| internal("trainjob written back", e))?;
        }
        Ok(())
    }

    /// The TrainJob, info and config as the JSON the host would send: the
    /// harness runs phases on the same lazily parsed context as Wasm.
    fn inputs(&self) -> Result<(String, String, String), PluginError> {
        fn ser<T: serde::Serialize>(what: &str, v: &T) -> Result<String, PluginError> {
            serde_json::to_string(v).map_err(|e| internal(what, e))
        }
        Ok((
            ser("trainjob", &self.trainjob)?,
            ser("info", &self.info)?,
            ser("config", &self.config)?,
        ))
    }

    /// Whether the host would call this plugin at all for the info's
    /// runtime: a plugin whose policy keys all name a field
    /// (`mlPolicy.minimal`) is called only when the runtime sets one of
    /// them ([`trainforge_api::plugin::Descriptor::serves`]).
    pub fn served(&self) -> bool {
        self.plugin.describe().serves(&self.info.runtime_policy)
    }

    /// Run every reconcile phase the plugin declares, in host order, then
    /// `build` and `status`. Errors if `build` emits an undeclared kind or an
    /// object outside the TrainJob's namespace (as the host would). Like the
    /// host, calls nothing when the plugin does not serve the runtime
    /// ([`Harness::served`]): the outcome is then the input, unchanged.
    pub fn run(mut self) -> Result<Outcome, PluginError> {
        let d = self.plugin.describe();
        if !d.serves(&self.info.runtime_policy) {
            return Ok(Outcome {
                info: self.info,
                trainjob: self.trainjob,
                objects: Vec::new(),
                status: None,
            });
        }
        for phase in d.known_phases() {
            self.run_phase(phase)?;
        }
        let (trainjob, info, config) = self.inputs()?;
        let ctx = PhaseContext::from_json_lazy(&trainjob, &info, &config, &self.host)?;
        let objects = if d.implements(Phase::Build) {
            self.plugin.build(&ctx)?
        } else {
            Vec::new()
        };
        let ns = ctx.trainjob_namespace().to_owned();
        for o in &objects {
            let s = |p: &str| {
                o.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let kind = KindRef::new(s("/apiVersion"), s("/kind"));
            if !d.emits.contains(&kind) {
                return Err(PluginError::Internal(format!(
                    "emitted {kind} not declared in emits"
                )));
            }
            if s("/metadata/namespace") != ns {
                return Err(PluginError::Internal(format!(
                    "emitted {kind} {} outside namespace {ns:?}",
                    s("/metadata/name")
                )));
            }
        }
        let status = if d.implements(Phase::Status) {
            self.plugin.status(&ctx)?
        } else {
            None
        };
        if let Some(e) = ctx.input_error() {
            return Err(e);
        }
        Ok(Outcome {
            info: self.info,
            trainjob: self.trainjob,
            objects,
            status,
        })
    }

    /// Run `validate` for a create (`old = None`) or an update; like the
    /// host, an empty validation when the plugin does not serve the runtime
    /// ([`Harness::served`]).
    pub fn validate(&self, old: Option<Value>) -> Result<Validation, PluginError> {
        if !self.served() {
            return Ok(Validation::default());
        }
        let (trainjob, info, config) = self.inputs()?;
        let old = old.map(|o| o.to_string());
        let ctx =
            ValidateContext::from_json(&trainjob, old.as_deref(), &info, &config, &self.host)?;
        let v = self.plugin.validate(&ctx)?;
        match ctx.input_error() {
            Some(e) => Err(e),
            None => Ok(v),
        }
    }
}

fn internal(what: &str, e: serde_json::Error) -> PluginError {
    PluginError::Internal(format!("{what}: {e}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::prelude::*;

    /// Labels the JobSet and refuses every TrainJob, when called.
    #[derive(Default)]
    struct Keyed;
    impl Plugin for Keyed {
        fn describe(&self) -> Descriptor {
            DescriptorBuilder::new("keyed", "0")
                .policy_key("mlPolicy.keyed")
                .phase(Phase::EnforceMlPolicy)
                .phase(Phase::Validate)
                .build()
        }
        fn enforce_ml_policy(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
            ctx.info_mut().labels.insert("called".into(), "yes".into());
            Ok(())
        }
        fn validate(&self, _: &ValidateContext) -> Result<Validation, PluginError> {
            let mut v = Validation::default();
            v.errors.push(FieldError::invalid("spec", "refused"));
            Ok(v)
        }
    }

    fn harness(ml_policy: Value) -> Harness<Keyed> {
        let mut info = Info::default();
        info.runtime_policy.ml_policy = Some(ml_policy);
        Harness::new(json!({"metadata": {"name": "j", "namespace": "ns"}}), info)
    }

    #[test]
    fn run_and_validate_route_like_the_host() {
        let away = harness(json!({"torch": {}}));
        assert!(!away.served());
        assert!(away.validate(None).unwrap().errors.is_empty());
        assert!(away.run().unwrap().info.labels.is_empty());

        let served = harness(json!({"keyed": {}}));
        assert!(served.served());
        assert_eq!(served.validate(None).unwrap().errors.len(), 1);
        assert_eq!(served.run().unwrap().info.labels["called"], "yes");

        // run_phase calls the phase regardless, for unit tests of one phase.
        let mut alone = harness(json!({}));
        alone.run_phase(Phase::EnforceMlPolicy).unwrap();
        assert_eq!(alone.info.labels["called"], "yes");
    }
}
