//! `oci://` plugin sources against a real OCI registry (the testenv's,
//! serving HTTPS with a test CA) and a real kube-apiserver; the
//! `ClusterTrainerPlugin` controller runs in-process. Checks, in order:
//!
//! 1. the CRD's rules: an `oci://` tag needs a pin (`@sha256:`,
//!    `spec.sha256` or `spec.verification`); `pullSecret` goes with `oci://`;
//! 2. `trainforge plugin keygen|push|sign|verify` publish a signed plugin;
//!    it loads by tag (verified, `Verified` naming the key) and by digest;
//!    `status.servingSpec` records the digest the tag named;
//! 3. the tag moved to a new digest changes nothing that serves — also
//!    after a controller restart — until the spec changes;
//! 4. while that version serves, each bad spec is refused with its own
//!    reason and the last good version keeps serving: an unknown digest, a
//!    wrong `sha256`, no signature, a signature replayed from another
//!    artifact, a key nobody trusts, a 50 MB layer, a non-Wasm layer, a
//!    missing pull secret, and a registry that is down;
//! 5. a pull secret from the operator's namespace is used;
//! 6. an operator that requires signatures refuses an unsigned file and
//!    serves a blob-signed one; without `--plugin-fetch-allow-cidr` a
//!    registry on loopback is refused (`AddressNotAllowed`).
//!
//! Then, against the same real registry sending its client elsewhere (a
//! blob redirect and a token realm at 127.0.0.2, over HTTPS and plain
//! HTTP), the guarded client refuses every hop to an address it does not
//! allow, naming it, while the unguarded one follows it (issue 30, item 5).
//!
//! Prints apply → serving for an `oci://` plugin (pull + verify + compile)
//! with the artifact cache cold and warm (figures, never asserted).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::catalog_common::{WAIT, condition, wait_cr};
use crate::plugin_common::hostile_declaring;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use oci_client::Reference;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use trainforge::admission::certs;
use trainforge::controller::catalog::fetch::FetchOptions;
use trainforge::controller::catalog::{self, Options, PluginCatalog};
use trainforge::oci::artifact::{self, WASM_CONFIG_MEDIA_TYPE};
use trainforge::oci::cosign::{self, SigningKey};
use trainforge::oci::registry::{Registry as OciRegistry, RegistryOptions};
use trainforge::plugin::{NoObjects, PluginRuntime, RuntimeConfig, sha256_hex};
use trainforge_api::trainforge::v1alpha1::{ClusterTrainerPlugin, reason};
use trainforge_testenv::paths::Paths;
use trainforge_testenv::{Mode, Registry, TestEnv};

const TEST_LABEL: &str = "trainforge.dev/test";
const TF: &str = "trainforge.dev/v1alpha1";

fn step(text: &str) {
    eprintln!("plugin_oci: {text}");
}

fn env() -> Option<&'static TestEnv> {
    trainforge_testenv::require!(Mode::Api)
}

/// A registry serving HTTPS with a certificate of a fresh test CA.
struct Tls {
    ca_file: PathBuf,
    ca_pem: String,
    cert: PathBuf,
    key: PathBuf,
}

fn tls(dir: &Path) -> Tls {
    tls_for(dir, &[IpAddr::V4(Ipv4Addr::LOCALHOST)])
}

/// [`tls`] for a certificate naming `ips`.
fn tls_for(dir: &Path, ips: &[IpAddr]) -> Tls {
    let now = time::OffsetDateTime::now_utc();
    let b = certs::generate(
        &["localhost".to_owned()],
        ips,
        now,
        time::Duration::hours(2),
    )
    .unwrap();
    let (ca_file, cert, key) = (dir.join("ca.pem"), dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&ca_file, &b.ca_bundle).unwrap();
    std::fs::write(&cert, &b.cert).unwrap();
    std::fs::write(&key, &b.key).unwrap();
    Tls {
        ca_file,
        ca_pem: b.ca_bundle,
        cert,
        key,
    }
}

async fn start_registry(t: &Tls, logs: &Path, auth: Option<(&str, &str)>) -> Registry {
    std::fs::create_dir_all(logs).unwrap();
    Registry::start_with(&Paths::from_env(), logs, Some((&t.cert, &t.key)), auth)
        .await
        .unwrap()
}

