//! Shared pieces of the operator end-to-end tests: the operator binary as a
//! child process (killed with the test process), applying YAML, reading
//! objects and metrics.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::Value;
use trainforge_testenv::TestEnv;
use trainforge_testenv::process::{Proc, spawn};

/// Workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Print to the real stderr (not captured by libtest), for figures.
pub fn report(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

type Job = Box<dyn FnOnce(&mut Option<Proc>) + Send>;

use trainforge_testenv::webhooks::Front;

/// The env's webhook front (the operators' Service), with the shipped
/// webhook configurations registered against it on first use.
pub fn webhook_front(env: &TestEnv) -> &'static Front {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static FRONTS: OnceLock<Mutex<HashMap<String, &'static Front>>> = OnceLock::new();
    let mut fronts = FRONTS.get_or_init(Default::default).lock().unwrap();
    if let Some(f) = fronts.get(env.server_url()) {
        return f;
    }
    let front: &'static Front = Box::leak(Box::new(Front::start().unwrap()));
    // Registered from a thread of its own: callers may be inside a runtime.
    let (kubeconfig, addr) = (env.kubeconfig().to_path_buf(), front.addr());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let config = kube::Config::from_custom_kubeconfig(
                kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
                &Default::default(),
            )
            .await
            .unwrap();
            let client = kube::Client::try_from(config).unwrap();
            trainforge_testenv::webhooks::register(&client, &root(), addr)
                .await
                .unwrap();
        })
    })
    .join()
    .unwrap();
    fronts.insert(env.server_url().to_owned(), front);
    front
}

/// The operator binary running against a test environment. The process is
/// owned by a thread that lives as long as the test process, so it dies
/// with it (PDEATHSIG) even when tests panic.
pub struct Operator {
    tx: mpsc::Sender<Job>,
    /// `host:port` of `/healthz`, `/readyz` and (unless the test serves it
    /// on an address of its own) `/metrics`.
    pub metrics: String,
    /// Where its admission server listens (behind the env's [`Front`]).
    pub webhook: std::net::SocketAddr,
    front: &'static Front,
    /// The operator's log file.
    pub log: PathBuf,
    args: Vec<String>,
    kubeconfig: PathBuf,
}

/// The builtins precompiled for this `trainforge` binary, shared by every
/// operator of every test process, as the image ships them beside the
/// binary (`trainforge plugin precompile`, Dockerfile): an operator that
/// starts does not compile the builtins again (~1.5 s of CPU each in a dev
/// build, for each of the suite's operators). Artifacts are keyed by the
/// component's digest and the engine's configuration, so a stale one from
/// an older build is never used; `precompile` reuses the ones present
/// (writes are atomic renames: processes may precompile at once). `None`
/// when precompiling fails: the operator then compiles, as before.
fn shared_builtin_artifacts() -> Option<&'static Path> {
    use std::sync::OnceLock;
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = root().join("target/test-builtin-artifacts");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_trainforge"))
            .args(["plugin", "precompile", "--out"])
            .arg(&dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(dir),
            Ok(o) => {
                report(&format!(
                    "operator_common: precompiling the builtins failed; operators compile them: {}",
                    String::from_utf8_lossy(&o.stderr)
                ));
                None
            }
            Err(e) => {
                report(&format!("operator_common: running trainforge: {e}"));
                None
            }
        }
    })
    .as_deref()
}

