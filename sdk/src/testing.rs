//! A native test harness: run a plugin's phases without Wasm, in a normal
//! `cargo test`, the way the host would (phases in order, the TrainJob and
//! info threaded through, `build` output checked against `emits`).
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

use crate::Plugin;
use crate::context::{PhaseContext, ValidateContext};
use crate::host::{Host, HostError, LogLevel};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeMap;
use trainforge_api::plugin::{Info, KindRef, Phase, PluginError, Validation};

/// An in-memory [`Host`]: objects you put in, deterministic "random" bytes,
/// and a record of log lines. Like the real host, it refuses reads of kinds
/// not declared in `reads` (set by [`Harness`]).
#[derive(Debug, Default)]
pub struct MockHost {
    objects: BTreeMap<(KindRef, String, String), Value>,
    reads: Option<Vec<KindRef>>,
    random_granted: bool,
    /// Log lines recorded, in order.
    pub logs: RefCell<Vec<(LogLevel, String)>>,
}

impl MockHost {
    /// Add an object (JSON with apiVersion, kind, metadata.namespace/name).
    pub fn insert(&mut self, object: Value) {
        let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
        let kind = KindRef::new(s("/apiVersion"), s("/kind"));
        self.objects.insert((kind, s("/metadata/namespace"), s("/metadata/name")), object);
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
            return Err(HostError::Denied(format!("{kind} is not declared in reads")));
        }
        Ok(self.objects.get(&(kind.clone(), namespace.to_owned(), name.to_owned())).cloned())
    }

    fn random_bytes(&self, len: u32) -> Result<Vec<u8>, HostError> {
        if !self.random_granted {
            return Err(HostError::Denied("capability `random` not requested".into()));
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
        Harness { plugin, host, trainjob, info, config: Value::Object(Default::default()) }
    }

    /// Set the plugin configuration.
    pub fn with_config(mut self, config: Value) -> Self {
        self.config = config;
        self
    }

    /// Run one phase on the current TrainJob/info, keeping its changes.
    /// `build`, `validate` and `status` are run by [`Harness::run`] instead.
    pub fn run_phase(&mut self, phase: Phase) -> Result<(), PluginError> {
        let mut ctx =
            PhaseContext::new(self.trainjob.clone(), self.info.clone(), self.config.clone(), &self.host);
        match phase {
            Phase::EnforceMlPolicy => self.plugin.enforce_ml_policy(&mut ctx)?,
            Phase::EnforcePodGroupPolicy => self.plugin.enforce_pod_group_policy(&mut ctx)?,
            Phase::EnforcePodSpec => self.plugin.enforce_pod_spec(&mut ctx)?,
            Phase::PreBuild => self.plugin.pre_build(&mut ctx)?,
            Phase::Build | Phase::Validate | Phase::Status => return Ok(()),
        }
        let (info, trainjob) = ctx.into_parts();
        if let Some(i) = info {
            self.info = i;
        }
        if let Some(t) = trainjob {
            self.trainjob = t;
        }
        Ok(())
    }

    /// Run every reconcile phase the plugin declares, in host order, then
    /// `build` and `status`. Errors if `build` emits an undeclared kind or an
    /// object outside the TrainJob's namespace (as the host would).
    pub fn run(mut self) -> Result<Outcome, PluginError> {
        let d = self.plugin.describe();
        for phase in d.known_phases() {
            self.run_phase(phase)?;
        }
        let ctx =
            PhaseContext::new(self.trainjob.clone(), self.info.clone(), self.config.clone(), &self.host);
        let objects = if d.implements(Phase::Build) { self.plugin.build(&ctx)? } else { Vec::new() };
        let ns = ctx.trainjob_namespace().to_owned();
        for o in &objects {
            let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
            let kind = KindRef::new(s("/apiVersion"), s("/kind"));
            if !d.emits.contains(&kind) {
                return Err(PluginError::Internal(format!("emitted {kind} not declared in emits")));
            }
            if s("/metadata/namespace") != ns {
                return Err(PluginError::Internal(format!(
                    "emitted {kind} {} outside namespace {ns:?}",
                    s("/metadata/name")
                )));
            }
        }
        let status = if d.implements(Phase::Status) { self.plugin.status(&ctx)? } else { None };
        Ok(Outcome { info: self.info, trainjob: self.trainjob, objects, status })
    }

    /// Run `validate` for a create (`old = None`) or an update.
    pub fn validate(&self, old: Option<Value>) -> Result<Validation, PluginError> {
        let ctx = ValidateContext {
            trainjob: self.trainjob.clone(),
            old_trainjob: old,
            info: self.info.clone(),
            config: self.config.clone(),
            host: &self.host,
        };
        self.plugin.validate(&ctx)
    }
}