struct Controller {
    catalog: Arc<PluginCatalog>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), catalog::Error>>,
}

impl Controller {
    fn start(client: &kube::Client, label: &str, fetch: FetchOptions, cache: &Path) -> Self {
        let runtime = Arc::new(
            PluginRuntime::new(RuntimeConfig {
                cache_dir: Some(cache.to_path_buf()),
                ..RuntimeConfig::default()
            })
            .unwrap(),
        );
        let catalog = Arc::new(PluginCatalog::new(runtime, Arc::new(NoObjects)));
        let stop = CancellationToken::new();
        let opts = Options {
            label_selector: Some(format!("{TEST_LABEL}={label}")),
            fetch,
            ..Options::default()
        };
        let task = tokio::spawn(catalog::run_with(
            client.clone(),
            catalog.clone(),
            stop.clone(),
            opts,
        ));
        Controller {
            catalog,
            stop,
            task,
        }
    }

    /// The sha256 the catalog serves for the plugin called `name`.
    fn serving(&self, name: &str) -> Option<String> {
        self.catalog
            .current()
            .plugins()
            .iter()
            .find(|p| p.name() == name)
            .map(|p| p.sha256().to_owned())
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

fn cond<'a>(p: &'a ClusterTrainerPlugin, t: &str) -> (&'a str, &'a str, &'a str) {
    condition(p, t).unwrap_or(("", "", ""))
}

async fn apply(api: &Api<ClusterTrainerPlugin>, name: &str, label: &str, spec: Value) {
    let obj = json!({"apiVersion": TF, "kind": "ClusterTrainerPlugin",
        "metadata": {"name": name, "labels": {TEST_LABEL: label}}, "spec": spec});
    api.patch(
        name,
        &PatchParams::apply("plugin-oci-test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap();
}

fn trainforge(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_trainforge"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `trainforge plugin push` (signed with `key` when given): the
/// `oci://…@sha256:…` it prints.
fn push(file: &Path, reference: &str, ca: &Path, key: Option<&Path>) -> String {
    let mut args = vec![
        "plugin",
        "push",
        file.to_str().unwrap(),
        reference,
        "--ca-file",
        ca.to_str().unwrap(),
    ];
    if let Some(k) = key {
        args.extend(["--sign-key", k.to_str().unwrap()]);
    }
    let (ok, out, err) = trainforge(&args);
    assert!(ok, "push {reference} failed: {err}");
    assert!(
        out.starts_with("oci://") && out.contains("@sha256:"),
        "{out}"
    );
    assert!(err.is_empty(), "progress off a terminal: {err}");
    out
}

/// A raw client for crafting artifacts the CLI would never push.
fn raw_client(ca_pem: &str) -> oci_client::Client {
    oci_client::Client::try_from(ClientConfig {
        extra_root_certificates: vec![Certificate {
            encoding: CertificateEncoding::Pem,
            data: ca_pem.as_bytes().to_vec(),
        }],
        use_monolithic_push: true,
        ..ClientConfig::default()
    })
    .unwrap()
}

/// Push a manifest with one layer of `media_type` holding `layer`, the
/// declared size overridden by `declared` (the blob itself is stored only
/// when its size is honest).
async fn push_crafted(
    c: &oci_client::Client,
    reference: &str,
    media_type: &str,
    layer: &[u8],
    declared: Option<i64>,
) {
    let r: Reference = reference.parse().unwrap();
    let auth = RegistryAuth::Anonymous;
    c.auth(&r, &auth, oci_client::RegistryOperation::Push)
        .await
        .unwrap();
    let config = b"{}".to_vec();
    let config_digest = artifact::digest_of(&config);
    c.push_blob(&r, config.clone(), &config_digest)
        .await
        .unwrap();
    let layer_digest = artifact::digest_of(layer);
    if declared.is_none() {
        c.push_blob(&r, layer.to_vec(), &layer_digest)
            .await
            .unwrap();
    }
    let m = OciImageManifest {
        schema_version: 2,
        media_type: Some(artifact::OCI_MANIFEST_MEDIA_TYPE.to_owned()),
        config: OciDescriptor {
            media_type: WASM_CONFIG_MEDIA_TYPE.to_owned(),
            digest: config_digest,
            size: 2,
            ..OciDescriptor::default()
        },
        layers: vec![OciDescriptor {
            media_type: media_type.to_owned(),
            digest: layer_digest,
            size: declared.unwrap_or(layer.len() as i64),
            ..OciDescriptor::default()
        }],
        ..OciImageManifest::default()
    };
    c.push_manifest_raw(
        &r,
        serde_json::to_vec(&m).unwrap(),
        reqwest::header::HeaderValue::from_static(artifact::OCI_MANIFEST_MEDIA_TYPE),
    )
    .await
    .unwrap();
}

fn fetch_options(t: &Tls, allow_loopback: bool, secrets_ns: &str, require: bool) -> FetchOptions {
    FetchOptions {
        allowed_networks: if allow_loopback {
            vec!["127.0.0.0/8".parse().unwrap()]
        } else {
            Vec::new()
        },
        extra_roots_pem: Some(t.ca_pem.as_bytes().to_vec()),
        secrets_namespace: secrets_ns.to_owned(),
        require_signatures: require,
        ..FetchOptions::default()
    }
}

fn key_spec(name: &str, pub_file: &Path) -> Value {
    json!({"name": name, "publicKey": std::fs::read_to_string(pub_file).unwrap()})
}

#[tokio::test]
async fn oci_plugins_are_pulled_verified_and_pinned() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let api: Api<ClusterTrainerPlugin> = Api::all(client.clone());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let t = tls(d);
    let mut reg = start_registry(&t, &d.join("registry-logs"), None).await;
    let host = reg.addr().to_owned();
    let secrets_ns = env.create_namespace("oci-secrets").await.unwrap();
    let cache = d.join("cache");

    step("1 the CRD's rules for oci:// sources");
    let raw = |spec: Value| {
        let api = api.clone();
        async move {
            let obj: ClusterTrainerPlugin = serde_json::from_value(json!({
                "apiVersion": TF, "kind": "ClusterTrainerPlugin",
                "metadata": {"generateName": "oci-rule-", "labels": {TEST_LABEL: "rules"}},
                "spec": spec}))
            .unwrap();
            api.create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &obj,
            )
            .await
        }
    };
    let refused = |r: Result<ClusterTrainerPlugin, kube::Error>, words: &str| match r {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(words) => {}
        other => panic!("expected 422 with {words:?}, got {other:?}"),
    };
    refused(
        raw(json!({"source": {"url": format!("oci://{host}/p/a:v1")}})).await,
        "pinned by @sha256:",
    );
    refused(
        raw(json!({"source": {"url": "https://example.com/p.wasm", "pullSecret": "x"}, "sha256": "0".repeat(64)})).await,
        "pullSecret applies to oci:// URLs only",
    );
    refused(
        raw(json!({"source": {"url": "ftp://example.com/p.wasm"}, "sha256": "0".repeat(64)})).await,
        "https://, oci:// or file://",
    );
    raw(json!({"source": {"url": format!("oci://{host}/p/a@sha256:{}", "0".repeat(64))}}))
        .await
        .unwrap();
    raw(json!({"source": {"url": format!("oci://{host}/p/a:v1")}, "verification": {"keys": [{"name": "k", "publicKey": "pem"}]}}))
        .await
        .unwrap();

    step("2 keygen, push, sign and verify with the CLI; load by tag and by digest");
    let key_base = d.join("vendor");
    let (ok, _, err) = trainforge(&["plugin", "keygen", "--out", key_base.to_str().unwrap()]);
    assert!(ok, "{err}");
    let (vendor_key, vendor_pub) = (d.join("vendor.key"), d.join("vendor.pub"));
    let (ok, _, err) = trainforge(&[
        "plugin",
        "keygen",
        "--out",
        d.join("stranger").to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let (stranger_key, stranger_pub) = (d.join("stranger.key"), d.join("stranger.pub"));
    let v1 = hostile_declaring(&json!({"name": "oci-vendor", "version": "1.0.0"}));
    let v2 = hostile_declaring(&json!({"name": "oci-vendor", "version": "2.0.0"}));
    let (f1, f2) = (d.join("v1.wasm"), d.join("v2.wasm"));
    std::fs::write(&f1, &v1).unwrap();
    std::fs::write(&f2, &v2).unwrap();
    let stable = format!("oci://{host}/vendor/plugin:stable");
    let pinned1 = push(&f1, &stable, &t.ca_file, Some(&vendor_key));
    let ca = t.ca_file.to_str().unwrap();
    let (ok, out, err) = trainforge(&[
        "plugin",
        "verify",
        "--ca-file",
        ca,
        "--key",
        vendor_pub.to_str().unwrap(),
        &stable,
    ]);
    assert!(
        ok && out.contains("signed by key \"vendor\""),
        "{out} {err}"
    );
    let (ok, _, err) = trainforge(&[
        "plugin",
        "verify",
        "--ca-file",
        ca,
        "--key",
        stranger_pub.to_str().unwrap(),
        &stable,
    ]);
    assert!(!ok && err.contains(reason::UNTRUSTED_SIGNATURE), "{err}");
    // `--progress plain`: each step, with the bytes moved, the time and the rate.
    let (ok, out, err) = trainforge(&[
        "plugin",
        "push",
        f1.to_str().unwrap(),
        &format!("oci://{host}/vendor/plugin:progress"),
        "--ca-file",
        ca,
        "--sign-key",
        vendor_key.to_str().unwrap(),
        "--progress",
        "plain",
    ]);
    assert!(ok && out.starts_with("oci://"), "{out} {err}");
    let size = indicatif::HumanBytes(v1.len() as u64).to_string();
    let digest = pinned1.rsplit('@').next().unwrap();
    for want in [
        format!(
            "pushing {} ({size}) to oci://{host}/vendor/plugin:progress…",
            f1.display()
        ),
        format!("pushed manifest {digest}: {size} in "),
        format!("signing {digest}…"),
        "signed in ".to_owned(),
        format!("component sha256 {}", trainforge::plugin::sha256_hex(&v1)),
    ] {
        assert!(err.contains(&want), "{want:?} not in {err}");
    }
    assert!(err.contains("/s)"), "a rate: {err}");
    // Pulled as pushed; quiet off a terminal unless `--progress plain`.
    let pulled = d.join("pulled.wasm");
    for progress in [None, Some("plain")] {
        let mut args = vec![
            "plugin",
            "pull",
            "--ca-file",
            ca,
            &stable,
            "-o",
            pulled.to_str().unwrap(),
        ];
        args.extend(progress.iter().flat_map(|p| ["--progress", p]));
        let (ok, out, err) = trainforge(&args);
        assert!(ok && out == pinned1, "{out} {err}");
        assert_eq!(std::fs::read(&pulled).unwrap(), v1);
        let wants = match progress {
            None => vec![],
            Some(_) => vec![
                format!("pulling {stable}…"),
                format!("pulled manifest {digest}: {size} in "),
            ],
        };
        assert_eq!(err.is_empty(), wants.is_empty(), "{err}");
        for want in wants {
            assert!(err.contains(&want), "{want:?} not in {err}");
        }
    }

    let ctl = Controller::start(
        &client,
        "oci",
        fetch_options(&t, true, &secrets_ns, false),
        &cache,
    );
    // By digest, no signature asked (the digest pins it); cold: compiled.
    let started = Instant::now();
    apply(
        &api,
        "oci-by-digest",
        "oci",
        json!({"source": {"url": pinned1}}),
    )
    .await;
    let p = wait_cr(&api, "oci-by-digest", "serving by digest", |p| {
        cond(p, "Ready").0 == "True"
    })
    .await;
    let cold = started.elapsed();
    let (_, r, m) = cond(&p, "Verified");
    assert!(
        r == reason::DIGEST_MATCHED && m.contains("manifest sha256:"),
        "{r}: {m}"
    );
    assert_eq!(ctl.serving("oci-vendor"), Some(sha256_hex(&v1)));
    api.delete("oci-by-digest", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while ctl.serving("oci-vendor").is_some() {
        assert!(Instant::now() < deadline, "still serving after deletion");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // By tag, signed; warm: the compiled artifact is cached.
    let verified = json!({"keys": [key_spec("vendor", &vendor_pub)]});
    let started = Instant::now();
    apply(
        &api,
        "oci-vendor",
        "oci",
        json!({"source": {"url": stable}, "verification": verified}),
    )
    .await;
    let p = wait_cr(&api, "oci-vendor", "serving by tag", |p| {
        cond(p, "Ready").0 == "True"
    })
    .await;
    let warm = started.elapsed();
    report_figure(cold, warm);
    let (_, r, m) = cond(&p, "Verified");
    assert_eq!(r, reason::SIGNATURE_VERIFIED, "{m}");
    assert!(m.contains("signed by key \"vendor\""), "{m}");
    let status = p.status.clone().unwrap();
    assert_eq!(
        status.serving_digest.as_deref(),
        Some(sha256_hex(&v1).as_str())
    );
    assert_eq!(
        status.serving_spec.unwrap().source.url.as_deref(),
        Some(pinned1.as_str()),
        "the tag is recorded as the digest it named"
    );
    assert_eq!(ctl.serving("oci-vendor"), Some(sha256_hex(&v1)));

    step("3 a moved tag changes nothing until the spec changes, also after a restart");
    let pinned2 = push(&f2, &stable, &t.ca_file, Some(&vendor_key));
    assert_ne!(pinned1, pinned2);
    ctl.stop().await;
    let ctl = Controller::start(
        &client,
        "oci",
        fetch_options(&t, true, &secrets_ns, false),
        &cache,
    );
    // The restarted controller reloads the CR; it must load the recorded digest.
    let deadline = Instant::now() + WAIT;
    while ctl.serving("oci-vendor").is_none() {
        assert!(Instant::now() < deadline, "not reloaded after the restart");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        ctl.serving("oci-vendor"),
        Some(sha256_hex(&v1)),
        "the tag was resolved again"
    );
    let p = api.get("oci-vendor").await.unwrap();
    assert_eq!(
        p.status
            .unwrap()
            .serving_spec
            .unwrap()
            .source
            .url
            .as_deref(),
        Some(pinned1.as_str())
    );
    // A spec change resolves the tag once more.
    apply(
        &api,
        "oci-vendor",
        "oci",
        json!({"source": {"url": stable}, "verification": verified, "order": 7}),
    )
    .await;
    wait_cr(
        &api,
        "oci-vendor",
        "the moved tag after a spec change",
        |p| {
            p.status.as_ref().and_then(|s| s.serving_digest.as_deref())
                == Some(sha256_hex(&v2).as_str())
        },
    )
    .await;
    let good = sha256_hex(&v2);

    step("4 every bad version is refused by reason; the last good one keeps serving");
    let c = raw_client(&t.ca_pem);
    let unsigned = format!("{host}/vendor/unsigned:v1");
    let v3 = hostile_declaring(&json!({"name": "oci-vendor", "version": "3.0.0"}));
    let f3 = d.join("v3.wasm");
    std::fs::write(&f3, &v3).unwrap();
    let unsigned_pinned = push(&f3, &format!("oci://{unsigned}"), &t.ca_file, None);
    // A signature of v1's artifact, stored as the signature of v3's.
    let lib = OciRegistry::new(&RegistryOptions {
        extra_roots_pem: Some(t.ca_pem.as_bytes().to_vec()),
        ..RegistryOptions::default()
    })
    .unwrap();
    let replayed = format!("{host}/vendor/replayed:v1");
    push(&f3, &format!("oci://{replayed}"), &t.ca_file, None);
    let target = lib
        .pull(&replayed, &RegistryAuth::Anonymous, 1 << 25)
        .await
        .unwrap();
    let signer = SigningKey::from_pem(&std::fs::read(&vendor_key).unwrap()).unwrap();
    let other_payload = cosign::payload(&target.repository, pinned1.rsplit_once('@').unwrap().1);
    lib.push_signature(
        &target,
        &other_payload,
        &signer.sign(&other_payload).unwrap(),
        &RegistryAuth::Anonymous,
    )
    .await
    .unwrap();
    let strangers = format!("oci://{host}/vendor/strangers:v1");
    push(&f3, &strangers, &t.ca_file, Some(&stranger_key));
    push_crafted(
        &c,
        &format!("{host}/vendor/huge:v1"),
        artifact::WASM_LAYER_MEDIA_TYPE,
        &v3,
        Some(50 << 20),
    )
    .await;
    push_crafted(
        &c,
        &format!("{host}/vendor/tarball:v1"),
        "application/vnd.oci.image.layer.v1.tar",
        &v3,
        None,
    )
    .await;
    let unknown_digest = format!("oci://{host}/vendor/plugin@sha256:{}", "1".repeat(64));
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "an unknown digest",
            json!({"source": {"url": unknown_digest}}),
            "Fetched",
            reason::NOT_FOUND,
        ),
        (
            "a wrong sha256",
            json!({"source": {"url": unsigned_pinned}, "sha256": "2".repeat(64)}),
            "Verified",
            reason::DIGEST_MISMATCH,
        ),
        (
            "no signature",
            json!({"source": {"url": format!("oci://{unsigned}")}, "verification": verified}),
            "Verified",
            reason::SIGNATURE_MISSING,
        ),
        (
            "a replayed signature",
            json!({"source": {"url": format!("oci://{replayed}")}, "verification": verified}),
            "Verified",
            reason::SIGNATURE_INVALID,
        ),
        (
            "an untrusted key",
            json!({"source": {"url": strangers}, "verification": verified}),
            "Verified",
            reason::UNTRUSTED_SIGNATURE,
        ),
        (
            "a 50 MB layer",
            json!({"source": {"url": format!("oci://{host}/vendor/huge:v1")}, "verification": verified}),
            "Fetched",
            reason::TOO_LARGE,
        ),
        (
            "a non-Wasm layer",
            json!({"source": {"url": format!("oci://{host}/vendor/tarball:v1")}, "verification": verified}),
            "Fetched",
            reason::NOT_WASM,
        ),
        (
            "a missing pull secret",
            json!({"source": {"url": stable, "pullSecret": "absent"}, "verification": verified}),
            "Fetched",
            reason::PULL_SECRET_ERROR,
        ),
        (
            "an unusable key",
            json!({"source": {"url": stable}, "verification": {"keys": [{"name": "junk", "publicKey": "not a key"}]}}),
            "Verified",
            reason::INVALID_KEY,
        ),
    ];
    for (what, spec, stage, want) in cases {
        apply(&api, "oci-vendor", "oci", spec).await;
        let p = wait_cr(&api, "oci-vendor", what, |p| {
            cond(p, "Degraded").0 == "True"
        })
        .await;
        let (_, r, m) = cond(&p, stage);
        assert_eq!(r, want, "{what}: {stage} says {r}: {m}");
        assert_eq!(
            cond(&p, "Ready").1,
            reason::SERVING_LAST_KNOWN_GOOD,
            "{what}"
        );
        assert_eq!(
            ctl.serving("oci-vendor"),
            Some(good.clone()),
            "{what}: the last good version left"
        );
        step(&format!("  {what}: {r}: {m}"));
    }
    // The registry down.
    reg.stop();
    apply(
        &api,
        "oci-vendor",
        "oci",
        json!({"source": {"url": stable}, "verification": verified, "order": 8}),
    )
    .await;
    let p = wait_cr(&api, "oci-vendor", "registry down", |p| {
        cond(p, "Degraded").0 == "True"
    })
    .await;
    let (_, r, m) = cond(&p, "Fetched");
    assert_eq!(r, reason::REGISTRY_ERROR, "{m}");
    assert_eq!(ctl.serving("oci-vendor"), Some(good.clone()));
    step(&format!("  the registry down: {r}: {m}"));

    step("5 a registry that wants credentials: a pull secret from the operator's namespace");
    let mut reg = start_registry(&t, &d.join("registry-logs-2"), Some(("robot", "secret"))).await;
    let host = reg.addr().to_owned();
    let private = format!("oci://{host}/private/plugin:v1");
    let (ok, _, err) = trainforge(&[
        "plugin",
        "push",
        f1.to_str().unwrap(),
        &private,
        "--ca-file",
        ca,
    ]);
    assert!(!ok, "pushed without credentials: {err}");
    let out = Command::new(env!("CARGO_BIN_EXE_trainforge"))
        .args([
            "plugin",
            "push",
            f1.to_str().unwrap(),
            &private,
            "--ca-file",
            ca,
            "--username",
            "robot",
        ])
        .env("TRAINFORGE_REGISTRY_PASSWORD", "secret")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pinned = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    // Without the secret: refused by the registry.
    apply(
        &api,
        "oci-private",
        "oci",
        json!({"source": {"url": pinned}}),
    )
    .await;
    let p = wait_cr(&api, "oci-private", "refused without credentials", |p| {
        cond(p, "Fetched").0 == "False"
    })
    .await;
    let (_, r, m) = cond(&p, "Fetched");
    assert_eq!(r, reason::REGISTRY_ERROR, "{m}");
    let auth = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "robot:secret");
    let config = json!({"auths": {host.clone(): {"auth": auth}}}).to_string();
    Api::<Secret>::namespaced(client.clone(), &secrets_ns)
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some("regcred".into()),
                    ..Default::default()
                },
                type_: Some("kubernetes.io/dockerconfigjson".into()),
                data: Some(BTreeMap::from([(
                    ".dockerconfigjson".into(),
                    ByteString(config.into_bytes()),
                )])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    api.delete("oci-vendor", &DeleteParams::default())
        .await
        .unwrap();
    apply(
        &api,
        "oci-private",
        "oci",
        json!({"source": {"url": pinned, "pullSecret": "regcred"}}),
    )
    .await;
    wait_cr(&api, "oci-private", "pulled with the pull secret", |p| {
        cond(p, "Ready").0 == "True"
    })
    .await;
    api.delete("oci-private", &DeleteParams::default())
        .await
        .unwrap();
    ctl.stop().await;

    step("6 signatures required; loopback registries refused unless allowed");
    let strict = Controller::start(
        &client,
        "strict",
        fetch_options(&t, false, &secrets_ns, true),
        &cache,
    );
    let blob = d.join("blob.wasm");
    std::fs::write(&blob, &v3).unwrap();
    let blob_url = format!("file://{}", blob.display());
    apply(
        &api,
        "strict-unsigned",
        "strict",
        json!({"source": {"url": blob_url}, "sha256": sha256_hex(&v3)}),
    )
    .await;
    let p = wait_cr(&api, "strict-unsigned", "signature required", |p| {
        cond(p, "Verified").0 == "False"
    })
    .await;
    assert_eq!(
        cond(&p, "Verified").1,
        reason::SIGNATURE_REQUIRED,
        "{}",
        cond(&p, "Verified").2
    );
    let (ok, _, err) = trainforge(&[
        "plugin",
        "sign",
        "--key",
        vendor_key.to_str().unwrap(),
        blob.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    apply(
        &api,
        "strict-unsigned",
        "strict",
        json!({"source": {"url": blob_url}, "sha256": sha256_hex(&v3), "verification": verified}),
    )
    .await;
    let p = wait_cr(&api, "strict-unsigned", "blob signature verified", |p| {
        cond(p, "Ready").0 == "True"
    })
    .await;
    assert_eq!(
        cond(&p, "Verified").1,
        reason::SIGNATURE_VERIFIED,
        "{}",
        cond(&p, "Verified").2
    );
    apply(&api, "strict-loopback", "strict", json!({"source": {"url": format!("oci://{host}/never/plugin:v1")}, "verification": verified})).await;
    let p = wait_cr(&api, "strict-loopback", "loopback refused", |p| {
        cond(p, "Fetched").0 == "False"
    })
    .await;
    let (_, r, m) = cond(&p, "Fetched");
    assert_eq!(r, reason::ADDRESS_NOT_ALLOWED, "{m}");
    assert!(m.contains("loopback"), "{m}");
    assert!(
        !std::fs::read_to_string(reg.log())
            .unwrap()
            .contains("/v2/never/"),
        "the guard refuses before any request"
    );
    for n in ["strict-unsigned", "strict-loopback"] {
        api.delete(n, &DeleteParams::default()).await.unwrap();
    }
    strict.stop().await;
    reg.stop();
}

fn report_figure(cold: Duration, warm: Duration) {
    eprintln!(
        "plugin_oci: FIGURE apply -> serving of an oci:// plugin (pull + verify + compile): cold {} ms, artifact cache warm {} ms",
        cold.as_millis(),
        warm.as_millis()
    );
}

/// Every hop a real registry sends the client to passes the address guard:
/// a blob redirect (the registry's storage elsewhere) and a token realm,
/// both at 127.0.0.2, which a guard allowing only 127.0.0.1/32 refuses.
/// Unguarded, the same pulls follow the hop and succeed, and the registry at
/// 127.0.0.2 logs the requests: so the refusals are the guard's, and
/// guarded, 127.0.0.2 is never contacted.
#[tokio::test]
async fn every_hop_a_real_registry_sends_the_client_to_is_guarded() {
    use trainforge::oci::registry::RegistryError;
    use trainforge::ops::netguard::NetGuard;
    use trainforge_testenv::registry::Options as RegistryRun;

    let Some(_env) = env() else { return };
    const COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0 a component for the hop test";
    let paths = Paths::from_env();
    for https in [true, false] {
        let scheme = if https { "https" } else { "http" };
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let t = tls_for(
            d,
            &[
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            ],
        );
        let tls = https.then_some((t.cert.as_path(), t.key.as_path()));
        let logs = d.join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let start =
            async |opts: RegistryRun<'_>| Registry::start_opts(&paths, &logs, &opts).await.unwrap();
        // Elsewhere: a registry at 127.0.0.2 holding the blobs, and the realm.
        let elsewhere = start(RegistryRun {
            host: Some("127.0.0.2"),
            tls,
            ..RegistryRun::default()
        })
        .await;
        let redirecting = start(RegistryRun {
            tls,
            redirect_blobs: Some(&elsewhere.url()),
            ..RegistryRun::default()
        })
        .await;
        let realm = format!("{}/token", elsewhere.url());
        let tokened = start(RegistryRun {
            tls,
            token_realm: Some(&realm),
            ..RegistryRun::default()
        })
        .await;
        let client = |guarded: bool| {
            OciRegistry::new(&RegistryOptions {
                plain_http: if https {
                    Vec::new()
                } else {
                    [&elsewhere, &redirecting, &tokened]
                        .iter()
                        .map(|r| r.addr().to_owned())
                        .collect()
                },
                extra_roots_pem: Some(t.ca_pem.as_bytes().to_vec()),
                guard: guarded.then(|| NetGuard::new(vec!["127.0.0.1/32".parse().unwrap()])),
            })
            .unwrap()
        };
        let reference = |r: &Registry| format!("{}/plugins/hops:v1", r.addr());
        let anonymous = RegistryAuth::Anonymous;
        // The same artifact at 127.0.0.2 (where blob reads are redirected)
        // and on both registries at 127.0.0.1; the token-wanting one is
        // pushed to through its realm.
        for r in [&elsewhere, &redirecting, &tokened] {
            client(false)
                .push(&reference(r), COMPONENT, &anonymous)
                .await
                .unwrap_or_else(|e| panic!("{scheme}: pushing to {}: {e}", r.addr()));
        }
        let elsewhere_log = || std::fs::read_to_string(elsewhere.log()).unwrap();
        for (hop, r) in [("blob redirect", &redirecting), ("token realm", &tokened)] {
            let before = elsewhere_log().lines().count();
            let pulled = client(false)
                .pull(&reference(r), &anonymous, 1 << 20)
                .await
                .unwrap_or_else(|e| panic!("{scheme} {hop}: unguarded: {e}"));
            assert_eq!(pulled.bytes, COMPONENT, "{scheme} {hop}");
            let unguarded = elsewhere_log().lines().count();
            assert!(
                unguarded > before,
                "{scheme} {hop}: the hop is real: 127.0.0.2 logged nothing"
            );

            let e = client(true)
                .pull(&reference(r), &anonymous, 1 << 20)
                .await
                .expect_err("the hop to 127.0.0.2 must be refused");
            let text = e.to_string();
            assert!(
                matches!(e, RegistryError::AddressNotAllowed { .. })
                    && text.contains("127.0.0.2")
                    && text.contains("loopback"),
                "{scheme} {hop}: {e:?}"
            );
            assert_eq!(
                elsewhere_log().lines().count(),
                unguarded,
                "{scheme} {hop}: guarded, 127.0.0.2 was contacted:\n{}",
                elsewhere_log()
            );
            step(&format!("hops: {scheme} {hop} to 127.0.0.2: {text}"));
        }
    }
}