fn operator_args(metrics: &str, webhook: &str, cache: &Path, extra: &[&str]) -> Vec<String> {
    // A test that says where artifacts come from (or that there are none)
    // keeps its own choice.
    let artifacts = if extra
        .iter()
        .any(|a| a.starts_with("--plugin-artifacts-dir") || a.starts_with("--no-plugin-artifacts"))
    {
        None
    } else {
        shared_builtin_artifacts()
    };
    // A test that serves /metrics on its own address (securely) keeps the
    // probes here.
    let own_metrics = extra
        .iter()
        .any(|a| a.starts_with("--metrics-bind-address"));
    let mut args: Vec<String> = [
        "operator",
        "--metrics-bind-address",
        metrics,
        "--health-probe-bind-address",
        metrics,
        "--plugin-cache-dir",
        cache.to_str().unwrap(),
        "--webhook-bind-address",
        webhook,
        "--webhook-host",
        "127.0.0.1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if own_metrics {
        args.drain(1..3);
    }
    if let Some(dir) = artifacts {
        args.push(format!("--plugin-artifacts-dir={}", dir.display()));
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

impl Operator {
    /// Start `trainforge operator` with `extra` flags (admin credentials).
    pub fn start(env: &TestEnv, name: &str, extra: &[&str]) -> Operator {
        Self::start_as(env, name, extra, env.kubeconfig())
    }

    /// Start `trainforge operator` with `extra` flags, authenticating with
    /// `kubeconfig` (e.g. a token of its ServiceAccount).
    pub fn start_as(env: &TestEnv, name: &str, extra: &[&str], kubeconfig: &Path) -> Operator {
        let port = trainforge_testenv::ports::free_port().unwrap();
        let metrics = format!("127.0.0.1:{port}");
        let cache = env.dir().join("plugin-cache");
        std::fs::create_dir_all(&cache).unwrap();
        let logs = env.dir().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let webhook: std::net::SocketAddr = (
            [127, 0, 0, 1],
            trainforge_testenv::ports::free_port().unwrap(),
        )
            .into();
        let args = operator_args(&metrics, &webhook.to_string(), &cache, extra);
        let front = webhook_front(env);
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            let mut proc: Option<Proc> = None;
            while let Ok(job) = rx.recv() {
                job(&mut proc);
            }
            // Keep the thread (and so the child) alive until the process ends.
            loop {
                std::thread::park();
            }
        });
        let op = Operator {
            tx,
            metrics,
            webhook,
            front,
            log: logs.join(format!("{name}.log")),
            args,
            kubeconfig: kubeconfig.to_path_buf(),
        };
        op.spawn(name, &logs);
        op
    }

    fn run<R: Send + 'static>(&self, f: impl FnOnce(&mut Option<Proc>) -> R + Send + 'static) -> R {
        let (rtx, rrx) = mpsc::channel();
        self.tx
            .send(Box::new(move |p: &mut Option<Proc>| {
                let _ = rtx.send(f(p));
            }))
            .unwrap();
        rrx.recv().unwrap()
    }

    fn spawn(&self, name: &str, logs: &Path) {
        self.front.add(self.webhook);
        let (name, logs, args, kubeconfig) = (
            name.to_owned(),
            logs.to_path_buf(),
            self.args.clone(),
            self.kubeconfig.clone(),
        );
        self.run(move |p| {
            let mut bin = PathBuf::from(env!("CARGO_BIN_EXE_trainforge"));
            // Profiling hook: TRAINFORGE_E2E_OPERATOR_WRAPPER="heaptrack -o /tmp/op"
            // runs the operator as `heaptrack -o /tmp/op trainforge operator ...`.
            // A wrapper that forks (heaptrack does) leaves the operator
            // outside the kill-on-parent-death chain: kill it after the run.
            let mut args = args;
            if let Ok(wrapper) = std::env::var("TRAINFORGE_E2E_OPERATOR_WRAPPER") {
                let mut words: Vec<String> =
                    wrapper.split_whitespace().map(str::to_owned).collect();
                if !words.is_empty() {
                    let real = std::mem::replace(&mut bin, PathBuf::from(words.remove(0)));
                    words.push(real.to_string_lossy().into_owned());
                    words.extend(args);
                    args = words;
                }
            }
            let kc = kubeconfig.to_str().unwrap().to_owned();
            // The operator's own namespace (its webhook certificate Secret
            // lives there): the Lease namespace when one is given, as in a
            // Deployment where both are the pod's namespace.
            let pod_namespace = args
                .iter()
                .position(|a| a == "--lease-namespace")
                .and_then(|i| args.get(i + 1))
                .cloned()
                .unwrap_or_else(|| "default".to_owned());
            let env = [
                ("KUBECONFIG", kc.as_str()),
                ("RUST_LOG", "info,kube=warn,tower=warn,hyper=warn"),
                ("TRAINFORGE_LOG_FORMAT", "text"),
                ("POD_NAMESPACE", pod_namespace.as_str()),
            ];
            *p = Some(spawn(&name, &bin, &args, &logs, &env).unwrap());
        });
    }

    /// Kill the operator at once (SIGKILL), as a crash would. Its admission
    /// server leaves the front (as a pod leaves its Service's endpoints).
    pub fn kill(&self) {
        self.front.remove(self.webhook);
        self.run(|p| {
            if let Some(mut proc) = p.take() {
                proc.stop(Duration::ZERO);
            }
        });
    }

    /// Pause the operator (SIGSTOP), as a stalled node would.
    pub fn pause(&self) {
        self.run(|p| {
            if let Some(proc) = p.as_ref() {
                proc.pause();
            }
        });
    }

    /// Let a paused operator run again (SIGCONT).
    pub fn resume(&self) {
        self.run(|p| {
            if let Some(proc) = p.as_ref() {
                proc.resume();
            }
        });
    }

    /// How the operator exited, once it has.
    pub fn exit_status(&self) -> Option<std::process::ExitStatus> {
        self.run(|p| p.as_mut().and_then(|proc| proc.exit_status()))
    }

    /// SIGTERM the operator: how long it took to exit, `None` if it did not
    /// within `grace` (then it is killed).
    pub fn terminate(&self, grace: Duration) -> Option<Duration> {
        self.front.remove(self.webhook);
        self.run(move |p| p.take().and_then(|mut proc| proc.terminate(grace)))
    }

    /// Start it again after [`Operator::kill`] (same flags, log appended as `<name>-2`).
    pub fn restart(&self, name: &str) {
        let logs = self.log.parent().unwrap().to_path_buf();
        self.spawn(name, &logs);
    }

    /// Peak resident memory of the operator process, KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        self.run(|p| p.as_ref().and_then(Proc::peak_rss_kib))
    }

    /// Resident memory of the operator process now, KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        self.run(|p| p.as_ref().and_then(Proc::rss_kib))
    }

    /// The Prometheus text of `/metrics` (waits up to 60 s for the server).
    pub async fn scrape(&self) -> String {
        let url = format!("http://{}/metrics", self.metrics);
        let client = http();
        for _ in 0..300 {
            if let Ok(r) = client.get(&url).send().await
                && let Ok(t) = r.text().await
            {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("no /metrics at {url}; log:\n{}", self.log_tail(60));
    }

    /// Wait until `/readyz` answers 200.
    pub async fn wait_ready(&self) {
        let url = format!("http://{}/readyz", self.metrics);
        let client = http();
        for _ in 0..600 {
            if let Ok(r) = client.get(&url).send().await
                && r.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("operator never ready; log:\n{}", self.log_tail(80));
    }

    /// `/readyz` (or `/readyz?verbose`): status code and body; `None` while
    /// the server does not answer.
    pub async fn readyz(&self, verbose: bool) -> Option<(u16, String)> {
        let query = if verbose { "?verbose" } else { "" };
        let url = format!("http://{}/readyz{query}", self.metrics);
        let r = http().get(&url).send().await.ok()?;
        let code = r.status().as_u16();
        Some((code, r.text().await.ok()?))
    }

    /// Wait until `/healthz` answers (a standby replica is alive but not ready).
    pub async fn wait_ready_or_standby(&self) {
        let url = format!("http://{}/healthz", self.metrics);
        let client = http();
        for _ in 0..600 {
            if client
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("operator never alive; log:\n{}", self.log_tail(80));
    }

    /// The last lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        trainforge_testenv::process::log_tail(&self.log, n)
    }
}

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// Sum of the samples of metric `name` whose labels include every `labels` pair.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            if n != name {
                return None;
            }
            labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
                .then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// Server-side apply any object (discovery finds its resource).
pub async fn apply(client: &kube::Client, object: &Value) -> Value {
    let api = dynamic_api(client, object).await;
    let name = object["metadata"]["name"].as_str().unwrap();
    let o = api
        .patch(
            name,
            &PatchParams::apply("e2e-test").force(),
            &Patch::Apply(object),
        )
        .await;
    serde_json::to_value(o.unwrap_or_else(|e| panic!("applying {name}: {e}"))).unwrap()
}

async fn dynamic_api(client: &kube::Client, object: &Value) -> Api<DynamicObject> {
    let (group, version) = object["apiVersion"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap_or(("", object["apiVersion"].as_str().unwrap()));
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap());
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    match (caps.scope, object["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        (kube::discovery::Scope::Namespaced, None) => {
            Api::default_namespaced_with(client.clone(), &ar)
        }
        _ => Api::all_with(client.clone(), &ar),
    }
}

/// Every YAML document of a file, with `namespace` set when given.
pub fn docs(path: &Path, namespace: Option<&str>) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = trainforge_testenv::manifests::parse_yaml_docs(&text).unwrap();
    if let Some(ns) = namespace {
        for d in &mut out {
            d["metadata"]["namespace"] = Value::String(ns.into());
        }
    }
    out
}

