//! The webhook certificate Secret and the webhooks' `caBundle` on a real API
//! server (api mode): two rotators starting at once end with one CA and the
//! same Secret, and both configurations trust it; a configuration created
//! late is patched on a later pass, and an unchanged one is not written; a
//! Secret whose CA is near expiry is renewed with the old CA kept in
//! `ca.crt` and in every `caBundle`.
//!
//! The webhook configurations created here call an unused local URL with
//! `failurePolicy: Ignore` for a made-up group, so they cannot affect other
//! tests sharing the control plane.
//!
//! Skips (passes with a note on stderr) when the control plane is not built.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use trainforge::admission::certs::{self, CertOptions, CertRotator};
use trainforge_testenv::{Mode, TestEnv};

fn env() -> Option<&'static TestEnv> {
    trainforge_testenv::require!(Mode::Api)
}

fn options(ns: &str, config: &str) -> CertOptions {
    let mut opts = CertOptions::for_service(ns, "webhook");
    opts.ip_addresses = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
    opts.mutating_configurations = vec![config.to_owned()];
    opts.validating_configurations = vec![config.to_owned()];
    opts.check_interval = Duration::from_secs(3600);
    opts
}

fn webhook(name: &str) -> serde_json::Value {
    json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": "https://127.0.0.1:1/never"},
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "timeoutSeconds": 1,
        "rules": [{
            "apiGroups": ["example.invalid"],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["widgets"],
        }],
    })
}

async fn create_mutating(client: &kube::Client, name: &str) {
    let obj: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [webhook("a.example.invalid")],
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
}

async fn create_validating(client: &kube::Client, name: &str) {
    let obj: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [webhook("a.example.invalid"), webhook("b.example.invalid")],
    }))
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
}

async fn delete_configurations(client: &kube::Client, name: &str) {
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// Every `caBundle` of both configurations named `name`.
async fn ca_bundles(client: &kube::Client, name: &str) -> Vec<String> {
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    let mut out: Vec<String> = Vec::new();
    for w in m.webhooks.unwrap_or_default() {
        out.push(bundle_text(w.client_config.ca_bundle));
    }
    for w in v.webhooks.unwrap_or_default() {
        out.push(bundle_text(w.client_config.ca_bundle));
    }
    out
}

fn bundle_text(b: Option<k8s_openapi::ByteString>) -> String {
    String::from_utf8(b.map(|b| b.0).unwrap_or_default()).unwrap()
}

async fn secret(client: &kube::Client, ns: &str) -> certs::Bundle {
    let s = Api::<Secret>::namespaced(client.clone(), ns)
        .get(certs::DEFAULT_SECRET_NAME)
        .await
        .unwrap();
    assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
    certs::bundle_of(&s)
}

fn cas(pem: &str) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.unwrap().to_vec())
        .collect()
}

