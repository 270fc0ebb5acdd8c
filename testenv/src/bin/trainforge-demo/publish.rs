//! The demo's plugin supply chain: a local OCI registry, the example plugin
//! pushed to it and signed with a fresh key (by the `trainforge plugin` CLI,
//! as a plugin author would), and a `ClusterTrainerPlugin` that loads it by
//! tag and verifies the signature.

#[allow(clippy::wildcard_imports)]
use super::*;
use trainforge_testenv::Registry;
use trainforge_testenv::paths::Paths;

/// Name of the demo's `ClusterTrainerPlugin` for the example plugin.
pub(crate) const PLUGIN_NAME: &str = "example-minimal";

/// The example plugin in the local registry.
pub(crate) struct Published {
    /// The registry (stopped when dropped).
    pub(crate) registry: Registry,
    /// `oci://ADDR/examples/plugin-minimal:v1`.
    pub(crate) reference: String,
    /// The same by digest, as `push` printed it.
    pub(crate) pinned: String,
    /// The signer's public key (PEM).
    pub(crate) public_key: String,
}

impl Published {
    /// Operator flags that let it pull from this registry (plain HTTP on
    /// loopback).
    pub(crate) fn operator_args(&self) -> Vec<String> {
        vec![
            "--plugin-registry-plain-http".into(),
            self.registry.addr().to_owned(),
            "--plugin-fetch-allow-cidr".into(),
            "127.0.0.1/32".into(),
        ]
    }

    /// The `ClusterTrainerPlugin` loading it by tag, signature required.
    pub(crate) fn cluster_trainer_plugin(&self) -> Value {
        serde_json::json!({
            "apiVersion": "trainforge.dev/v1alpha1",
            "kind": "ClusterTrainerPlugin",
            "metadata": {"name": PLUGIN_NAME},
            "spec": {
                "source": {"url": self.reference},
                "verification": {"keys": [{"name": "demo", "publicKey": self.public_key}]},
                "order": 100,
            },
        })
    }
}

fn run_cli(bin: &Path, args: &[&str]) -> Result<String, DemoError> {
    let out = std::process::Command::new(bin)
        .args(args)
        .output()
        .map_err(|e| {
            DemoError::Publish(format!("running {} {}: {e}", bin.display(), args.join(" ")))
        })?;
    if !out.status.success() {
        return Err(DemoError::Publish(format!(
            "{} {}: {}",
            bin.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Start a registry, make a key pair, push and sign `wasm` with `bin`.
pub(crate) async fn publish(
    env: &TestEnv,
    bin: &Path,
    wasm: &Path,
) -> Result<Published, DemoError> {
    if !wasm.is_file() {
        return Err(DemoError::Publish(format!(
            "{} does not exist: build it with `cargo build --profile plugin --target wasm32-wasip2 -p plugin-minimal` (make demo does)",
            wasm.display()
        )));
    }
    let logs = env.dir().join("logs");
    let registry = Registry::start(&Paths::from_env(), &logs, None).await?;
    let key = env.dir().join("demo-signer");
    let key_arg = key.to_string_lossy().into_owned();
    run_cli(bin, &["plugin", "keygen", "--out", &key_arg])?;
    let reference = format!("oci://{}/examples/plugin-minimal:v1", registry.addr());
    let private = key.with_extension("key").to_string_lossy().into_owned();
    let pinned = run_cli(
        bin,
        &[
            "plugin",
            "push",
            &wasm.to_string_lossy(),
            &reference,
            "--plain-http",
            "--sign-key",
            &private,
        ],
    )?;
    let public_key = std::fs::read_to_string(key.with_extension("pub"))
        .map_err(|e| DemoError::Publish(format!("reading the public key: {e}")))?;
    Ok(Published {
        registry,
        reference,
        pinned,
        public_key,
    })
}

/// Apply the `ClusterTrainerPlugin` and wait until it serves (or say why
/// not after `timeout`).
pub(crate) async fn load(
    client: &kube::Client,
    published: &Published,
    timeout: Duration,
) -> Result<(), DemoError> {
    let ctp = published.cluster_trainer_plugin();
    manifests::apply(client, &ctp, FIELD_MANAGER).await?;
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "trainforge.dev",
            "v1alpha1",
            "ClusterTrainerPlugin",
        )),
    );
    let start = Instant::now();
    loop {
        let obj = api.get(PLUGIN_NAME).await?;
        let conds = obj
            .data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let find = |t: &str| {
            conds.iter().find(|c| c["type"] == t).map(|c| {
                (
                    c["status"].as_str().unwrap_or_default().to_owned(),
                    c["message"].as_str().unwrap_or_default().to_owned(),
                )
            })
        };
        if let Some((ready, _)) = find("Ready")
            && ready == "True"
        {
            let verified = find("Verified").map(|v| v.1).unwrap_or_default();
            println!(
                "demo: ClusterTrainerPlugin {PLUGIN_NAME} serves the example plugin from {} ({verified})",
                published.pinned
            );
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(DemoError::Publish(format!(
                "ClusterTrainerPlugin {PLUGIN_NAME} not Ready after {}s: {}",
                timeout.as_secs(),
                obj.data
                    .pointer("/status")
                    .map(Value::to_string)
                    .unwrap_or_default()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
