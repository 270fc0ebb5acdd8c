//! ComponentBuilder: the info (after every earlier phase) and the in-memory
//! TrainJob → the `jobset.x-k8s.io/v1alpha2` JobSet.
//!
//! Steps, in order:
//! 1. copy pod-set state onto the blueprint by index (volumes; containers'
//!    command/image and env/ports/volumeMounts upserts; init containers
//!    likewise, appending slots the template does not have);
//! 2. initializer overrides (`STORAGE_URI`, env, `envFrom` secret);
//! 3. trainer overrides (image/command/args, `trainer.env`);
//! 4. scheduler pod labels/annotations on every pod template;
//! 5. the failure policy ([`crate::failure`]);
//! 6. `suspend`, metadata (name, namespace, labels, annotations, owner).

use serde_json::{Value, json};
use trainforge_sdk::api::jobset::v1alpha2 as jobset;
use trainforge_sdk::api::trainer::v1alpha1::constants::{
    ANCESTOR_DATASET_INITIALIZER, ANCESTOR_MODEL_INITIALIZER, ANCESTOR_TRAINER, CONTAINER_NODE,
    NODE,
};
use trainforge_sdk::api::trainer::v1alpha1::{Initializer, Trainer};
use trainforge_sdk::k8s_openapi::api::core::v1::EnvVar;
use trainforge_sdk::{ANCESTOR_LABEL, Container, Info, PluginError};

use crate::json::{
    bool_at, merge_string_map, path_mut, str_at, to_json, upsert_by_key, upsert_port, with_arr,
};

/// Env var carrying an initializer's `storageUri`.
pub const ENV_STORAGE_URI: &str = "STORAGE_URI";

/// The TrainJob fields the builder reads.
#[derive(Debug, Default)]
pub struct Overrides {
    /// `spec.trainer` (as mutated by earlier phases).
    pub trainer: Option<Trainer>,
    /// `spec.initializer`.
    pub initializer: Option<Initializer>,
    /// `spec.suspend`.
    pub suspend: bool,
}

impl Overrides {
    /// Read them from the TrainJob JSON; a malformed field is an error
    /// naming it.
    pub fn from_trainjob(trainjob: &Value) -> Result<Self, PluginError> {
        Ok(Overrides {
            trainer: parse(trainjob, "/spec/trainer", "spec.trainer")?,
            initializer: parse(trainjob, "/spec/initializer", "spec.initializer")?,
            suspend: bool_at(trainjob, "/spec/suspend"),
        })
    }
}

fn parse<T: serde::de::DeserializeOwned>(
    v: &Value,
    pointer: &str,
    field: &str,
) -> Result<Option<T>, PluginError> {
    match v.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => serde_json::from_value(x.clone())
            .map(Some)
            .map_err(|e| PluginError::InvalidInput(format!("{field}: {e}"))),
    }
}

/// Build the JobSet for TrainJob `name` in `namespace`.
pub fn build_jobset(
    name: &str,
    namespace: &str,
    trainjob: &Value,
    info: &Info,
    owner: Value,
) -> Result<Value, PluginError> {
    let ov = Overrides::from_trainjob(trainjob)?;
    let mut spec = info.template_spec.obj.clone();
    if !spec.is_object() {
        spec = json!({});
    }
    copy_pod_sets(&mut spec, info)?;
    let launcher_as_node = info
        .policy("mlPolicy.mpi.runLauncherAsNode")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    with_arr(
        &mut spec,
        "replicatedJobs",
        |rjobs| -> Result<(), PluginError> {
            for rjob in rjobs.iter_mut() {
                let ancestor = rjob
                    .pointer("/template/metadata/labels")
                    .and_then(|l| l.get(ANCESTOR_LABEL))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let rjob_name = str_at(rjob, "/name").unwrap_or_default().to_owned();
                match ancestor.as_deref() {
                    Some(a @ (ANCESTOR_DATASET_INITIALIZER | ANCESTOR_MODEL_INITIALIZER)) => {
                        set(rjob, "replicas", json!(1));
                        apply_initializer(rjob, a, ov.initializer.as_ref())?;
                    }
                    Some(ANCESTOR_TRAINER) => {
                        set(rjob, "replicas", json!(1));
                        apply_trainer_fields(rjob, ov.trainer.as_ref());
                    }
                    _ => {}
                }
                let gets_env = ancestor.as_deref() == Some(ANCESTOR_TRAINER)
                    || (launcher_as_node && rjob_name == NODE);
                if gets_env && let Some(env) = ov.trainer.as_ref().and_then(|t| t.env.as_ref()) {
                    upsert_env(rjob, CONTAINER_NODE, env)?;
                }
                let sched = &info.scheduler;
                if !(sched.pod_labels.is_empty() && sched.pod_annotations.is_empty()) {
                    let pod_meta = path_mut(rjob, &["template", "spec", "template", "metadata"]);
                    merge_string_map(pod_meta, "labels", &sched.pod_labels);
                    merge_string_map(pod_meta, "annotations", &sched.pod_annotations);
                }
            }
            Ok(())
        },
    )?;
    order_after_initializers(&mut spec);
    if let Some(policy) = crate::failure::resolve(info, trainjob)? {
        crate::failure::apply(&mut spec, &policy)?;
    }
    set(&mut spec, "suspend", json!(ov.suspend));

    let mut metadata = json!({"name": name, "namespace": namespace});
    merge_string_map(&mut metadata, "labels", &info.labels);
    merge_string_map(&mut metadata, "annotations", &info.annotations);
    set(&mut metadata, "ownerReferences", json!([owner]));
    let mut js = json!({
        "apiVersion": jobset::API_VERSION,
        "kind": jobset::KIND,
        "metadata": metadata,
        "spec": spec,
    });
    prune_empty_metadata(&mut js);
    Ok(js)
}