/// Apply the default plugin configuration (`manifests/plugins/*.yaml`).
pub async fn apply_default_plugins(client: &kube::Client) {
    let dir = root().join("manifests/plugins");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no plugin configs in {}", dir.display());
    for f in files {
        for d in docs(&f, None) {
            apply(client, &d).await;
        }
    }
}

/// Until every shipped `ClusterTrainerPlugin` is `Ready=True` (so the set
/// in service, and so admission, has all of them).
pub async fn wait_default_plugins_ready(client: &kube::Client) {
    let dir = root().join("manifests/plugins");
    let names: Vec<String> = trainforge_testenv::manifests::yaml_files(&dir)
        .unwrap()
        .iter()
        .flat_map(|f| docs(f, None))
        .filter(|d| d["kind"] == "ClusterTrainerPlugin")
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    assert!(!names.is_empty());
    for name in names {
        eventually(
            &format!("ClusterTrainerPlugin {name} Ready"),
            Duration::from_secs(180),
            || async {
                let o = get(
                    client,
                    "trainforge.dev/v1alpha1",
                    "ClusterTrainerPlugin",
                    None,
                    &name,
                )
                .await?;
                is_true(&o, "Ready").then_some(())
            },
        )
        .await;
    }
}

/// Get an object as JSON (`None` if absent).
pub async fn get(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
    name: &str,
) -> Option<Value> {
    let mut probe = serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {}});
    if let Some(ns) = ns {
        probe["metadata"]["namespace"] = Value::String(ns.into());
    }
    let api = dynamic_api(client, &probe).await;
    api.get_opt(name)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