fn leaf(pem: &str) -> Vec<u8> {
    cas(pem).remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rotators_agree_on_one_ca_and_patch_every_webhook() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("webhook-certs").await.unwrap();
    let config = format!("{ns}.example.invalid");
    create_mutating(&client, &config).await;
    create_validating(&client, &config).await;
    let stop = CancellationToken::new();

    let (a, b) = tokio::join!(
        CertRotator::start(client.clone(), options(&ns, &config), stop.clone()),
        CertRotator::start(client.clone(), options(&ns, &config), stop.clone()),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let stored = secret(&client, &ns).await;
    assert_eq!(cas(&stored.ca_bundle).len(), 1, "exactly one CA");
    // Both replicas serve the stored certificate.
    assert_eq!(a.leaf_der().unwrap(), leaf(&stored.cert));
    assert_eq!(b.leaf_der().unwrap(), leaf(&stored.cert));
    let bundles = ca_bundles(&client, &config).await;
    assert_eq!(bundles.len(), 3);
    assert!(
        bundles.iter().all(|b| *b == stored.ca_bundle),
        "every webhook trusts the CA"
    );

    // A third start adopts the Secret unchanged.
    let c = CertRotator::start(client.clone(), options(&ns, &config), stop.clone())
        .await
        .unwrap();
    assert_eq!(c.leaf_der().unwrap(), leaf(&stored.cert));
    assert_eq!(secret(&client, &ns).await, stored);

    stop.cancel();
    delete_configurations(&client, &config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_configurations_are_patched_and_unchanged_ones_are_not_written() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("webhook-late").await.unwrap();
    let config = format!("{ns}.example.invalid");
    let opts = options(&ns, &config);
    let bundle = certs::ensure_secret(&client, &opts, time::OffsetDateTime::now_utc())
        .await
        .unwrap();

    let report = certs::sync_ca_bundles(&client, &opts, &bundle.ca_bundle)
        .await
        .unwrap();
    assert_eq!(report.missing.len(), 2, "{report:?}");
    assert!(report.patched.is_empty());

    create_mutating(&client, &config).await;
    create_validating(&client, &config).await;
    let report = certs::sync_ca_bundles(&client, &opts, &bundle.ca_bundle)
        .await
        .unwrap();
    assert_eq!(report.patched.len(), 2, "{report:?}");
    let rv = |c: &str| {
        let client = client.clone();
        let c = c.to_owned();
        async move {
            Api::<ValidatingWebhookConfiguration>::all(client)
                .get(&c)
                .await
                .unwrap()
                .metadata
                .resource_version
        }
    };
    let before = rv(&config).await;
    let report = certs::sync_ca_bundles(&client, &opts, &bundle.ca_bundle)
        .await
        .unwrap();
    assert_eq!(report.unchanged.len(), 2, "{report:?}");
    assert!(report.patched.is_empty());
    assert_eq!(rv(&config).await, before, "no needless write");
    assert!(
        ca_bundles(&client, &config)
            .await
            .iter()
            .all(|b| *b == bundle.ca_bundle)
    );
    // The Secret is kept as is when nothing is due.
    let again = certs::ensure_secret(&client, &opts, time::OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert_eq!(again, bundle);
    delete_configurations(&client, &config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_near_expiry_is_renewed_and_the_old_one_stays_trusted() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("webhook-renew").await.unwrap();
    let config = format!("{ns}.example.invalid");
    create_mutating(&client, &config).await;
    create_validating(&client, &config).await;
    let opts = options(&ns, &config);

    // A bundle made 250 days ago: its CA is past 2/3 of its lifetime.
    let old = certs::generate(
        &opts.dns_names,
        &opts.ip_addresses,
        time::OffsetDateTime::now_utc() - time::Duration::days(250),
        certs::SERVING_LIFETIME,
    )
    .unwrap();
    let data = [
        (certs::CA_CRT, &old.ca_bundle),
        (certs::CA_KEY, &old.ca_key),
        (certs::TLS_CRT, &old.cert),
        (certs::TLS_KEY, &old.key),
    ]
    .into_iter()
    .map(|(k, v)| {
        (
            k.to_owned(),
            k8s_openapi::ByteString(v.clone().into_bytes()),
        )
    })
    .collect();
    let s = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(certs::DEFAULT_SECRET_NAME.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    certs::sync_ca_bundles(&client, &opts, &old.ca_bundle)
        .await
        .unwrap();

    let stop = CancellationToken::new();
    let resolver = CertRotator::start(client.clone(), opts.clone(), stop.clone())
        .await
        .unwrap();
    let renewed = secret(&client, &ns).await;
    let renewed_cas = cas(&renewed.ca_bundle);
    assert_eq!(renewed_cas.len(), 2, "new CA + old CA");
    assert_ne!(renewed_cas[0], leaf(&old.ca_bundle), "a new CA first");
    assert_eq!(renewed_cas[1], leaf(&old.ca_bundle), "the old CA kept");
    assert_ne!(renewed.ca_key, old.ca_key);
    assert_eq!(resolver.leaf_der().unwrap(), leaf(&renewed.cert));
    for b in ca_bundles(&client, &config).await {
        let trusted = cas(&b);
        assert!(
            trusted.contains(&renewed_cas[0]) && trusted.contains(&renewed_cas[1]),
            "caBundle holds both CAs"
        );
    }
    stop.cancel();
    delete_configurations(&client, &config).await;
}
