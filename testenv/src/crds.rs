//! Installing CRDs (server-side apply, never client-side: several are larger
//! than the 256 KiB last-applied annotation) and waiting until they are served.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::Value;

use crate::manifests::{load_yaml_docs, yaml_files};
use crate::{Error, paths, wait};

/// Field manager used for CRD installs.
pub const FIELD_MANAGER: &str = "trainforge-testenv";

/// The CRD files to install: the third-party ones from `<data>/crds` and all
/// YAML files in our own CRD directory (missing or empty is fine).
pub fn crd_files(data: &Path, own: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut files: Vec<PathBuf> = paths::THIRD_PARTY_CRDS
        .iter()
        .map(|f| data.join("crds").join(f))
        .collect();
    files.extend(yaml_files(own)?);
    Ok(files)
}

/// Apply every CRD document in `files`, then wait until each is Established
/// and its resource appears in discovery. Returns the CRD names.
pub async fn install(
    client: &kube::Client,
    files: &[PathBuf],
    timeout: Duration,
) -> Result<Vec<String>, Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut installed = Vec::new();
    for file in files {
        for doc in load_yaml_docs(file)? {
            if doc.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                continue;
            }
            let name = doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::manifest(file, "CRD without metadata.name"))?
                .to_string();
            api.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&doc),
            )
            .await?;
            tracing::debug!(crd = %name, file = %file.display(), "applied");
            installed.push(name);
        }
    }
    for name in &installed {
        let a = api.clone();
        let crd = wait::poll_until(
            &format!("CRD {name} Established"),
            timeout,
            Duration::from_millis(100),
            || Ok(()),
            || {
                let a = a.clone();
                async move {
                    let crd = a.get(name).await.ok()?;
                    let established = crd
                        .status
                        .as_ref()?
                        .conditions
                        .as_ref()?
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True");
                    established.then_some(crd)
                }
            },
        )
        .await?;
        // Discovery: every served version lists the plural.
        let group = crd.spec.group.clone();
        let plural = crd.spec.names.plural.clone();
        for v in crd.spec.versions.iter().filter(|v| v.served) {
            let gv = format!("{group}/{}", v.name);
            let c = client.clone();
            let plural = plural.clone();
            wait::poll_until(
                &format!("{plural} in discovery of {gv}"),
                timeout,
                Duration::from_millis(100),
                || Ok(()),
                || {
                    let (c, gv, plural) = (c.clone(), gv.clone(), plural.clone());
                    async move {
                        let list = c.list_api_group_resources(&gv).await.ok()?;
                        list.resources
                            .iter()
                            .any(|r| r.name == plural)
                            .then_some(())
                    }
                },
            )
            .await?;
        }
    }
    Ok(installed)
}
