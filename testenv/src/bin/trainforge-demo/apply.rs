//! Applying the demo's manifests: plugin configs, runtimes, TrainJobs.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Apply every plugin config of `dir` (one summary line; failures one line each).
pub(crate) async fn apply_plugins(client: &kube::Client, dir: &Path) {
    let files = match manifests::yaml_files(dir) {
        Ok(f) => f,
        Err(e) => {
            println!("demo: cannot list plugin configs: {e}");
            return;
        }
    };
    let mut applied = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "kustomization.yaml"))
    {
        let docs = match manifests::load_yaml_docs(file) {
            Ok(d) => d,
            Err(e) => {
                println!("demo: cannot read {}: {e}", shown(file));
                continue;
            }
        };
        for doc in docs {
            match manifests::apply(client, &doc, FIELD_MANAGER).await {
                Ok(o) => applied.push(o.metadata.name.unwrap_or_default()),
                Err(e) => println!(
                    "demo: REJECTED {} from {}: {e}",
                    describe(&doc),
                    shown(file)
                ),
            }
        }
    }
    println!(
        "demo: applied {} ClusterTrainerPlugins from {}: {}",
        applied.len(),
        shown(dir),
        applied.join(", ")
    );
}

/// Every document of every file, in order, with the file it came from
/// (unreadable files are reported and skipped).
pub(crate) fn load_examples(files: &[PathBuf]) -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    for file in files {
        match manifests::load_yaml_docs(file) {
            Ok(docs) => out.extend(docs.into_iter().map(|d| (file.clone(), d))),
            Err(e) => println!("demo: cannot read {}: {e}", shown(file)),
        }
    }
    out
}

/// Whether a manifest is a TrainJob.
pub(crate) fn is_trainjob(doc: &Value) -> bool {
    doc.get("kind").and_then(Value::as_str) == Some("TrainJob")
        && doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("trainer.kubeflow.org/"))
}

/// Apply `docs` in order (failures are reported); returns the TrainJobs
/// applied as `(namespace, name)`.
pub(crate) async fn apply_docs(
    client: &kube::Client,
    docs: &[(PathBuf, Value)],
) -> Vec<(String, String)> {
    let mut trainjobs = Vec::new();
    for (file, doc) in docs {
        let what = describe(doc);
        match manifests::apply(client, doc, FIELD_MANAGER).await {
            Ok(o) => {
                println!("demo: applied {what} from {}", shown(file));
                if is_trainjob(doc) {
                    let ns = o.metadata.namespace.unwrap_or_else(|| "default".into());
                    trainjobs.push((ns, o.metadata.name.unwrap_or_default()));
                }
            }
            Err(e) => println!("demo: REJECTED {what} from {}: {e}", shown(file)),
        }
    }
    trainjobs
}
