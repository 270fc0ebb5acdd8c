//! `trainforge plugin inspect|run|bench|precompile` end to end, through the binary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::plugin_common::*;
use serde_json::Value;
use std::process::Command;

fn trainforge(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_trainforge"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn inspect_prints_metadata_and_digest() {
    let wasm = minimal_wasm().to_str().unwrap();
    let digest = trainforge::plugin::sha256_hex(&std::fs::read(wasm).unwrap());
    let (ok, out, err) = trainforge(&["plugin", "inspect", wasm]);
    assert!(ok, "{err}");
    for want in [
        "name:          minimal",
        "wit-version:   0.1.0",
        "mlPolicy.minimal",
        "enforce-ml-policy, build, validate",
        "v1/ConfigMap",
        &digest,
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let (ok, out, err) = trainforge(&["plugin", "inspect", "--json", wasm]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["descriptor"]["name"], "minimal");
    assert_eq!(v["sha256"], digest);
    // A wrong pin is refused with the reason.
    let (ok, _, err) = trainforge(&["plugin", "inspect", "--sha256", &"0".repeat(64), wasm]);
    assert!(!ok);
    assert!(err.contains("DigestMismatch"), "{err}");
}

#[test]
fn run_prints_objects_info_and_validation() {
    let dir = tempfile::tempdir().unwrap();
    let tj = dir.path().join("trainjob.yaml");
    let rt = dir.path().join("runtime.yaml");
    let cfg = dir.path().join("config.json");
    std::fs::write(&tj, "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: demo\n  namespace: team\nspec:\n  runtimeRef:\n    name: minimal\n").unwrap();
    // JSON is YAML too; the runtime comes from the shared fixture.
    std::fs::write(&rt, serde_json::to_string_pretty(&runtime()).unwrap()).unwrap();
    std::fs::write(&cfg, r#"{"greeting": "from-cli"}"#).unwrap();
    let wasm = minimal_wasm().to_str().unwrap();
    let (ok, out, err) = trainforge(&[
        "plugin",
        "run",
        wasm,
        "--trainjob",
        tj.to_str().unwrap(),
        "--runtime",
        rt.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["plugin"]["name"], "minimal");
    assert_eq!(v["objects"][0]["kind"], "ConfigMap");
    assert_eq!(v["objects"][0]["metadata"]["name"], "demo-minimal");
    assert_eq!(v["objects"][0]["data"]["greeting"], "from-cli");
    let env = &v["info"]["templateSpec"]["podSets"][0]["containers"][0]["env"][0];
    assert_eq!(env["name"], "MINIMAL_GREETING");
    assert_eq!(v["validation"]["errors"].as_array().unwrap().len(), 0);
    assert!(v["status"].is_null());
}

/// `plugin run` shows the plugin what the operator's plugins see under the
/// same `--feature-gates`: the TrainJob's and the runtime's failure policy
/// only with `TrainJobFailurePolicy=true` (off by default, as upstream's).
#[test]
fn run_follows_the_feature_gates() {
    let golden =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/failure-policy");
    let run = |gates: &[&str]| {
        let mut args = vec![
            "plugin",
            "run",
            minimal_wasm().to_str().unwrap(),
            "--trainjob",
            golden.join("trainjob.yaml").to_str().unwrap(),
            "--runtime",
            golden.join("runtime.yaml").to_str().unwrap(),
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
        args.extend(gates.iter().map(|g| (*g).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out, err) = trainforge(&args);
        assert!(ok, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let on = run(&["--feature-gates", "TrainJobFailurePolicy=true"]);
    assert_eq!(
        on["trainjob"]["spec"]["failurePolicy"]["maxRestarts"], 1,
        "{on}"
    );
    let off = run(&[]);
    assert!(
        off["trainjob"]["spec"].get("failurePolicy").is_none(),
        "{off}"
    );
}

#[test]
fn run_reports_hostile_plugin_reason() {
    let dir = tempfile::tempdir().unwrap();
    let tj = dir.path().join("t.json");
    let rt = dir.path().join("r.json");
    let cfg = dir.path().join("c.json");
    std::fs::write(&tj, trainjob().to_string()).unwrap();
    std::fs::write(&rt, runtime().to_string()).unwrap();
    std::fs::write(&cfg, r#"{"attack": "cluster-role-binding"}"#).unwrap();
    let (ok, _, err) = trainforge(&[
        "plugin",
        "run",
        hostile_wasm().to_str().unwrap(),
        "--trainjob",
        tj.to_str().unwrap(),
        "--runtime",
        rt.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("ForbiddenObject") && err.contains("hostile"),
        "{err}"
    );
}

#[test]
fn bench_prints_percentiles() {
    let (ok, out, err) = trainforge(&[
        "plugin",
        "bench",
        "--iterations",
        "5",
        minimal_wasm().to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    for want in [
        "p50",
        "p99",
        "enforce-ml-policy",
        "build",
        "validate",
        "reconcile",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

/// The author tools take any component, a builtin's own bytes and a fork
/// that keeps a builtin's name included, and say what an operator would do
/// with it; the operator's load refuses the fork.
#[test]
fn author_tools_take_components_named_as_builtins() {
    let dir = tempfile::tempdir().unwrap();
    let torch = trainforge::plugin::builtin::find("torch").unwrap();
    let own = dir.path().join("plugin_torch.wasm");
    std::fs::write(&own, torch.wasm).unwrap();
    let fork_bytes = hostile_declaring(&serde_json::json!({"name": "torch", "emits": []}));
    let fork = dir.path().join("fork.wasm");
    std::fs::write(&fork, &fork_bytes).unwrap();
    let (own, fork) = (own.to_str().unwrap(), fork.to_str().unwrap());

    let (ok, out, err) = trainforge(&["plugin", "inspect", own]);
    assert!(ok, "{err}");
    assert!(out.contains("name:          torch"), "{out}");
    assert!(
        out.contains("note:") && out.contains("that builtin's own component"),
        "{out}"
    );
    let (ok, out, err) = trainforge(&["plugin", "inspect", "--json", fork]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["descriptor"]["name"], "torch");
    let note = v["reservedName"].as_str().unwrap();
    assert!(
        note.contains("an operator refuses this component"),
        "{note}"
    );

    let (ok, out, err) = trainforge(&["plugin", "bench", "--iterations", "3", own]);
    assert!(ok, "{err}");
    assert!(
        out.contains("plugin torch") && out.contains("note:"),
        "{out}"
    );

    let tj = dir.path().join("trainjob.yaml");
    let rt = dir.path().join("runtime.yaml");
    std::fs::write(&tj, "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: demo\n  namespace: team\nspec:\n  runtimeRef:\n    name: torch-distributed\n").unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../api/tests/fixtures/upstream/torch-distributed.yaml"
        ),
        &rt,
    )
    .unwrap();
    let (ok, out, err) = trainforge(&[
        "plugin",
        "run",
        own,
        "--trainjob",
        tj.to_str().unwrap(),
        "--runtime",
        rt.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("note:"), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["plugin"]["name"], "torch");
    assert_eq!(v["plugin"]["sha256"], torch.sha256);

    // Where plugins serve, the fork is refused for its name.
    let rt = trainforge::plugin::PluginRuntime::new(Default::default()).unwrap();
    let e = rt
        .load(trainforge::plugin::PluginSource::new("fork", fork_bytes))
        .unwrap_err();
    assert!(e.to_string().contains("reserved for the builtin"), "{e}");
}

/// `plugin test` keeps a plugin's goldens: cases without `expected.json`
/// fail saying how to write them, `--update` writes them (a plugin failure
/// included), they then pass, and an output that drifts fails naming the
/// case and the JSON pointer that changed.
#[test]
fn plugin_test_keeps_goldens() {
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases");
    let case = |name: &str, config: Option<&str>| {
        let d = cases.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("trainjob.yaml"), "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: demo\n  namespace: team\nspec:\n  runtimeRef:\n    name: minimal\n").unwrap();
        std::fs::write(
            d.join("runtime.yaml"),
            serde_json::to_string_pretty(&runtime()).unwrap(),
        )
        .unwrap();
        if let Some(c) = config {
            std::fs::write(d.join("config.json"), c).unwrap();
        }
        d
    };
    let greeting = case("greeting", Some(r#"{"greeting": "hello"}"#));
    case("default", None);
    let broken = case("broken-config", Some("{\"greeting\": [1, 2]}"));
    let wasm = minimal_wasm().to_str().unwrap();
    let cases_arg = cases.to_str().unwrap();
    let test = |extra: &[&str]| {
        let mut args = vec!["plugin", "test", wasm, "--cases", cases_arg];
        args.extend_from_slice(extra);
        trainforge(&args)
    };

    let (ok, out, err) = test(&[]);
    assert!(!ok, "{out}");
    assert!(out.contains("run with --update to write it"), "{out}");
    assert!(
        err.contains("golden cases failed: broken-config, default, greeting"),
        "{err}"
    );

    let (ok, out, err) = test(&["--update"]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("3 case(s): 3 passed or updated, 0 failed"),
        "{out}"
    );
    let golden = |d: &std::path::Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(d.join("expected.json")).unwrap()).unwrap()
    };
    let g = golden(&greeting);
    assert_eq!(g["objects"][0]["data"]["greeting"], "hello");
    assert!(
        g.get("plugin").is_none(),
        "the digest is not part of a golden"
    );
    let b = golden(&broken);
    assert!(
        b["error"].as_str().is_some_and(|e| e.contains("minimal")),
        "a failure is a golden too: {b}"
    );

    let (ok, out, err) = test(&[]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("ok      greeting"), "{out}");

    // The golden says one thing, the plugin another.
    let mut drifted = g.clone();
    drifted["objects"][0]["data"]["greeting"] = "goodbye".into();
    std::fs::write(
        greeting.join("expected.json"),
        serde_json::to_string(&drifted).unwrap(),
    )
    .unwrap();
    let (ok, out, err) = test(&[]);
    assert!(!ok, "{out}");
    assert!(out.contains("FAILED  greeting"), "{out}");
    assert!(
        out.contains("changed  /objects/0/data/greeting: now \"hello\""),
        "{out}"
    );
    assert!(out.contains("ok      default"), "{out}");
    assert!(err.contains("golden cases failed: greeting"), "{err}");
}

/// `plugin new` makes a plugin that passes its own unit tests natively,
/// builds as a component, and keeps its golden case with `plugin test`.
/// The crate builds with the workspace's lockfile and target directories,
/// offline, as the rest of the tests do.
#[test]
fn plugin_new_makes_a_plugin_that_builds_and_passes_its_tests() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("myfw");
    let (ok, out, err) = trainforge(&["plugin", "new", "myfw", "--dir", dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("made plugin myfw"), "{out}");
    // Refused: a builtin's name, over the plugin just made, Python.
    let (ok, _, err) = trainforge(&[
        "plugin",
        "new",
        "torch",
        "--dir",
        tmp.path().join("t").to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("builtin"), "{err}");
    let (ok, _, err) = trainforge(&["plugin", "new", "myfw", "--dir", dir.to_str().unwrap()]);
    assert!(!ok && err.contains("not empty"), "{err}");
    let (ok, _, err) = trainforge(&["plugin", "new", "pyfw", "--lang", "python"]);
    assert!(!ok && err.contains("no Python SDK"), "{err}");

    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let cargo = |target: &str, args: &[&str]| {
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(args)
            .arg("--offline")
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", root().join(target))
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("RUSTFLAGS")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo {args:?} in the new plugin failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let tests = cargo("target", &["test", "--lib"]);
    assert!(tests.contains("test result: ok. 3 passed"), "{tests}");
    cargo(
        "target/plugin-target",
        &["build", "--profile", "plugin", "--target", "wasm32-wasip2"],
    );
    let wasm = root().join("target/plugin-target/wasm32-wasip2/plugin/plugin_myfw.wasm");
    let (wasm, cases) = (wasm.to_str().unwrap(), dir.join("cases"));
    let cases = cases.to_str().unwrap();
    let (ok, out, err) = trainforge(&["plugin", "test", wasm, "--cases", cases, "--update"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = trainforge(&["plugin", "test", wasm, "--cases", cases]);
    assert!(ok && out.contains("ok      basic"), "{out}{err}");
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("cases/basic/expected.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(golden["objects"][0]["metadata"]["name"], "demo-myfw");
    assert_eq!(
        golden["info"]["templateSpec"]["podSets"][0]["containers"][0]["env"][0]["name"],
        "MYFW_PLUGIN"
    );
}

#[test]
fn corrupt_file_is_load_failed() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.wasm");
    std::fs::write(&f, b"\0asmnot really").unwrap();
    let (ok, _, err) = trainforge(&["plugin", "inspect", f.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("LoadFailed") && err.contains("bad.wasm"),
        "{err}"
    );
}

/// `trainforge plugin run` on a hostile component (declaring `descriptor`,
/// configured with `config`, with extra CLI arguments): whether it
/// succeeded, its stdout and stderr. The TrainJob is `team/job`.
fn run_hostile(descriptor: Value, config: Value, extra: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("hostile.wasm");
    std::fs::write(&wasm, hostile_declaring(&descriptor)).unwrap();
    let tj = dir.path().join("trainjob.json");
    std::fs::write(&tj, trainjob().to_string()).unwrap();
    let rt = dir.path().join("runtime.json");
    std::fs::write(&rt, runtime().to_string()).unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, config.to_string()).unwrap();
    let secret = dir.path().join("secret.json");
    std::fs::write(
        &secret,
        serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "creds", "namespace": "kube-system"}, "data": {"k": "cm9vdA=="}})
        .to_string(),
    )
    .unwrap();
    let mut args = vec![
        "plugin",
        "run",
        wasm.to_str().unwrap(),
        "--trainjob",
        tj.to_str().unwrap(),
        "--runtime",
        rt.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--object",
        secret.to_str().unwrap(),
    ];
    args.extend(extra);
    trainforge(&args)
}

/// Every containment class, refused through the CLI with the plugin and the
/// reason named (the same runtime as the operator: compiled in a bounded
/// child process, same checks).
#[test]
fn run_refuses_every_containment_class_with_its_reason() {
    use serde_json::json;
    let pod = "/templateSpec/obj/replicatedJobs/0/template/spec/template/spec";
    let cases: Vec<(&str, Value, Value, Vec<&str>, &str)> = vec![
        (
            "1 identity",
            json!({"name": "evil"}),
            json!({"set": [{"phase": "enforce-ml-policy", "target": "trainjob", "pointer": "/metadata/namespace", "value": "kube-system"}]}),
            vec![],
            "IdentityChanged",
        ),
        (
            "1 foreign namespace",
            json!({"name": "evil"}),
            json!({"emit": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kube-system"}}]}),
            vec![],
            "ForbiddenObject",
        ),
        (
            "2 secret read",
            json!({"name": "evil", "reads": [["v1", "Secret"]]}),
            json!({}),
            vec![],
            "ForbiddenKind",
        ),
        (
            "3 lease",
            json!({"name": "evil", "emits": [["coordination.k8s.io/v1", "Lease"]]}),
            json!({}),
            vec![],
            "ForbiddenKind",
        ),
        (
            "3 undeclared",
            json!({"name": "evil"}),
            json!({"emit": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "victim"}}]}),
            vec![],
            "ForbiddenObject",
        ),
        (
            "4 snapshot name",
            json!({"name": "evil"}),
            json!({"emit": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "job-runtime-snapshot"}}]}),
            vec![],
            "ForbiddenObject",
        ),
        (
            "4 another TrainJob's JobSet",
            json!({"name": "evil"}),
            json!({"emit": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "victim"}}]}),
            vec![],
            "JobSet of another TrainJob",
        ),
        (
            "4 another TrainJob's snapshot",
            json!({"name": "evil"}),
            json!({"emit": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "victim-runtime-snapshot"}}]}),
            vec![],
            "runtime snapshot of TrainJob",
        ),
        (
            "4 a name not derived from the TrainJob's",
            json!({"name": "evil"}),
            json!({"emit": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "victim-hostfile"}}]}),
            vec![],
            "not derived from the TrainJob's",
        ),
        (
            // Its own rule: `<trainjob>-cache` is TrainJob `job-b`'s here.
            "4 a name a naming rule makes another TrainJob's",
            json!({"name": "evil", "object_names": [["v1", "ConfigMap", "-cache"]]}),
            json!({"emit": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "job-b-cache"}}]}),
            vec![],
            "naming rule (<trainjob>-cache)",
        ),
        (
            "4 a naming rule the host does not accept",
            json!({"name": "evil", "object_names": [["v1", "ConfigMap", ""]]}),
            json!({}),
            vec![],
            "cannot be claimed",
        ),
        (
            "4 a kind off the default allow-list",
            json!({"name": "evil", "emits": [["autoscaling/v2", "HorizontalPodAutoscaler"]]}),
            json!({}),
            vec![],
            "not among the kinds plugins emit by default",
        ),
        (
            "5 privileged",
            json!({"name": "evil"}),
            json!({"set": [{"phase": "pre-build", "target": "info", "pointer": format!("{pod}/containers/0/securityContext/privileged"), "value": true}]}),
            vec![],
            "PodSecurity",
        ),
        (
            "5 a Secret of the namespace into the user's pods",
            json!({"name": "evil"}),
            json!({"set": [{"phase": "pre-build", "target": "info", "pointer": format!("{pod}/containers/0/envFrom"), "value": [{"secretRef": {"name": "db-credentials"}}]}]}),
            vec![],
            "grants.pod.secretNames",
        ),
        (
            "5 pods onto control-plane nodes",
            json!({"name": "evil"}),
            json!({"set": [{"phase": "pre-build", "target": "info", "pointer": format!("{pod}/tolerations"), "value": [{"operator": "Exists"}]}]}),
            vec![],
            "grants.pod.nodePlacement",
        ),
        (
            "5 the API server's name hijacked",
            json!({"name": "evil"}),
            json!({"set": [{"phase": "pre-build", "target": "info", "pointer": format!("{pod}/hostAliases"), "value": [{"ip": "6.6.6.6", "hostnames": ["kubernetes.default.svc"]}]}]}),
            vec![],
            "grants.pod.dns",
        ),
        (
            "6 sleep",
            json!({"name": "evil"}),
            json!({"attack": "sleep"}),
            vec![],
            "wait",
        ),
        (
            "6 loop in describe",
            json!({"name": "evil", "describe": "loop"}),
            json!({}),
            vec![],
            "Timeout",
        ),
        // A builtin's name is reserved where plugins serve, not in the
        // author tools (`author_tools_take_components_named_as_builtins`).
        (
            "7 too many kinds",
            json!({"name": "evil", "generate_reads": 3000}),
            json!({}),
            vec![],
            "InvalidDescriptor",
        ),
        (
            "8 thousands of objects",
            json!({"name": "evil"}),
            json!({"attack": "many-objects"}),
            vec![],
            "InvalidOutput",
        ),
    ];
    for (class, descriptor, config, extra, reason) in cases {
        let start = std::time::Instant::now();
        let (ok, out, err) = run_hostile(descriptor, config, &extra);
        assert!(!ok, "{class}: refused, got {out}");
        assert!(err.contains(reason), "{class}: want {reason} in {err}");
        assert!(
            ["evil", "jobset", "hostile.wasm"]
                .iter()
                .any(|n| err.contains(n)),
            "{class}: names the plugin: {err}"
        );
        assert!(
            err.lines().count() <= 3,
            "{class}: one bounded message: {err}"
        );
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{class}"
        );
    }
    // Granted by the administrator, the same plugins run.
    let (ok, out, err) = run_hostile(
        json!({"name": "evil", "reads": [["v1", "Secret"]]}),
        json!({"read": {"apiVersion": "v1", "kind": "Secret", "namespace": "kube-system", "name": "creds"}}),
        &["--allowed-read", "v1/Secret"],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let result = v["objects"][0]["data"]["result"].as_str().unwrap();
    assert!(
        result.starts_with("denied") && result.contains("namespace"),
        "{result}"
    );
    let (ok, _, err) = run_hostile(
        json!({"name": "evil"}),
        json!({"set": [{"phase": "pre-build", "target": "info", "pointer": format!("{pod}/containers/0/securityContext/privileged"), "value": true}]}),
        &["--grant", "privileged"],
    );
    assert!(ok, "{err}");
}