/// Remove empty `labels`/`annotations` maps and then empty `metadata`
/// objects from every replicated job's Job template and pod template.
///
/// Rule: the JobSet is applied with server-side apply, and an empty object
/// there is not "nothing": when an apply sends `metadata: {}` (or
/// `labels: {}`) where the previous apply owned fields inside it, the API
/// server removes those fields and stores the object as `null`, which the
/// JobSet schema refuses ("must be of type object"). That is what a
/// suspended TrainJob's JobSet hits when Kueue removes the pod labels it
/// added at admission. Leaving the object out removes the fields cleanly.
pub fn prune_empty_metadata(jobset: &mut Value) {
    let Some(rjobs) = jobset
        .pointer_mut("/spec/replicatedJobs")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for rjob in rjobs {
        for template in ["/template", "/template/spec/template"] {
            if let Some(Value::Object(t)) = rjob.pointer_mut(template) {
                prune_metadata(t);
            }
        }
    }
}

fn prune_metadata(template: &mut serde_json::Map<String, Value>) {
    let empty = |v: &Value| matches!(v, Value::Null) || v.as_object().is_some_and(|m| m.is_empty());
    if let Some(Value::Object(meta)) = template.get_mut("metadata") {
        meta.retain(|k, v| !(matches!(k.as_str(), "labels" | "annotations") && empty(v)));
    }
    if template.get("metadata").is_some_and(empty) {
        template.remove("metadata");
    }
}

/// Initializers prepare what training reads, so the trainer must not start
/// before they finish. A runtime that orders its jobs itself (any `dependsOn`,
/// or `startupPolicy: InOrder`) is left alone; otherwise, in template order,
/// every initializer and trainer job after the first initializer depends on
/// the previous initializer reaching `Complete` — the chain upstream's own
/// initializer runtimes spell out (JobSet allows one `dependsOn` item per job).
fn order_after_initializers(spec: &mut Value) {
    let in_order = spec
        .pointer("/startupPolicy/startupPolicyOrder")
        .and_then(Value::as_str)
        == Some("InOrder");
    let Some(rjobs) = spec.get_mut("replicatedJobs").and_then(Value::as_array_mut) else {
        return;
    };
    if in_order || rjobs.iter().any(|j| j.get("dependsOn").is_some()) {
        return;
    }
    let mut previous_initializer: Option<String> = None;
    for rjob in rjobs.iter_mut() {
        let ancestor = rjob
            .pointer("/template/metadata/labels")
            .and_then(|l| l.get(ANCESTOR_LABEL))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let is_initializer = matches!(
            ancestor.as_deref(),
            Some(ANCESTOR_DATASET_INITIALIZER | ANCESTOR_MODEL_INITIALIZER)
        );
        if (is_initializer || ancestor.as_deref() == Some(ANCESTOR_TRAINER))
            && let Some(prev) = &previous_initializer
        {
            set(
                rjob,
                "dependsOn",
                json!([{"name": prev, "status": "Complete"}]),
            );
        }
        if is_initializer {
            previous_initializer = str_at(rjob, "/name").map(str::to_owned);
        }
    }
}

fn set(v: &mut Value, key: &str, value: Value) {
    if let Value::Object(m) = v {
        m.insert(key.to_owned(), value);
    }
}

/// Step 1: pod-set state onto the template, by index.
fn copy_pod_sets(spec: &mut Value, info: &Info) -> Result<(), PluginError> {
    let sets = &info.template_spec.pod_sets;
    with_arr(spec, "replicatedJobs", |rjobs| {
        if rjobs.len() < sets.len() {
            return Err(PluginError::InvalidInput(format!(
                "the JobSet template has {} replicated jobs but the runtime info has {} pod sets",
                rjobs.len(),
                sets.len()
            )));
        }
        for (ps, rjob) in sets.iter().zip(rjobs.iter_mut()) {
            let pod = path_mut(rjob, &["template", "spec", "template", "spec"]);
            for v in &ps.volumes {
                let v = to_json(v, "volume")?;
                with_arr(pod, "volumes", |l| upsert_by_key(l, v, "name"));
            }
            copy_containers(pod, "containers", &ps.containers)?;
            copy_containers(pod, "initContainers", &ps.init_containers)?;
        }
        Ok(())
    })
}

