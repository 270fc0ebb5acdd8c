//! What a plugin's configuration changes at run time: failure policy,
//! emitted-kind narrowing, phase narrowing, the call observer, and sharing
//! the runtime across threads.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::plugin_common::*;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use trainforge::plugin::{
    CallObserver, FailurePolicy, LoadedPlugin, PluginRuntime, PluginSet, PluginSource,
    RuntimeConfig,
};
use trainforge_api::plugin::{Info, KindRef, Phase};

fn minimal(rt: &PluginRuntime, edit: impl FnOnce(&mut PluginSource)) -> LoadedPlugin {
    let mut src = PluginSource::new("minimal.wasm", std::fs::read(minimal_wasm()).unwrap());
    edit(&mut src);
    rt.load(src).unwrap()
}

fn hostile(rt: &PluginRuntime, attack: &str, policy: FailurePolicy) -> LoadedPlugin {
    hostile_with(rt, None, json!({"attack": attack}), policy)
}

fn hostile_with(
    rt: &PluginRuntime,
    descriptor: Option<serde_json::Value>,
    config: serde_json::Value,
    policy: FailurePolicy,
) -> LoadedPlugin {
    let bytes = match descriptor {
        Some(d) => hostile_declaring(&d),
        None => hostile_bytes(),
    };
    let mut src = PluginSource::new("hostile.wasm", bytes);
    src.config = config.to_string();
    src.failure_policy = policy;
    rt.load(src).unwrap()
}

/// A hostile status plugin answering garbage.
fn bad_status(rt: &PluginRuntime, policy: FailurePolicy) -> LoadedPlugin {
    let d = json!({"phases": ["status"], "emits": []});
    hostile_with(rt, Some(d), json!({"attack": "bad-status"}), policy)
}

fn greeting_env(info: &Info) -> Vec<String> {
    info.pod_set("node")
        .unwrap()
        .container("node")
        .unwrap()
        .env
        .iter()
        .map(|e| e.name.clone())
        .collect()
}