/// A component crafted to be slow to compile is stopped by the compile
/// worker's bounds, not by the user's patience.
#[test]
fn run_bounds_compilation() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("slow.wasm");
    std::fs::write(&wasm, slow_to_compile_component(3000, 600)).unwrap();
    let start = std::time::Instant::now();
    let (ok, _, err) = trainforge(&["plugin", "inspect", wasm.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("CompileLimit"), "{err}");
    let took = start.elapsed();
    assert!(took < std::time::Duration::from_secs(90), "{took:?}");
    let (ok, _, err) = trainforge(&["plugin", "inspect", "/dev/zero"]);
    assert!(!ok && err.contains("not a regular file"), "{err}");
}

/// A hostile guest named `name` (emitting ConfigMaps), the test TrainJob
/// and `runtime`, written to a temporary directory for `plugin run
/// --trainer-plugin`.
struct TenantFixture {
    dir: tempfile::TempDir,
    wasm: std::path::PathBuf,
    digest: String,
    tj: std::path::PathBuf,
    rt: std::path::PathBuf,
}

impl TenantFixture {
    fn new(name: &str, runtime: Value) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bytes =
            hostile_declaring(&serde_json::json!({"name": name, "emits": [["v1", "ConfigMap"]]}));
        let wasm = dir.path().join("team.wasm");
        std::fs::write(&wasm, &bytes).unwrap();
        let tj = dir.path().join("trainjob.json");
        std::fs::write(&tj, trainjob().to_string()).unwrap();
        let rt = dir.path().join("runtime.json");
        std::fs::write(&rt, runtime.to_string()).unwrap();
        TenantFixture {
            digest: trainforge::plugin::sha256_hex(&bytes),
            dir,
            wasm,
            tj,
            rt,
        }
    }
}

