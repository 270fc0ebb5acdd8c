//! Kubeconfigs of an environment: the admin's, and a service account's
//! (a bound token from the TokenRequest API), so a component can run with
//! exactly the permissions its manifests give it.

use std::path::Path;

use crate::Error;

/// Write a kubeconfig for `server` (CA file + bearer token) to `path`.
pub fn write(path: &Path, server: &str, ca_file: &Path, token: &str) -> Result<(), Error> {
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: trainforge-testenv
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: testenv-admin
  user:
    token: {token}
contexts:
- name: trainforge-testenv
  context:
    cluster: trainforge-testenv
    user: testenv-admin
    namespace: default
current-context: trainforge-testenv
",
        ca = ca_file.display()
    );
    std::fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// A fresh client from a kubeconfig file, bound to the caller's runtime.
pub async fn client(path: &Path) -> Result<kube::Client, Error> {
    let kc = kube::config::Kubeconfig::read_from(path)?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

/// Write a kubeconfig acting as service account `namespace/name` to `path`:
/// the server and CA of the admin kubeconfig `admin`, and a token for the
/// service account requested through the TokenRequest API (valid for
/// `ttl_seconds`).
pub async fn write_service_account(
    admin: &Path,
    namespace: &str,
    name: &str,
    ttl_seconds: i64,
    path: &Path,
) -> Result<(), Error> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let kc = kube::config::Kubeconfig::read_from(admin)?;
    let cluster = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| Error::Supervisor("admin kubeconfig has no cluster".into()))?;
    let server = cluster.server.unwrap_or_default();
    let ca = cluster
        .certificate_authority
        .ok_or_else(|| Error::Supervisor("admin kubeconfig has no CA file".into()))?;
    let client = self::client(admin).await?;
    let api: kube::Api<ServiceAccount> = kube::Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(ttl_seconds),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let answer: TokenRequest = api
        .create_subresource("token", name, &kube::api::PostParams::default(), &request)
        .await?;
    let token = answer
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| Error::Supervisor(format!("no token for {namespace}/{name}")))?;
    write(path, &server, Path::new(&ca), &token)
}