fn copy_containers(
    pod: &mut Value,
    key: &str,
    containers: &[Container],
) -> Result<(), PluginError> {
    if containers.is_empty() {
        return Ok(());
    }
    with_arr(pod, key, |list| {
        for (j, c) in containers.iter().enumerate() {
            if j >= list.len() {
                // New slot (e.g. an init container added by a plugin).
                list.push(json!({"name": c.name}));
            }
            if let Some(slot) = list.get_mut(j) {
                apply_container(slot, c)?;
            }
        }
        Ok(())
    })
}

/// Copy one container's editable state onto its template container.
fn apply_container(slot: &mut Value, c: &Container) -> Result<(), PluginError> {
    if !c.command.is_empty() {
        set(slot, "command", json!(c.command));
    }
    if let Some(image) = c.image.as_deref().filter(|i| !i.is_empty()) {
        set(slot, "image", json!(image));
    }
    // The pod set's env starts as a copy of the template's, and plugins may
    // have placed their variables before the entries that reference them as
    // `$(VAR)` (a variable only expands if defined earlier). When the pod set
    // still holds every template entry, its order is the one to keep;
    // otherwise (a template entry was dropped) upsert, keeping the template's.
    let template_names: Vec<String> = slot
        .get("env")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(|e| e.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let covers_template = template_names
        .iter()
        .all(|n| c.env.iter().any(|e| &e.name == n));
    if covers_template && !c.env.is_empty() {
        let env = c
            .env
            .iter()
            .map(|e| to_json(e, "env var"))
            .collect::<Result<Vec<_>, _>>()?;
        set(slot, "env", Value::Array(env));
    } else {
        for e in &c.env {
            let e = to_json(e, "env var")?;
            with_arr(slot, "env", |l| upsert_by_key(l, e, "name"));
        }
    }
    for p in &c.ports {
        let p = to_json(p, "container port")?;
        with_arr(slot, "ports", |l| upsert_port(l, p));
    }
    for m in &c.volume_mounts {
        let m = to_json(m, "volume mount")?;
        with_arr(slot, "volumeMounts", |l| upsert_by_key(l, m, "mountPath"));
    }
    Ok(())
}

/// Run `f` on the container `name` of the replicated job's pod template.
fn with_container(
    rjob: &mut Value,
    name: &str,
    f: impl FnOnce(&mut Value) -> Result<(), PluginError>,
) -> Result<(), PluginError> {
    let pod = path_mut(rjob, &["template", "spec", "template", "spec"]);
    with_arr(pod, "containers", |list| {
        match list
            .iter_mut()
            .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
        {
            Some(c) => f(c),
            None => Ok(()),
        }
    })
}

fn upsert_env(rjob: &mut Value, container: &str, env: &[EnvVar]) -> Result<(), PluginError> {
    with_container(rjob, container, |c| {
        for e in env {
            let e = to_json(e, "env var")?;
            with_arr(c, "env", |l| upsert_by_key(l, e, "name"));
        }
        Ok(())
    })
}

/// Step 2: `spec.initializer.dataset`/`.model` onto the container named
/// like the initializer.
fn apply_initializer(
    rjob: &mut Value,
    ancestor: &str,
    init: Option<&Initializer>,
) -> Result<(), PluginError> {
    let (uri, env, secret) = match (ancestor, init) {
        (
            ANCESTOR_DATASET_INITIALIZER,
            Some(Initializer {
                dataset: Some(d), ..
            }),
        ) => (
            d.storage_uri.as_ref(),
            d.env.as_ref(),
            d.secret_ref.as_ref(),
        ),
        (ANCESTOR_MODEL_INITIALIZER, Some(Initializer { model: Some(m), .. })) => (
            m.storage_uri.as_ref(),
            m.env.as_ref(),
            m.secret_ref.as_ref(),
        ),
        _ => return Ok(()),
    };
    let mut all_env = Vec::new();
    if let Some(uri) = uri {
        all_env.push(EnvVar {
            name: ENV_STORAGE_URI.into(),
            value: Some(uri.clone()),
            value_from: None,
        });
    }
    all_env.extend(env.into_iter().flatten().cloned());
    upsert_env(rjob, ancestor, &all_env)?;
    if let Some(secret) = secret {
        let from = json!({"secretRef": {"name": secret.name}});
        with_container(rjob, ancestor, |c| {
            with_arr(c, "envFrom", |l| {
                if !l.contains(&from) {
                    l.push(from);
                }
            });
            Ok(())
        })?;
    }
    Ok(())
}

/// Step 3: `spec.trainer.image/command/args` onto container `node`.
fn apply_trainer_fields(rjob: &mut Value, trainer: Option<&Trainer>) {
    let Some(t) = trainer else { return };
    let _ = with_container(rjob, CONTAINER_NODE, |c| {
        if let Some(image) = &t.image {
            set(c, "image", json!(image));
        }
        if let Some(command) = &t.command {
            set(c, "command", json!(command));
        }
        if let Some(args) = &t.args {
            set(c, "args", json!(args));
        }
        Ok(())
    });
}