/// `plugin run --trainer-plugin`: a team tries its plugin as the operator
/// would serve it — the TrainerPlugin's config and options, the ceiling of
/// `--policy` (or the defaults), the restricted pod level — before
/// installing anything.
#[test]
fn run_as_a_tenant_plugin_within_the_ceiling() {
    use serde_json::json;
    let TenantFixture {
        dir,
        wasm,
        digest,
        tj,
        rt,
    } = TenantFixture::new("team-env", runtime());
    let pod = "/templateSpec/obj/replicatedJobs/0/template/spec/template/spec";
    let run = |ns: &str, extra: serde_json::Value, policy: Option<serde_json::Value>| {
        let mut spec = json!({
            "source": {"configMap": {"namespace": ns, "name": "m", "key": "plugin.wasm"}},
            "sha256": digest,
        });
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let tp = dir.path().join(format!("tp-{ns}.json"));
        std::fs::write(
            &tp,
            json!({"apiVersion": "trainforge.dev/v1alpha1", "kind": "TrainerPlugin",
                "metadata": {"name": "env", "namespace": ns}, "spec": spec})
            .to_string(),
        )
        .unwrap();
        let mut args = vec![
            "plugin".to_owned(),
            "run".into(),
            wasm.to_str().unwrap().into(),
            "--trainjob".into(),
            tj.to_str().unwrap().into(),
            "--runtime".into(),
            rt.to_str().unwrap().into(),
            "--trainer-plugin".into(),
            tp.to_str().unwrap().into(),
        ];
        if let Some(p) = policy {
            let path = dir.path().join("policy.json");
            std::fs::write(&path, p.to_string()).unwrap();
            args.extend(["--policy".into(), path.to_str().unwrap().into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        trainforge(&args)
    };
    // Within the ceiling: the TrainerPlugin's config drives the plugin.
    let marker = json!({"config": {"emit": [{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "job-marker"}}]}});
    let (ok, out, err) = run("team", marker.clone(), None);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["objects"][0]["metadata"]["name"], "job-marker", "{v}");
    // Refusals name the reason and what exceeds the ceiling.
    let cases: Vec<(
        &str,
        serde_json::Value,
        Option<serde_json::Value>,
        Vec<&str>,
    )> = vec![
        (
            "team",
            json!({"limits": {"timeout": "5s"}}),
            None,
            vec!["ExceedsPolicy", "spec.limits.timeout"],
        ),
        (
            "team",
            json!({"config": {}}),
            Some(json!({"spec": {"allowedKinds": [{"apiVersion": "v1", "kind": "Secret"}]}})),
            vec!["ExceedsPolicy", "emits: v1/ConfigMap"],
        ),
        (
            "team",
            json!({"config": {"set": [{"phase": "enforce-pod-spec", "target": "info",
                "pointer": format!("{pod}/containers/0/securityContext/runAsUser"), "value": 0}]}}),
            None,
            vec!["PodSecurity", "runAsUser 0", "restricted"],
        ),
        (
            "other",
            marker,
            None,
            vec!["serves only TrainJobs of namespace other"],
        ),
    ];
    for (ns, extra, policy, words) in cases {
        let (ok, _, err) = run(ns, extra.clone(), policy);
        assert!(!ok, "{extra} must be refused");
        for w in words {
            assert!(err.contains(w), "{extra}: {w:?} missing in {err}");
        }
    }
}

/// A tenant plugin (held to the restricted level) on a runtime whose pods
/// meet it: removing any restriction, or reaching root by a number's
/// spelling, is refused naming it; leaving them alone is served.
#[test]
fn a_tenant_plugin_cannot_weaken_a_restricted_runtime() {
    use serde_json::json;
    let mut rt = runtime();
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
        [0]["securityContext"] = json!({
        "allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 1000,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}});
    let TenantFixture {
        dir,
        wasm,
        digest,
        tj,
        rt: rt_path,
    } = TenantFixture::new("team-weaken", rt);
    let sc = "/templateSpec/obj/replicatedJobs/0/template/spec/template/spec/containers/0/securityContext";
    let run = |config: serde_json::Value| {
        let tp = dir.path().join("tp.json");
        std::fs::write(
            &tp,
            json!({"apiVersion": "trainforge.dev/v1alpha1", "kind": "TrainerPlugin",
                "metadata": {"name": "weaken", "namespace": "team"}, "spec": {
                "source": {"configMap": {"namespace": "team", "name": "m", "key": "plugin.wasm"}},
                "sha256": digest, "config": config}})
            .to_string(),
        )
        .unwrap();
        trainforge(&[
            "plugin",
            "run",
            wasm.to_str().unwrap(),
            "--trainjob",
            tj.to_str().unwrap(),
            "--runtime",
            rt_path.to_str().unwrap(),
            "--trainer-plugin",
            tp.to_str().unwrap(),
        ])
    };
    let (ok, _, err) = run(json!({}));
    assert!(ok, "a plugin that changes nothing: {err}");
    let set = |field: &str, value: serde_json::Value| {
        json!({"set": [{"phase": "enforce-pod-spec", "target": "info",
            "pointer": format!("{sc}{field}"), "value": value}]})
    };
    for (field, value, words) in [
        ("/runAsUser", json!(0.0), "runAsUser 0"),
        (
            "/capabilities/drop",
            json!([]),
            "capabilities.drop without ALL",
        ),
        ("/capabilities", json!({}), "capabilities.drop without ALL"),
        (
            "/seccompProfile",
            json!({}),
            "seccompProfile neither RuntimeDefault nor Localhost",
        ),
        (
            "/seccompProfile/type",
            json!("Unconfined"),
            "seccompProfile Unconfined",
        ),
        ("/runAsNonRoot", Value::Null, "runAsNonRoot not true"),
        (
            "/allowPrivilegeEscalation",
            Value::Null,
            "allowPrivilegeEscalation not false",
        ),
        ("", json!({}), "allowPrivilegeEscalation not false"),
    ] {
        let (ok, _, err) = run(set(field, value.clone()));
        assert!(!ok, "{field} = {value} must be refused");
        for w in ["PodSecurity", words] {
            assert!(err.contains(w), "{field} = {value}: {w:?} missing in {err}");
        }
    }
}

/// `plugin precompile` writes an artifact per builtin that a runtime
/// configured like the operator's loads as shipped (no compile), never
/// writing into or evicting from the shipped directory; a shipped artifact
/// that is corrupt, or for another component, is ignored and the component
/// compiled into the operator's own cache instead.
#[test]
fn precompiled_builtins_ship_beside_the_binary() {
    use trainforge::plugin::{CacheOutcome, PluginRuntime, RuntimeConfig, builtin};
    let shipped = tempfile::tempdir().unwrap();
    let out = shipped.path().join("artifacts");
    let (ok, stdout, stderr) =
        trainforge(&["plugin", "precompile", "--out", out.to_str().unwrap()]);
    assert!(ok, "{stdout}{stderr}");
    let listing = || {
        let mut names: Vec<(String, Vec<u8>)> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read(&p).unwrap(),
                )
            })
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let cwasm = before.iter().filter(|(n, _)| n.ends_with(".cwasm")).count();
    assert_eq!(
        cwasm,
        builtin::all().len(),
        "one artifact per builtin: {stdout}"
    );
    // Progress: none off a terminal (this pipe) unless asked for; a line
    // per builtin with `--progress plain`; the results on stdout either way.
    assert!(stderr.is_empty(), "progress off a terminal: {stderr}");
    let n = builtin::all().len();
    let (ok, stdout, stderr) = trainforge(&[
        "plugin",
        "precompile",
        "--out",
        out.to_str().unwrap(),
        "--progress",
        "plain",
    ]);
    assert!(ok, "{stderr}");
    for (i, b) in builtin::all().iter().enumerate() {
        let step = format!("[{}/{n}] {}…", i + 1, b.crate_name);
        assert!(stderr.contains(&step), "{step:?} not in {stderr}");
        assert!(
            stdout.contains(&format!("{}: already there", b.crate_name)),
            "{stdout}"
        );
    }
    // A reader that goes away (`| head`): a quiet end, as Unix tools have.
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainforge"))
        .args(["plugin", "precompile", "--out", out.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let gone = child.wait_with_output().unwrap();
    assert_eq!(gone.status.code(), Some(141), "{gone:?}");
    assert!(
        gone.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    assert!(!builtin::all().is_empty());

    let cache = tempfile::tempdir().unwrap();
    let rt = || {
        PluginRuntime::new(RuntimeConfig {
            cache_dir: Some(cache.path().to_owned()),
            shipped_artifacts: Some(out.clone()),
            ..RuntimeConfig::default()
        })
        .unwrap()
    };
    let runtime = rt();
    for b in builtin::all() {
        let (_, o) = runtime.load_traced(b.trusted_source()).unwrap();
        assert_eq!(o, CacheOutcome::Shipped, "{}", b.crate_name);
    }
    assert_eq!(
        std::fs::read_dir(cache.path()).unwrap().count(),
        0,
        "nothing compiled into the operator's cache"
    );
    assert_eq!(listing(), before, "the shipped directory is only read");

    // Corrupt one shipped artifact: that builtin compiles (into the cache),
    // the shipped file stays as it was.
    let victim = before
        .iter()
        .find(|(n, _)| n.ends_with(".cwasm"))
        .map(|(n, _)| out.join(n))
        .unwrap();
    let mut bytes = std::fs::read(&victim).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&victim, &bytes).unwrap();
    let corrupted = listing();
    let runtime = rt();
    let outcomes: Vec<CacheOutcome> = builtin::all()
        .iter()
        .map(|b| runtime.load_traced(b.trusted_source()).unwrap().1)
        .collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == CacheOutcome::Compiled)
            .count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == CacheOutcome::Shipped)
            .count(),
        builtin::all().len() - 1
    );
    assert_eq!(
        listing(),
        corrupted,
        "a bad shipped artifact is not rewritten or removed"
    );

    // Another component with no shipped artifact is compiled as before.
    let (_, o) = runtime
        .load_traced(trainforge::plugin::PluginSource::new(
            "minimal",
            std::fs::read(minimal_wasm()).unwrap(),
        ))
        .unwrap();
    assert_eq!(o, CacheOutcome::Compiled);
}
