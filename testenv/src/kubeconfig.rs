//! The admin kubeconfig of an environment.

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