/// Delete an object (background propagation; absent is fine).
pub async fn delete(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
    name: &str,
) {
    let mut probe = serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {}});
    if let Some(ns) = ns {
        probe["metadata"]["namespace"] = Value::String(ns.into());
    }
    let api = dynamic_api(client, &probe).await;
    let _ = api.delete(name, &DeleteParams::background()).await;
}

/// The TrainJob as JSON.
pub async fn trainjob(client: &kube::Client, ns: &str, name: &str) -> Option<Value> {
    get(
        client,
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        Some(ns),
        name,
    )
    .await
}

/// The condition of `type_`, if any.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Whether the condition is `True`.
pub fn is_true(obj: &Value, type_: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c["status"] == "True")
}

/// Poll `f` every 200 ms until `Some`, panicking after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A TrainJob of `runtime` (a ClusterTrainingRuntime unless `kind` says otherwise).
pub fn trainjob_object(ns: &str, name: &str, runtime: &str, spec_extra: Value) -> Value {
    let mut spec = serde_json::json!({"runtimeRef": {"name": runtime}});
    if let (Some(s), Value::Object(extra)) = (spec.as_object_mut(), spec_extra) {
        s.extend(extra);
    }
    serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// Install the operator's shipped namespace, ServiceAccount and RBAC, and
/// return a kubeconfig with a token of its ServiceAccount (an hour long),
/// so that it runs with exactly the permissions it ships with.
pub async fn operator_service_account(env: &TestEnv, client: &kube::Client) -> PathBuf {
    for f in [
        "namespace.yaml",
        "service_account.yaml",
        "cluster_role.yaml",
        "cluster_role_binding.yaml",
        "leader_election_role.yaml",
        "leader_election_role_binding.yaml",
    ] {
        for d in docs(&root().join("manifests/operator").join(f), None) {
            apply(client, &d).await;
        }
    }
    let kubeconfig = env.dir().join("operator-sa.kubeconfig");
    trainforge_testenv::kubeconfig::write_service_account(
        env.kubeconfig(),
        "trainforge-system",
        "trainforge-operator",
        3600,
        &kubeconfig,
    )
    .await
    .unwrap();
    kubeconfig
}

/// Store a plugin component in ConfigMap `ns/name` (`binaryData`
/// `plugin.wasm`), the way an author ships one without a registry.
pub async fn store_component(client: &kube::Client, ns: &str, name: &str, bytes: &[u8]) {
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        binary_data: Some(std::collections::BTreeMap::from([(
            "plugin.wasm".to_owned(),
            k8s_openapi::ByteString(bytes.to_vec()),
        )])),
        ..Default::default()
    };
    cms.patch(
        name,
        &PatchParams::apply("trainforge-tests").force(),
        &Patch::Apply(&cm),
    )
    .await
    .unwrap();
}

