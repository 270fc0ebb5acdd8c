//! The `ClusterTrainerPlugin` CRD and controller on a real kube-apiserver:
//! the CRD's CEL rules refuse bad specs with clear messages; the default
//! manifests serve exactly the builtin set (same order, same rendered
//! objects as `trainforge render`); editing a CR hot-swaps its plugin; a
//! wrong digest, a corrupt or incompatible module, a missing ConfigMap key
//! or a duplicate name is refused with its reason while the last good
//! version keeps serving; a restarted controller restores it and writes
//! nothing; pointing back rolls back; deleting a CR takes its plugin out of
//! service; a resync writes nothing.
//!
//! The controller runs in-process, watching only the CRs labelled for its
//! test (tests share one API server). Prints the time from a CR edit to the
//! new digest serving (a figure, never asserted).
//!
//! Also: `trainforge plugin run --record` against this API server and
//! `--replay` without one give the same output for a plugin that reads a
//! cluster object (the MPI plugin's SSH Secret).
//!
//! Skips (passes with a note on stderr) when the control plane is not built;
//! `TRAINFORGE_TESTENV_REQUIRED=1` makes that a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::catalog_common::{WAIT, condition, status_of, wait_cr};
use crate::plugin_common::{incompatible_wasm, minimal_wasm};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use trainforge::cmd::render::{Input, builtin_plugins, render};
use trainforge::controller::catalog::{self, Options, PluginCatalog};
use trainforge::plugin::{NoObjects, PluginRuntime, PluginSet, RuntimeConfig, sha256_hex};
use trainforge_api::plugin::KindRef;
use trainforge_api::trainforge::v1alpha1::{ClusterTrainerPlugin, FailurePolicy, cel};
use trainforge_testenv::{Mode, TestEnv};

const TEST_LABEL: &str = "trainforge.dev/test";

fn env() -> Option<&'static TestEnv> {
    trainforge_testenv::require!(Mode::Api)
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The documents listed by `manifests/plugins/kustomization.yaml`.
fn default_manifests() -> Vec<Value> {
    let dir = root().join("manifests/plugins");
    let k: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
            .unwrap();
    k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(dir.join(f.as_str().unwrap())).unwrap();
            serde_saphyr::from_str(&text).unwrap()
        })
        .collect()
}

struct Operator {
    catalog: Arc<PluginCatalog>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), catalog::Error>>,
}

impl Operator {
    /// A controller with a fresh catalog and runtime; `cache_dir` is the
    /// artifact disk cache (the operator's `--plugin-cache-dir`).
    fn start(client: &kube::Client, selector: &str, cache_dir: &Path) -> Operator {
        let config = RuntimeConfig {
            cache_dir: Some(cache_dir.to_path_buf()),
            ..RuntimeConfig::default()
        };
        let runtime = Arc::new(PluginRuntime::new(config).unwrap());
        let catalog = Arc::new(PluginCatalog::new(runtime, Arc::new(NoObjects)));
        let stop = CancellationToken::new();
        let opts = Options {
            label_selector: Some(selector.to_owned()),
            ..Options::default()
        };
        let task = tokio::spawn(catalog::run_with(
            client.clone(),
            catalog.clone(),
            stop.clone(),
            opts,
        ));
        Operator {
            catalog,
            stop,
            task,
        }
    }

    /// Wait until `pred` holds for the catalog (woken by swaps).
    async fn until(&self, what: &str, pred: impl Fn(&PluginCatalog) -> bool) {
        let mut swaps = self.catalog.subscribe();
        let deadline = Instant::now() + WAIT;
        while !pred(&self.catalog) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {:?}",
                self.catalog
            );
            tokio::select! {
                _ = swaps.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(2)) => {}
            }
        }
    }

    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

fn ids(set: &PluginSet) -> Vec<(String, String)> {
    set.plugins()
        .iter()
        .map(|p| (p.name().to_owned(), p.sha256().to_owned()))
        .collect()
}