#[test]
fn ignored_failures_become_warnings_and_the_pass_goes_on() {
    let rt = short_deadline_runtime();
    // build traps, enforce times out, status returns garbage: all ignored.
    let foreign_owner = json!({"emit": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm",
        "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "name": "someone-elses-job", "uid": "other-uid", "controller": true}]}}]});
    for (config, phase, reason) in [
        (json!({"attack": "panic"}), "build", "Trap"),
        (
            json!({"attack": "loop-enforce"}),
            "enforce-ml-policy",
            "Timeout",
        ),
        (foreign_owner, "build", "ForbiddenObject"),
    ] {
        let attack = config.to_string();
        let set = PluginSet::new(vec![
            hostile_with(&rt, None, config, FailurePolicy::Ignore),
            minimal(&rt, |_| {}),
        ])
        .unwrap();
        let out = set.reconcile(&trainjob(), &info()).unwrap();
        assert_eq!(
            out.objects.len(),
            1,
            "{attack}: the minimal plugin's ConfigMap is still built"
        );
        assert_eq!(out.objects[0]["metadata"]["name"], "job-minimal");
        assert_eq!(greeting_env(&out.info), vec!["MINIMAL_GREETING"]);
        assert_eq!(out.warnings.len(), 1, "{attack}: {:?}", out.warnings);
        let w = &out.warnings[0];
        assert!(
            w.contains("hostile") && w.contains(phase) && w.contains(reason),
            "{attack}: {w}"
        );
    }
    let set = PluginSet::new(vec![bad_status(&rt, FailurePolicy::Ignore)]).unwrap();
    let s = set.status_report(&trainjob(), &info()).unwrap();
    assert_eq!(s.status, None);
    assert!(
        s.warnings[0].contains("status") && s.warnings[0].contains("InvalidOutput"),
        "{:?}",
        s.warnings
    );
    assert_eq!(set.status(&trainjob(), &info()).unwrap(), None);
}

#[test]
fn fail_policy_stops_the_pass() {
    let rt = short_deadline_runtime();
    let set = PluginSet::new(vec![
        hostile(&rt, "panic", FailurePolicy::Fail),
        minimal(&rt, |_| {}),
    ])
    .unwrap();
    let e = set.reconcile(&trainjob(), &info()).unwrap_err();
    assert_eq!(e.reason(), "Trap", "{e}");
    let set = PluginSet::new(vec![bad_status(&rt, FailurePolicy::Fail)]).unwrap();
    assert_eq!(
        set.status(&trainjob(), &info()).unwrap_err().reason(),
        "InvalidOutput"
    );
}

#[test]
fn validate_honours_the_failure_policy() {
    let rt = short_deadline_runtime();
    // Bad config makes the minimal plugin's validate... succeed (it does not
    // read config there), so use its enforce error through reconcile and its
    // validate errors through validate, with the errors attributed.
    let set = PluginSet::new(vec![minimal(&rt, |_| {})]).unwrap();
    let mut tj = trainjob();
    tj["spec"]["trainer"]["env"] = json!([{"name": "MINIMAL_GREETING", "value": "x"}]);
    let v = set.validate(&tj, None, &info()).unwrap();
    assert_eq!(v.errors.len(), 1);
    assert_eq!(v.errors[0].plugin, "minimal");
    assert_eq!(v.errors[0].error.field, "spec.trainer.env");
    assert!(v.ignored.is_empty());

    let bad = minimal(&rt, |s| {
        s.config = json!({"greeting": 5}).to_string();
        s.failure_policy = FailurePolicy::Ignore;
    });
    let out = PluginSet::new(vec![bad])
        .unwrap()
        .reconcile(&trainjob(), &info())
        .unwrap();
    assert!(
        out.objects.is_empty(),
        "enforce and build both failed and were skipped"
    );
    assert_eq!(out.warnings.len(), 2, "{:?}", out.warnings);
    assert!(
        out.warnings[0].contains("enforce-ml-policy") && out.warnings[0].contains("PluginError")
    );
    assert!(out.warnings[1].contains("build"));
}

#[test]
fn allowed_emits_narrow_what_the_plugin_declared() {
    let rt = short_deadline_runtime();
    let narrowed = minimal(&rt, |s| {
        s.allowed_emits = Some(vec![KindRef::new("v1", "Secret")])
    });
    assert!(
        narrowed.allowed_emits().is_empty(),
        "ConfigMap declared but not allowed; Secret allowed but not declared"
    );
    assert_eq!(
        narrowed.descriptor().emits,
        vec![KindRef::new("v1", "ConfigMap")],
        "the descriptor is unchanged"
    );
    let e = PluginSet::new(vec![narrowed])
        .unwrap()
        .reconcile(&trainjob(), &info())
        .unwrap_err();
    assert_eq!(e.reason(), "ForbiddenObject", "{e}");
    assert!(e.to_string().contains("ConfigMap"), "{e}");

    let allowed = minimal(&rt, |s| {
        s.allowed_emits = Some(vec![KindRef::new("v1", "ConfigMap")])
    });
    let out = PluginSet::new(vec![allowed])
        .unwrap()
        .reconcile(&trainjob(), &info())
        .unwrap();
    assert_eq!(out.objects.len(), 1);
}

#[test]
fn phases_narrow_what_is_called() {
    let rt = short_deadline_runtime();
    let build_only = minimal(&rt, |s| s.phases = Some(vec![Phase::Build, Phase::Status]));
    assert!(build_only.implements(Phase::EnforceMlPolicy));
    assert!(!build_only.calls(Phase::EnforceMlPolicy));
    assert!(build_only.calls(Phase::Build));
    assert!(
        !build_only.calls(Phase::Status),
        "not implemented, so not called even if listed"
    );
    let out = PluginSet::new(vec![build_only.clone()])
        .unwrap()
        .reconcile(&trainjob(), &info())
        .unwrap();
    assert_eq!(out.objects.len(), 1);
    assert!(
        greeting_env(&out.info).is_empty(),
        "enforce-ml-policy was not called"
    );
    let mut tj = trainjob();
    tj["spec"]["trainer"]["env"] = json!([{"name": "MINIMAL_GREETING", "value": "x"}]);
    let v = PluginSet::new(vec![build_only])
        .unwrap()
        .validate(&tj, None, &info())
        .unwrap();
    assert!(v.errors.is_empty(), "validate was not called");
}

/// plugin, phase, failure reason, memory high-water.
type Call = (String, String, Option<&'static str>, usize);

#[derive(Default)]
struct Recorder(Mutex<Vec<Call>>);

impl CallObserver for Recorder {
    fn on_call(
        &self,
        plugin: &str,
        phase: &str,
        elapsed: Duration,
        failure: Option<&'static str>,
        high_water: usize,
    ) {
        assert!(elapsed > Duration::ZERO);
        self.0
            .lock()
            .unwrap()
            .push((plugin.to_owned(), phase.to_owned(), failure, high_water));
    }
}

#[test]
fn the_observer_sees_every_guest_call() {
    let recorder = Arc::new(Recorder::default());
    let rt = PluginRuntime::new(RuntimeConfig {
        observer: Some(recorder.clone()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let p = minimal(&rt, |_| {});
    let h = hostile(&rt, "panic", FailurePolicy::Fail);
    {
        let calls = recorder.0.lock().unwrap();
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(
            (calls[0].0.as_str(), calls[0].1.as_str(), calls[0].2),
            ("minimal", "describe", None)
        );
        assert!(calls[0].3 > 0, "memory high-water is reported");
    }
    PluginSet::new(vec![p.clone()])
        .unwrap()
        .reconcile(&trainjob(), &info())
        .unwrap();
    let _ = h.build(
        &trainforge::plugin::PhaseInput {
            trainjob: trainjob().to_string(),
            info: "{}".into(),
        },
        &trainforge::plugin::Owner::from_stored(&trainjob()).unwrap(),
    );
    let calls = recorder.0.lock().unwrap().clone();
    let phases: Vec<(&str, &str, Option<&str>)> = calls[2..]
        .iter()
        .map(|(p, ph, f, _)| (p.as_str(), ph.as_str(), *f))
        .collect();
    assert_eq!(
        phases,
        vec![
            ("minimal", "enforce-ml-policy", None),
            ("minimal", "build", None),
            ("hostile", "build", Some("Trap"))
        ]
    );

    // set_observer replaces it, also for plugins loaded before.
    let second = Arc::new(Recorder::default());
    rt.set_observer(second.clone());
    p.describe_fresh().unwrap();
    assert_eq!(second.0.lock().unwrap().len(), 1);
    assert_eq!(recorder.0.lock().unwrap().len(), calls.len());
}

#[test]
fn runtime_and_sets_are_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PluginRuntime>();
    assert_send_sync::<PluginSet>();
    assert_send_sync::<LoadedPlugin>();

    let rt = Arc::new(short_deadline_runtime());
    let set = PluginSet::new(vec![minimal(&rt, |_| {})]).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (rt, set) = (rt.clone(), set.clone());
            std::thread::spawn(move || {
                let out = set.reconcile(&trainjob(), &info()).unwrap();
                let again = minimal(&rt, |_| {});
                (out.objects.len(), again.name().to_owned())
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), (1, "minimal".to_owned()));
    }
}

#[test]
fn plugins_keep_their_deadline_after_the_runtime_is_dropped() {
    let rt = short_deadline_runtime();
    let p = hostile(&rt, "loop-enforce", FailurePolicy::Fail);
    drop(rt);
    let start = std::time::Instant::now();
    let e = PluginSet::new(vec![p])
        .unwrap()
        .reconcile(&trainjob(), &info())
        .unwrap_err();
    assert_eq!(e.reason(), "Timeout");
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// A hostile plugin named `name` declaring `keys` and every reconcile and
/// validate phase (and `status` with `status`), doing `config`.
fn keyed_with(
    rt: &PluginRuntime,
    name: &str,
    keys: &[&str],
    status: bool,
    config: serde_json::Value,
) -> LoadedPlugin {
    let mut phases = vec![
        "enforce-ml-policy",
        "enforce-pod-group-policy",
        "enforce-pod-spec",
        "pre-build",
        "build",
        "validate",
    ];
    if status {
        phases.push("status");
    }
    let d = json!({"name": name, "policy_keys": keys, "emits": [], "phases": phases});
    hostile_with(rt, Some(d), config, FailurePolicy::Fail)
}

fn keyed(rt: &PluginRuntime, name: &str, keys: &[&str], config: serde_json::Value) -> LoadedPlugin {
    keyed_with(rt, name, keys, false, config)
}

/// The plugin names in `recorder`'s calls after the first `skip`, with the
/// phase, in order.
fn called(recorder: &Recorder, skip: usize) -> Vec<(String, String)> {
    recorder.0.lock().unwrap()[skip..]
        .iter()
        .map(|(p, ph, _, _)| (p.clone(), ph.clone()))
        .collect()
}

/// `info()` with `mlPolicy.<field>` set to `{}`.
fn info_with_ml(field: &str) -> Info {
    let mut i = info();
    i.runtime_policy.ml_policy.as_mut().unwrap()[field] = json!({});
    i
}

#[test]
fn policy_keys_route_every_phase_and_a_plugin_only_fails_its_own_trainjobs() {
    let recorder = Arc::new(Recorder::default());
    let rt = PluginRuntime::new(RuntimeConfig {
        observer: Some(recorder.clone()),
        limits: trainforge::plugin::Limits {
            timeout: Duration::from_millis(300),
            ..Default::default()
        },
        ..RuntimeConfig::default()
    })
    .unwrap();
    // A scheduler and a framework plugin for policies the runtime does not
    // set, failing in every phase under failurePolicy: Fail.
    let other = |attack: &str| keyed(&rt, "other", &["mlPolicy.other"], json!({"attack": attack}));
    let gang = |attack: &str| {
        keyed(
            &rt,
            "gang",
            &["podGroupPolicy.gang", "mlPolicy.gang"],
            json!({"attack": attack}),
        )
    };
    let reconcile =
        PluginSet::new(vec![other("panic"), gang("panic"), minimal(&rt, |_| {})]).unwrap();
    let validate = PluginSet::new(vec![
        other("trap-validate"),
        gang("trap-validate"),
        minimal(&rt, |_| {}),
    ])
    .unwrap();
    let status = PluginSet::new(vec![keyed_with(
        &rt,
        "other",
        &["mlPolicy.other"],
        true,
        json!({"attack": "bad-status"}),
    )])
    .unwrap();
    let skip = recorder.0.lock().unwrap().len();

    let out = reconcile.reconcile(&trainjob(), &info()).unwrap();
    assert_eq!(out.objects.len(), 1, "the minimal plugin still builds");
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    let v = validate.validate(&trainjob(), None, &info()).unwrap();
    assert!(v.errors.is_empty() && v.ignored.is_empty(), "{v:?}");
    assert_eq!(
        status.status_report(&trainjob(), &info()).unwrap(),
        Default::default()
    );
    let names: Vec<String> = called(&recorder, skip)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert!(
        names.iter().all(|p| p == "minimal") && names.len() == 3,
        "only the minimal plugin is called: {names:?}"
    );

    // A runtime that sets the policy gets the plugin, failures and all.
    let e = reconcile
        .reconcile(&trainjob(), &info_with_ml("other"))
        .unwrap_err();
    assert_eq!(e.reason(), "Trap", "{e}");
    assert!(e.to_string().contains("other"), "{e}");
    for field in ["other", "gang"] {
        let e = validate
            .validate(&trainjob(), None, &info_with_ml(field))
            .unwrap_err();
        assert!(e.to_string().contains(field), "{e}");
    }
    let mut gang_info = info();
    gang_info.runtime_policy.pod_group_policy = Some(json!({"gang": {"x": 1}}));
    let e = reconcile.reconcile(&trainjob(), &gang_info).unwrap_err();
    assert!(
        e.to_string().contains("gang"),
        "one key of several suffices: {e}"
    );
    let e = status
        .status_report(&trainjob(), &info_with_ml("other"))
        .unwrap_err();
    assert_eq!(e.reason(), "InvalidOutput", "{e}");
    // JSON null is an unset policy.
    let mut null_info = info();
    null_info.runtime_policy.ml_policy.as_mut().unwrap()["other"] = serde_json::Value::Null;
    reconcile.reconcile(&trainjob(), &null_info).unwrap();

    // No keys, or a bare root key, is called for every TrainJob.
    for keys in [
        &[][..],
        &["mlPolicy"][..],
        &["podGroupPolicy", "mlPolicy.other"][..],
    ] {
        let set =
            PluginSet::new(vec![keyed(&rt, "always", keys, json!({"attack": "panic"}))]).unwrap();
        let e = set.reconcile(&trainjob(), &info()).unwrap_err();
        assert_eq!(e.reason(), "Trap", "{keys:?}: {e}");
    }
}

#[test]
fn no_plugin_can_route_another_in_or_out() {
    let rt = short_deadline_runtime();
    let set_policy = |value: serde_json::Value| {
        json!({"set": [{"phase": "enforce-ml-policy", "target": "info",
            "pointer": "/runtimePolicy/mlPolicy/other", "value": value}]})
    };
    let victim = || {
        keyed(
            &rt,
            "other",
            &["mlPolicy.other"],
            json!({"attack": "panic"}),
        )
    };
    // Pull in: an earlier plugin writes the policy into the info; the
    // plugin it names is still not called for this runtime.
    let set = PluginSet::new(vec![
        keyed(&rt, "puller", &[], set_policy(json!({}))),
        victim(),
    ])
    .unwrap();
    let out = set.reconcile(&trainjob(), &info()).unwrap();
    assert_eq!(
        out.info.runtime_policy.get("mlPolicy.other"),
        Some(&json!({}))
    );
    // Keep out: an earlier plugin erases the policy the runtime sets; the
    // plugin serving it is still called (and here fails the pass).
    let set = PluginSet::new(vec![
        keyed(&rt, "eraser", &[], set_policy(serde_json::Value::Null)),
        victim(),
    ])
    .unwrap();
    let e = set
        .reconcile(&trainjob(), &info_with_ml("other"))
        .unwrap_err();
    assert_eq!(e.reason(), "Trap", "{e}");
    assert!(e.to_string().contains("other"), "{e}");
}