/// Store `bytes` in ConfigMap `ns/cm` and point `ClusterTrainerPlugin`
/// `name` at it (order 100: before every builtin; failurePolicy Fail), with
/// `extra` merged into its spec.
pub async fn install_cluster_plugin(
    client: &kube::Client,
    ns: &str,
    cm: &str,
    name: &str,
    bytes: &[u8],
    extra: Value,
) {
    store_component(client, ns, cm, bytes).await;
    let mut spec = serde_json::json!({
        "source": {"configMap": {"namespace": ns, "name": cm, "key": "plugin.wasm"}},
        "sha256": trainforge::plugin::sha256_hex(bytes),
        "order": 100,
        "failurePolicy": "Fail",
    });
    if let (Some(s), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        s.extend(extra);
    }
    apply(
        client,
        &serde_json::json!({"apiVersion": "trainforge.dev/v1alpha1", "kind": "ClusterTrainerPlugin",
            "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

/// A TrainJob of `torch-distributed` asking the hostile test plugin named
/// `plugin` for `attack` (through its per-TrainJob annotation).
pub fn attacked(ns: &str, name: &str, plugin: &str, attack: Value) -> Value {
    let mut tj = trainjob_object(
        ns,
        name,
        "torch-distributed",
        serde_json::json!({"trainer": {"numNodes": 1}}),
    );
    tj["metadata"]["annotations"] =
        serde_json::json!({ format!("hostile.trainforge.dev/{plugin}"): attack.to_string() });
    tj
}

/// The notes of the Warning Events about the object `name` in `ns`.
pub async fn warnings(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns);
    let Ok(list) = events.list(&Default::default()).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.note)
        .collect()
}

/// Wait for a Warning Event about `name` containing every one of `words`.
pub async fn wait_warning(client: &kube::Client, ns: &str, name: &str, words: &[&str]) -> String {
    eventually(
        &format!("a Warning Event on {ns}/{name} with {words:?}"),
        Duration::from_secs(120),
        || async {
            warnings(client, ns, name)
                .await
                .into_iter()
                .find(|n| words.iter().all(|w| n.contains(w)))
        },
    )
    .await
}

/// Label `ns` so the TrainJob webhooks skip it (tests of what the controller
/// does with TrainJobs admission would refuse).
pub async fn bypass_admission(client: &kube::Client, ns: &str) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    api.patch(
        ns,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {
            trainforge_testenv::webhooks::BYPASS_LABEL: "off"}}})),
    )
    .await
    .unwrap();
}