/// MPI SSH keys come from host randomness: compare everything else.
fn redact_random(objects: &mut [Value]) {
    for o in objects
        .iter_mut()
        .filter(|o| o["kind"] == "Secret" && o["type"] == "kubernetes.io/ssh-auth")
    {
        if let Some(data) = o.get_mut("data").and_then(Value::as_object_mut) {
            data.values_mut().for_each(|v| *v = json!("<random>"));
        }
    }
}

/// Render every golden case's inputs with `set`: objects (redacted),
/// warnings or error per TrainJob, by case.
fn render_all(set: &PluginSet) -> BTreeMap<String, Vec<String>> {
    let golden = root().join("host/tests/golden");
    let mut out = BTreeMap::new();
    for case in std::fs::read_dir(&golden)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("inputs").is_file())
    {
        let mut input = Input::new().unwrap();
        let list = std::fs::read_to_string(case.join("inputs")).unwrap();
        let mut results = Vec::new();
        for line in list
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let text = std::fs::read_to_string(root().join(line)).unwrap();
            if let Err(e) = input.add_yaml(line, &text, "default") {
                results.push(format!("input error: {e}"));
            }
        }
        match render(&input, set) {
            Err(e) => results.push(format!("render error: {e}")),
            Ok(jobs) => {
                for (job, r) in jobs {
                    results.push(match r {
                        Ok(mut r) => {
                            redact_random(&mut r.objects);
                            format!(
                                "{:?}: {} {:?}",
                                job.metadata.name,
                                Value::Array(r.objects),
                                r.warnings
                            )
                        }
                        Err(e) => format!("{:?}: error {e}", job.metadata.name),
                    });
                }
            }
        }
        out.insert(
            case.file_name().unwrap().to_string_lossy().into_owned(),
            results,
        );
    }
    out
}

fn expect_invalid<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>, message: &str) {
    match result {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(message) => {}
        Err(kube::Error::Api(s)) => panic!(
            "{what}: expected 422 with {message:?}, got {} {:?}",
            s.code, s.message
        ),
        Err(e) => panic!("{what}: expected 422 with {message:?}, got {e}"),
        Ok(p) => panic!("{what}: accepted, expected 422 with {message:?}: {p:?}"),
    }
}

fn cr_json(name: &str, label: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "trainforge.dev/v1alpha1",
        "kind": "ClusterTrainerPlugin",
        "metadata": {"name": name, "labels": {TEST_LABEL: label}},
        "spec": spec,
    })
}

fn cr(name: &str, label: &str, spec: Value) -> ClusterTrainerPlugin {
    serde_json::from_value(cr_json(name, label, spec)).unwrap()
}