// ------------------------------------------------ raw requests (admission)

/// What the API server answered to a create or update.
#[derive(Debug)]
pub struct Outcome {
    /// HTTP status code.
    pub code: u16,
    /// `message` of the Status on failure.
    pub message: String,
    /// `Warning` headers (their text).
    pub warnings: Vec<String>,
    /// The body.
    pub object: Value,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

fn path_of(obj: &Value, name: Option<&str>) -> String {
    let api_version = obj["apiVersion"].as_str().unwrap();
    let kind = obj["kind"].as_str().unwrap();
    let plural = match kind {
        "TrainJob" => "trainjobs",
        "TrainingRuntime" => "trainingruntimes",
        "ClusterTrainingRuntime" => "clustertrainingruntimes",
        "ClusterTrainerPlugin" => "clustertrainerplugins",
        "TrainerPlugin" => "trainerplugins",
        other => panic!("no plural for {other}"),
    };
    let mut p = format!("/apis/{api_version}");
    if let Some(ns) = obj.pointer("/metadata/namespace").and_then(Value::as_str) {
        p.push_str(&format!("/namespaces/{ns}"));
    }
    p.push_str(&format!("/{plural}"));
    if let Some(n) = name {
        p.push_str(&format!("/{n}"));
    }
    p
}

/// POST (`dry_run`: `?dryRun=All`, which runs admission but stores nothing)
/// and return code, message and `Warning` headers.
pub async fn create(client: &kube::Client, obj: &Value, dry_run: bool) -> Outcome {
    let mut uri = path_of(obj, None);
    if dry_run {
        uri.push_str("?dryRun=All");
    }
    send(client, http::Method::POST, &uri, obj).await
}

/// Until the TrainJob validating webhook answers in `ns` (the CA bundle is
/// in place and an operator listens): a TrainJob of a missing runtime is
/// refused by the webhook rather than by a TLS or connection error.
/// Returns the refusal's message.
pub async fn wait_admission(client: &kube::Client, ns: &str) -> String {
    let probe = trainjob_object(
        ns,
        "admission-probe",
        "absent-runtime",
        serde_json::json!({}),
    );
    eventually(
        "the TrainJob webhook to answer",
        Duration::from_secs(120),
        || async {
            let out = create(client, &probe, true).await;
            out.message
                .contains("specified clusterTrainingRuntime must be created")
                .then_some(out.message)
        },
    )
    .await
}

/// PUT the whole object (an update through admission).
pub async fn update(client: &kube::Client, obj: &Value) -> Outcome {
    let name = obj["metadata"]["name"].as_str().unwrap();
    send(client, http::Method::PUT, &path_of(obj, Some(name)), obj).await
}

async fn send(client: &kube::Client, method: http::Method, uri: &str, obj: &Value) -> Outcome {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(serde_json::to_vec(obj).unwrap()))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    let code = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| {
            // `299 - "text"`
            let t = v.to_str().unwrap_or_default();
            t.trim_start_matches("299 - ")
                .trim_matches('"')
                .replace("\\\"", "\"")
        })
        .collect();
    let body = resp.into_body().collect_bytes().await.unwrap();
    let object: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let message = object["message"].as_str().unwrap_or_default().to_owned();
    Outcome {
        code,
        message,
        warnings,
        object,
    }
}