#[tokio::test]
async fn crd_rules_reject_bad_specs() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("ctp-rules").await.unwrap();
    let api: Api<ClusterTrainerPlugin> = Api::all(client.clone());
    // Untyped, so that values the Rust types cannot hold reach the server.
    let raw: Api<DynamicObject> =
        Api::all_with(client, &ApiResource::erase::<ClusterTrainerPlugin>(&()));
    let pp = PostParams::default();
    let digest = "a".repeat(64);
    let cm = json!({"namespace": "plugins", "name": "modules", "key": "x.wasm"});

    let cases = [
        (
            "two sources",
            json!({"source": {"builtin": "torch", "url": "https://example.com/x.wasm"}, "sha256": digest}),
            cel::ONE_SOURCE.message,
        ),
        ("no source", json!({"source": {}}), cel::ONE_SOURCE.message),
        (
            "configMap without sha256",
            json!({"source": {"configMap": cm}}),
            cel::SHA256_UNLESS_BUILTIN.message,
        ),
        (
            "http URL",
            json!({"source": {"url": "http://example.com/x.wasm"}, "sha256": digest}),
            cel::URL_SCHEME.message,
        ),
        (
            "short sha256",
            json!({"source": {"configMap": cm}, "sha256": "abc"}),
            cel::SHA256_HEX.message,
        ),
        (
            "timeout too long",
            json!({"source": {"builtin": "torch"}, "limits": {"timeout": "1m"}}),
            cel::TIMEOUT_RANGE.message,
        ),
        (
            "timeout not a duration",
            json!({"source": {"builtin": "torch"}, "limits": {"timeout": "soon"}}),
            cel::TIMEOUT_RANGE.message,
        ),
        (
            "timeout below 10 ms",
            json!({"source": {"builtin": "torch"}, "limits": {"timeout": 5}}),
            cel::TIMEOUT_RANGE.message,
        ),
        (
            "memory above 1Gi",
            json!({"source": {"builtin": "torch"}, "limits": {"memory": "2Gi"}}),
            cel::MEMORY_RANGE.message,
        ),
        (
            "memory 0 MiB",
            json!({"source": {"builtin": "torch"}, "limits": {"memory": 0}}),
            cel::MEMORY_RANGE.message,
        ),
        (
            "no calls at once",
            json!({"source": {"builtin": "torch"}, "limits": {"concurrency": 0}}),
            "should be greater than or equal to 1",
        ),
        (
            "65 calls at once",
            json!({"source": {"builtin": "torch"}, "limits": {"concurrency": 65}}),
            "should be less than or equal to 64",
        ),
        (
            "unknown phase",
            json!({"source": {"builtin": "torch"}, "phases": ["compile"]}),
            "Unsupported value: \"compile\"",
        ),
        (
            "unknown failure policy",
            json!({"source": {"builtin": "torch"}, "failurePolicy": "Retry"}),
            "Unsupported value: \"Retry\"",
        ),
    ];
    for (i, (what, spec, message)) in cases.into_iter().enumerate() {
        let obj: DynamicObject =
            serde_json::from_value(cr_json(&format!("bad-{i}-{ns}"), &ns, spec)).unwrap();
        let r = raw.create(&pp, &obj).await;
        expect_invalid(what, r, message);
    }

    // Valid specs are accepted, with defaults filled in.
    let ok = [
        json!({"source": {"builtin": "torch"}}),
        json!({"source": {"configMap": cm}, "sha256": digest, "limits": {"timeout": "1500ms", "memory": "256Mi"}}),
        json!({"source": {"url": "https://plugins.example.com/torch.wasm"}, "sha256": digest, "limits": {"timeout": 250, "memory": 128}}),
        json!({"source": {"url": "file:///var/lib/plugins/torch.wasm"}, "sha256": digest, "config": {"nested": {"a": [1, 2]}}, "allowedKinds": [{"apiVersion": "v1", "kind": "ConfigMap"}], "phases": ["build"], "grants": {"random": true}}),
    ];
    for (i, spec) in ok.into_iter().enumerate() {
        let name = format!("ok-{i}-{ns}");
        let created = api
            .create(&pp, &cr(&name, &ns, spec.clone()))
            .await
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(created.spec.order, Some(0), "{spec}");
        assert_eq!(
            created.spec.failure_policy,
            Some(FailurePolicy::Fail),
            "{spec}"
        );
        if let Some(config) = spec.get("config") {
            // Free-form config is kept, not pruned.
            assert_eq!(&Value::Object(created.spec.config.clone().unwrap()), config);
        }
        api.delete(&name, &DeleteParams::default()).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_plugins_hot_swap_refuse_and_roll_back() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("ctp-swap").await.unwrap();
    let selector = format!("{TEST_LABEL}={ns}");
    let api: Api<ClusterTrainerPlugin> = Api::all(client.clone());
    let apply = PatchParams::apply("plugin-config-test").force();

    // The default manifests, labelled for this test's controller.
    let manifests = default_manifests();
    let names: Vec<String> = manifests
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names.len(),
        trainforge::plugin::builtin::all().len(),
        "one ClusterTrainerPlugin per builtin"
    );
    for mut doc in manifests {
        doc["metadata"]["labels"][TEST_LABEL] = json!(ns);
        let name = doc["metadata"]["name"].as_str().unwrap().to_owned();
        api.patch(&name, &apply, &Patch::Apply(&doc)).await.unwrap();
    }

    let cache = tempfile::tempdir().unwrap();
    let op = Operator::start(&client, &selector, cache.path());
    let t0 = Instant::now();
    op.until("the initial list to load", |c| c.is_synced())
        .await;
    eprintln!(
        "plugin_config: {} builtin ClusterTrainerPlugins loaded and in service after {:?} (cold compile)",
        names.len(),
        t0.elapsed()
    );
    for name in &names {
        let p = wait_cr(&api, name, "Ready=True", |p| {
            condition(p, "Ready").is_some_and(|c| c.0 == "True")
        })
        .await;
        for t in ["Fetched", "Verified", "Compiled"] {
            assert_eq!(
                condition(&p, t).unwrap().0,
                "True",
                "{name} {t}: {}",
                status_of(&p)
            );
        }
        assert_eq!(condition(&p, "Verified").unwrap().1, "Builtin");
        assert_eq!(condition(&p, "Degraded").unwrap().0, "False");
        let s = p.status.as_ref().unwrap();
        assert_eq!(
            s.serving_digest.as_deref(),
            op.catalog.serving_digest(name).as_deref()
        );
        assert_eq!(
            s.plugin.as_ref().unwrap().name,
            *name,
            "the builtin CR names match plugin names"
        );
        assert_eq!(s.last_error, None);
    }

    // Exactly the builtin set, in the same order: the operator renders what
    // `trainforge render` renders.
    let builtin = builtin_plugins().unwrap();
    assert_eq!(ids(&op.catalog.current()), ids(&builtin));
    assert_eq!(render_all(&op.catalog.current()), render_all(&builtin));
    let kinds = op.catalog.kinds();
    for k in [
        KindRef::new("jobset.x-k8s.io/v1alpha2", "JobSet"),
        KindRef::new("v1", "Secret"),
        KindRef::new("v1", "ConfigMap"),
    ] {
        assert!(kinds.contains(&k), "kinds() lacks {k}: {kinds:?}");
    }

    // A resync (metadata-only change: same generation) loads nothing and
    // writes no status.
    let (writes, loads) = (op.catalog.status_writes(), op.catalog.loads());
    let touched = api
        .patch(
            "jax",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = api.get("jax").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, touched.metadata.resource_version,
        "status rewritten on resync"
    );
    assert_eq!(
        (op.catalog.status_writes(), op.catalog.loads()),
        (writes, loads)
    );

    // Modules held in a ConfigMap.
    let minimal = std::fs::read(minimal_wasm()).unwrap();
    let corrupt = b"\0asm\x0d\0\x01\0this is not a component".to_vec();
    let incompatible = std::fs::read(incompatible_wasm()).unwrap();
    let (d_min, d_corrupt, d_incompatible) = (
        sha256_hex(&minimal),
        sha256_hex(&corrupt),
        sha256_hex(&incompatible),
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("modules".into()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([
            ("minimal.wasm".to_owned(), ByteString(minimal)),
            ("corrupt.wasm".to_owned(), ByteString(corrupt)),
            ("incompatible.wasm".to_owned(), ByteString(incompatible)),
        ])),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let from_cm = |key: &str, sha: &str| json!({"spec": {"source": {"builtin": null, "configMap": {"namespace": ns, "name": "modules", "key": key}}, "sha256": sha}});
    let to_builtin =
        json!({"spec": {"source": {"builtin": "plainml", "configMap": null}, "sha256": null}});
    let d_plainml = op.catalog.serving_digest("plainml").unwrap();

    // Edit plainml to the example plugin and back, timing edit → serving.
    let mut times = Vec::new();
    for i in 0..7 {
        let (patch, want) = if i % 2 == 0 {
            (from_cm("minimal.wasm", &d_min), &d_min)
        } else {
            (to_builtin.clone(), &d_plainml)
        };
        let t = Instant::now();
        api.patch("plainml", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
        op.until("the new digest to serve", |c| {
            c.serving_digest("plainml").as_ref() == Some(want)
        })
        .await;
        times.push(t.elapsed());
    }
    let cold = times.remove(0);
    times.sort();
    eprintln!(
        "plugin_config: CR edit → new digest serving: first (cold compile of a new module) {cold:?}; median of {} later edits (warm artifact cache) {:?}; min {:?}, max {:?}",
        times.len(),
        times[times.len() / 2],
        times[0],
        times[times.len() - 1],
    );
    let p = wait_cr(&api, "plainml", "serving the example plugin", |p| {
        p.status.as_ref().and_then(|s| s.serving_digest.as_ref()) == Some(&d_min)
    })
    .await;
    assert_eq!(
        condition(&p, "Ready").unwrap().1,
        "Serving",
        "{}",
        status_of(&p)
    );
    assert_eq!(condition(&p, "Verified").unwrap().1, "DigestMatched");
    assert_eq!(
        p.status.as_ref().unwrap().plugin.as_ref().unwrap().name,
        "minimal"
    );
    let mut expected = ids(&builtin);
    let at = expected.iter().position(|(n, _)| n == "plainml").unwrap();
    expected[at] = ("minimal".into(), d_min.clone());
    assert_eq!(
        ids(&op.catalog.current()),
        expected,
        "the example plugin takes plainml's place (order 500)"
    );
    let serving_minimal = ids(&op.catalog.current());

    // Refused versions: the example plugin keeps serving.
    let refusals = [
        (
            "wrong digest",
            from_cm("minimal.wasm", &"0".repeat(64)),
            "Verified",
            "DigestMismatch",
        ),
        (
            "corrupt module",
            from_cm("corrupt.wasm", &d_corrupt),
            "Compiled",
            "LoadFailed",
        ),
        (
            "incompatible interface",
            from_cm("incompatible.wasm", &d_incompatible),
            "Compiled",
            "IncompatibleInterface",
        ),
        (
            "missing key",
            from_cm("absent.wasm", &d_min),
            "Fetched",
            "NotFound",
        ),
    ];
    for (what, patch, stage, reason) in refusals {
        let swaps = *op.catalog.subscribe().borrow();
        api.patch("plainml", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
        let p = wait_cr(&api, "plainml", what, |p| {
            condition(p, "Degraded").is_some_and(|c| c.0 == "True")
        })
        .await;
        let (status, r, message) = condition(&p, stage).unwrap();
        assert_eq!((status, r), ("False", reason), "{what}: {}", status_of(&p));
        assert_eq!(condition(&p, "Degraded").unwrap().1, reason, "{what}");
        assert_eq!(
            condition(&p, "Ready").unwrap().0,
            "True",
            "{what}: last good version still serving"
        );
        assert_eq!(
            condition(&p, "Ready").unwrap().1,
            "ServingLastKnownGood",
            "{what}"
        );
        let s = p.status.as_ref().unwrap();
        assert_eq!(s.serving_digest.as_deref(), Some(d_min.as_str()), "{what}");
        assert_eq!(s.last_error.as_deref(), Some(message), "{what}");
        assert!(!message.is_empty());
        assert_eq!(
            ids(&op.catalog.current()),
            serving_minimal,
            "{what}: set unchanged"
        );
        assert_eq!(*op.catalog.subscribe().borrow(), swaps, "{what}: no swap");
        eprintln!("plugin_config: {what}: {stage}=False {reason}: {message}");
    }

    // A restarted controller (fresh process state and memory cache, same
    // disk cache) serves the same set — the example plugin restored from the
    // status while the current spec still fails — and writes no status.
    op.stop().await;
    let op = Operator::start(&client, &selector, cache.path());
    let t = Instant::now();
    op.until("the restarted catalog to sync", |c| c.is_synced())
        .await;
    eprintln!(
        "plugin_config: restart → set in service after {:?} (artifacts from the disk cache)",
        t.elapsed()
    );
    assert_eq!(
        ids(&op.catalog.current()),
        serving_minimal,
        "restored after restart"
    );
    assert_eq!(
        op.catalog.serving_digest("plainml").as_deref(),
        Some(d_min.as_str())
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(op.catalog.status_writes(), 0, "a restart rewrote status");

    // Pointing back at the first digest rolls back.
    let t = Instant::now();
    api.patch(
        "plainml",
        &PatchParams::default(),
        &Patch::Merge(to_builtin.clone()),
    )
    .await
    .unwrap();
    op.until("the builtin to serve again", |c| {
        c.serving_digest("plainml") == Some(d_plainml.clone())
    })
    .await;
    eprintln!(
        "plugin_config: roll back to the builtin digest serving after {:?}",
        t.elapsed()
    );
    let p = wait_cr(&api, "plainml", "rolled back", |p| {
        condition(p, "Degraded").is_some_and(|c| c.0 == "False")
    })
    .await;
    assert_eq!(
        p.status.as_ref().unwrap().serving_digest.as_deref(),
        Some(d_plainml.as_str())
    );
    assert_eq!(p.status.as_ref().unwrap().last_error, None);
    assert_eq!(condition(&p, "Ready").unwrap().1, "Serving");
    assert_eq!(ids(&op.catalog.current()), ids(&builtin));

    // A file:// URL (on the operator's file system) serves too.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("minimal.wasm");
    std::fs::copy(minimal_wasm(), &path).unwrap();
    let url = format!("file://{}", path.display());
    let patch = json!({"spec": {"source": {"builtin": null, "url": url}, "sha256": d_min}});
    api.patch("plainml", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    op.until("the file:// module to serve", |c| {
        c.serving_digest("plainml") == Some(d_min.clone())
    })
    .await;
    let p = wait_cr(&api, "plainml", "serving from file://", |p| {
        condition(p, "Degraded").is_some_and(|c| c.0 == "False")
    })
    .await;
    assert!(
        condition(&p, "Fetched").unwrap().2.contains(&url),
        "{}",
        status_of(&p)
    );
    api.patch(
        "plainml",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"source": {"builtin": "plainml", "url": null}, "sha256": null}}),
        ),
    )
    .await
    .unwrap();
    op.until("the builtin to serve again", |c| {
        c.serving_digest("plainml") == Some(d_plainml.clone())
    })
    .await;

    // A second CR serving an already-served plugin name is refused.
    let twin = cr(
        "plainml-twin",
        &ns,
        json!({"source": {"builtin": "plainml"}, "order": 1}),
    );
    api.create(&PostParams::default(), &twin).await.unwrap();
    let p = wait_cr(&api, "plainml-twin", "refused", |p| {
        condition(p, "Degraded").is_some_and(|c| c.0 == "True")
    })
    .await;
    assert_eq!(
        condition(&p, "Compiled").unwrap().1,
        "DuplicateName",
        "{}",
        status_of(&p)
    );
    assert_eq!(condition(&p, "Ready").unwrap().0, "False");
    assert!(
        condition(&p, "Compiled")
            .unwrap()
            .2
            .contains("ClusterTrainerPlugin plainml")
    );
    assert_eq!(ids(&op.catalog.current()), ids(&builtin));
    api.delete("plainml-twin", &DeleteParams::default())
        .await
        .unwrap();

    // Deleting a CR takes its plugin out of service.
    api.delete("torch", &DeleteParams::default()).await.unwrap();
    op.until("torch to leave the set", |c| {
        c.current().plugins().iter().all(|p| p.name() != "torch")
    })
    .await;
    let mut expected = ids(&builtin);
    expected.retain(|(n, _)| n != "torch");
    assert_eq!(ids(&op.catalog.current()), expected);
    assert_eq!(op.catalog.serving_digest("torch"), None);

    op.stop().await;
    for name in names.iter().filter(|n| *n != "torch") {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
}

/// `plugin run --record` reads the MPI plugin's SSH Secret from the API
/// server (so the plugin does not generate a new one), and `--replay` feeds
/// the recording back with no cluster at all: the same output, byte for
/// byte. A read the recording does not hold (another TrainJob's Secret) is
/// refused, naming it.
#[tokio::test]
async fn plugin_run_records_and_replays_cluster_reads() {
    use k8s_openapi::api::core::v1::Secret;
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("record").await.unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "mpi-job-mpi-ssh-auth", "namespace": ns},
        "type": "kubernetes.io/ssh-auth",
        "data": {"ssh-privatekey": "a2V5", "ssh-publickey": "cHVi"}}))
    .unwrap();
    Api::<Secret>::namespaced(client, &ns)
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let wasm = d.join("plugin_mpi.wasm");
    std::fs::write(
        &wasm,
        trainforge::plugin::builtin::find("mpi").unwrap().wasm,
    )
    .unwrap();
    let runtime = root().join("api/tests/fixtures/upstream/deepspeed-distributed.yaml");
    let trainjob = |name: &str| {
        let p = d.join(format!("{name}.yaml"));
        std::fs::write(&p, format!("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  runtimeRef:\n    name: deepspeed-distributed\n")).unwrap();
        p
    };
    let recording = d.join("recording.json");
    let run = |tj: &Path, how: &[&str], kubeconfig: &Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_trainforge"))
            .args(["plugin", "run"])
            .arg(&wasm)
            .arg("--trainjob")
            .arg(tj)
            .arg("--runtime")
            .arg(&runtime)
            .args(how)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let job = trainjob("mpi-job");
    let rec = recording.to_str().unwrap();
    let (ok, recorded, err) = run(&job, &["--record", rec], env.kubeconfig());
    assert!(ok, "{err}");
    let out: Value = serde_json::from_str(&recorded).unwrap();
    let kinds: Vec<&str> = out["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert!(
        !kinds.contains(&"Secret"),
        "the Secret was read from the cluster, not generated: {kinds:?}"
    );
    assert!(kinds.contains(&"ConfigMap"), "{kinds:?}");
    assert!(err.contains("holds the data of Secret"), "{err}");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&recording).unwrap()).unwrap();
    assert!(
        file["recorded"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "Secret"
                && e["name"] == "mpi-job-mpi-ssh-auth"
                && e["object"]["data"]["ssh-publickey"] == "cHVi"),
        "{file}"
    );

    // No cluster: the recording answers.
    let nowhere = d.join("no-such-kubeconfig");
    let (ok, replayed, err) = run(&job, &["--replay", rec], &nowhere);
    assert!(ok, "{err}");
    assert_eq!(
        replayed, recorded,
        "the replay gives the recorded run's output"
    );
    let (ok, _, err) = run(&trainjob("other-job"), &["--replay", rec], &nowhere);
    assert!(!ok);
    assert!(
        err.contains("v1/Secret") && err.contains("other-job-mpi-ssh-auth was not recorded"),
        "{err}"
    );

    // A `plugin test` case holding the recording: its golden is the
    // recorded run's output, without the plugin's digest.
    let case = d.join("cases/recorded");
    std::fs::create_dir_all(&case).unwrap();
    std::fs::copy(&job, case.join("trainjob.yaml")).unwrap();
    std::fs::copy(&runtime, case.join("runtime.yaml")).unwrap();
    std::fs::copy(&recording, case.join("recording.json")).unwrap();
    let cases = d.join("cases");
    for update in [true, false] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_trainforge"));
        cmd.args(["plugin", "test"])
            .arg(&wasm)
            .arg("--cases")
            .arg(&cases)
            .env("KUBECONFIG", &nowhere);
        if update {
            cmd.arg("--update");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut golden: Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("expected.json")).unwrap())
            .unwrap();
    let mut want = out.clone();
    want.as_object_mut().unwrap().remove("plugin");
    golden.as_object_mut().unwrap().remove("plugin");
    assert_eq!(golden, want);
}
