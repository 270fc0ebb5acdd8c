//! `trainforge render -f trainjob.yaml [-f runtime.yaml ...]`: print the
//! objects the operator would apply for each TrainJob (YAML, apply order)
//! and its warnings, using the builtin plugins, with no cluster.
//!
//! The work is done by [`crate::pipeline::run`], the same code the
//! controller runs; this module only reads files and prints. The builtin
//! plugins are compiled once per user and Trainforge version and then loaded
//! from an on-disk artifact cache (see [`builtin_plugins`], [`CACHE_DIR_ENV`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::Value;
use trainforge_api::trainer::v1alpha1::TrainJob;

pub use crate::pipeline::input::{Input, InputError, PLACEHOLDER_UID, plugin_inputs};
use crate::pipeline::run::{PipelineError, Rendered, run as run_pipeline};
use crate::plugin::{self, PluginRuntime, PluginSet, RuntimeConfig};

/// Arguments of `trainforge render`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The builtin plugins are compiled on first use and kept in \
    $TRAINFORGE_CACHE_DIR (default: ${XDG_CACHE_HOME:-$HOME/.cache}/trainforge/artifacts; \
    set it to the empty string to disable the cache)."
)]
pub struct RenderArgs {
    /// YAML files (multi-document) holding TrainJobs and the
    /// (Cluster)TrainingRuntimes they reference.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Namespace of TrainJobs and TrainingRuntimes that have none.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// A tenant plugin to render with, as `<TrainerPlugin file>=<component
    /// .wasm>` (repeatable): it serves the TrainJobs of its namespace that
    /// its selector matches, after the builtin plugins, within the ceiling
    /// of `--policy`, exactly as the operator would serve it.
    #[arg(long = "trainer-plugin", value_name = "TRAINERPLUGIN=WASM")]
    pub trainer_plugins: Vec<String>,
    /// The `TrainerPluginPolicy` whose ceiling applies to
    /// `--trainer-plugin` (default: the operator's defaults; its
    /// `namespaceSelector` is not checked offline).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Upstream's feature gates, `Name=true,…`, as the operator's
    /// `--feature-gates` (each off by default): `TrainJobFailurePolicy`.
    #[arg(long, default_value = "")]
    pub feature_gates: crate::pipeline::features::Features,
}

/// Why `render` failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A file could not be read.
    #[error("reading {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The input files do not make TrainJobs with their runtimes.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A `--trainer-plugin` could not be read or is refused by the ceiling.
    #[error("--trainer-plugin {arg}: {reason}")]
    TenantPlugin {
        /// The argument.
        arg: String,
        /// Why.
        reason: String,
    },
    /// A TrainJob's tenant plugins cannot join the builtin ones.
    #[error("TrainJob {trainjob}: {source}")]
    TenantSet {
        /// TrainJob name.
        trainjob: String,
        /// The clash.
        source: crate::controller::tenants::ComposeError,
    },
    /// The builtin plugins could not be loaded.
    #[error("loading builtin plugins: {0}")]
    Plugins(#[from] plugin::Error),
    /// The pipeline refused the TrainJob.
    #[error("TrainJob {trainjob:?}: {source}")]
    Pipeline {
        /// TrainJob name.
        trainjob: String,
        /// The pipeline error (plugin, field, reason); boxed, it is large.
        source: Box<PipelineError>,
    },
    /// Output could not be written as YAML.
    #[error("writing YAML: {0}")]
    Yaml(String),
}

/// Run `trainforge render`.
pub fn run(args: &RenderArgs) -> Result<(), RenderError> {
    let mut input = Input::new()?;
    input.features = args.feature_gates;
    for path in &args.files {
        let text = std::fs::read_to_string(path).map_err(|e| RenderError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        input.add_yaml(&path.display().to_string(), &text, &args.namespace)?;
    }
    // As the operator: a TrainJob delegated to another controller gets
    // nothing built.
    let before = input.trainjobs.len();
    input.trainjobs.retain(|job| match crate::pipeline::run::managed_elsewhere(job) {
        Some(m) => {
            eprintln!(
                "note: TrainJob {:?} is managed by {m} (spec.managedBy): Trainforge builds nothing for it",
                job.metadata.name.as_deref().unwrap_or_default()
            );
            false
        }
        None => true,
    });
    if before > 0 && input.trainjobs.is_empty() {
        return Ok(());
    }
    let plugins = builtin_plugins()?;
    let tenants = tenant_plugins(args, &plugins)?;
    let mut first = true;
    for (job, result) in render_with(&input, &plugins, tenants.as_ref())? {
        let name = job.metadata.name.clone().unwrap_or_default();
        let rendered = result.map_err(|source| RenderError::Pipeline {
            trainjob: name.clone(),
            source,
        })?;
        for w in &rendered.warnings {
            eprintln!("warning: TrainJob {name:?}: {w}");
        }
        print!("{}", to_yaml_stream(&rendered.objects, &mut first)?);
    }
    Ok(())
}

/// The builtin plugins as one set, in crate-name order, compiled once per
/// user and version: precompiled artifacts are kept in
/// [`default_cache_dir`] when it is usable (see [`usable_cache_dir`]),
/// otherwise every invocation compiles them.
pub fn builtin_plugins() -> Result<PluginSet, RenderError> {
    builtin_plugins_in(default_cache_dir().and_then(usable_cache_dir))
}

/// The builtin plugins as one set, in crate-name order, with precompiled
/// artifacts in `cache_dir` (`None`: compile in memory only). Builtins are
/// trusted with the capabilities they declare (e.g. MPI's `random`).
///
/// The artifact cache is keyed by the component's sha256 and the engine's
/// compatibility hash (wasmtime version and configuration), and each artifact
/// is checked against its checksum sidecar before use, so one directory can be
/// shared by every Trainforge version of a user. It must be private to that
/// user ([`usable_cache_dir`] checks this).
pub fn builtin_plugins_in(cache_dir: Option<PathBuf>) -> Result<PluginSet, RenderError> {
    let rt = PluginRuntime::new(RuntimeConfig {
        cache_dir,
        ..RuntimeConfig::default()
    })?;
    Ok(PluginSet::new(rt.load_trusted_builtins(None)?)?)
}

/// Environment variable naming the directory where `render` keeps
/// precompiled plugin artifacts; set it to the empty string to disable the
/// disk cache.
pub const CACHE_DIR_ENV: &str = "TRAINFORGE_CACHE_DIR";

/// Where `render` keeps precompiled plugin artifacts: `$TRAINFORGE_CACHE_DIR`
/// if set (empty: none), else `${XDG_CACHE_HOME:-$HOME/.cache}/trainforge/artifacts`
/// (relative values of those variables are ignored, as the XDG spec says).
pub fn default_cache_dir() -> Option<PathBuf> {
    cache_dir_from(|name| std::env::var_os(name))
}

fn cache_dir_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = var(CACHE_DIR_ENV) {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let absolute = |name: &str| var(name).map(PathBuf::from).filter(|p| p.is_absolute());
    let base =
        absolute("XDG_CACHE_HOME").or_else(|| absolute("HOME").map(|home| home.join(".cache")))?;
    Some(base.join("trainforge").join("artifacts"))
}

/// `dir` if it can hold the artifact cache, else `None` (the caller then
/// compiles in memory): it is created if missing (mode 0700 on Unix), must
/// accept a new file, and on Unix must not be writable by group or others,
/// since artifacts are native code loaded without recompiling.
pub fn usable_cache_dir(dir: PathBuf) -> Option<PathBuf> {
    match check_cache_dir(&dir) {
        Ok(()) => Some(dir),
        Err(reason) => {
            let explicit = std::env::var_os(CACHE_DIR_ENV).is_some_and(|v| Path::new(&v) == dir);
            if explicit {
                tracing::warn!(dir = %dir.display(), reason, "plugin artifact cache disabled");
            } else {
                tracing::debug!(dir = %dir.display(), reason, "plugin artifact cache disabled");
            }
            None
        }
    }
}

fn check_cache_dir(dir: &Path) -> Result<(), String> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| format!("cannot create it: {e}"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir)
            .map_err(|e| e.to_string())?
            .permissions()
            .mode();
        if mode & 0o022 != 0 {
            return Err(format!(
                "it is writable by group or others (mode {:o})",
                mode & 0o7777
            ));
        }
    }
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| format!("it is not writable: {e}"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The `--trainer-plugin`s, loaded under the `--policy` ceiling, as the
/// operator's store would hold them beside the cluster's `plugins`
/// (`None` when there are none).
fn tenant_plugins(
    args: &RenderArgs,
    plugins: &PluginSet,
) -> Result<Option<crate::controller::tenants::TenantPlugins>, RenderError> {
    use crate::controller::tenants::offline;
    if args.trainer_plugins.is_empty() {
        return Ok(None);
    }
    let err = |arg: &str, reason: String| RenderError::TenantPlugin {
        arg: arg.to_owned(),
        reason,
    };
    let policy = args
        .policy
        .as_deref()
        .map(crate::cmd::plugin::read_policy)
        .transpose()
        .map_err(|e| err("--policy", e.to_string()))?;
    let rt = PluginRuntime::new(RuntimeConfig::default()).map_err(RenderError::Plugins)?;
    let mut loaded = Vec::new();
    for arg in &args.trainer_plugins {
        let Some((tp, wasm)) = arg.split_once('=') else {
            return Err(err(
                arg,
                "expected <TrainerPlugin file>=<component .wasm>".into(),
            ));
        };
        let tp = crate::cmd::plugin::read_trainer_plugin(Path::new(tp))
            .map_err(|e| err(arg, e.to_string()))?;
        let src = plugin::PluginSource::from_file(Path::new(wasm), rt.config().max_component_bytes)
            .map_err(|e| err(arg, e.to_string()))?;
        let t = offline::load(
            &rt,
            &tp,
            src.bytes,
            policy.as_ref(),
            &args.namespace,
            std::sync::Arc::new(plugin::NoObjects),
        )
        .map_err(|e| err(arg, e.to_string()))?;
        loaded.push(t);
    }
    Ok(Some(offline::store(&loaded, plugins)))
}

/// [`render`], with the tenant plugins of `tenants` joining each TrainJob's
/// set as the operator would add them.
pub fn render_with(
    input: &Input,
    plugins: &PluginSet,
    tenants: Option<&crate::controller::tenants::TenantPlugins>,
) -> Result<RenderResults, RenderError> {
    let Some(tenants) = tenants else {
        return render(input, plugins);
    };
    if input.trainjobs.is_empty() {
        return Err(InputError::NoTrainJob.into());
    }
    let cluster = std::sync::Arc::new(plugins.clone());
    input
        .trainjobs
        .iter()
        .map(|job| {
            let runtime = input.runtime_for(job)?;
            let ns = job.metadata.namespace.clone().unwrap_or_default();
            let labels = job.metadata.labels.clone().unwrap_or_default();
            let set = tenants
                .compose(cluster.clone(), &ns, &labels)
                .map_err(|source| RenderError::TenantSet {
                    trainjob: job.metadata.name.clone().unwrap_or_default(),
                    source,
                })?
                .set;
            Ok((
                job.clone(),
                run_pipeline(job, runtime, &set, input.features).map_err(Box::new),
            ))
        })
        .collect()
}

/// Each TrainJob with what the pipeline made of it.
pub type RenderResults = Vec<(TrainJob, Result<Rendered, Box<PipelineError>>)>;

/// Render every TrainJob of `input` (pure apart from the plugins).
pub fn render(input: &Input, plugins: &PluginSet) -> Result<RenderResults, RenderError> {
    if input.trainjobs.is_empty() {
        return Err(InputError::NoTrainJob.into());
    }
    input
        .trainjobs
        .iter()
        .map(|job| {
            let runtime = input.runtime_for(job)?;
            Ok((
                job.clone(),
                run_pipeline(job, runtime, plugins, input.features).map_err(Box::new),
            ))
        })
        .collect()
}

/// Objects as a YAML stream (`---` between documents).
pub fn to_yaml_stream(objects: &[Value], first: &mut bool) -> Result<String, RenderError> {
    let mut out = String::new();
    for o in objects {
        if !*first {
            out.push_str("---\n");
        }
        *first = false;
        out.push_str(&serde_saphyr::to_string(o).map_err(|e| RenderError::Yaml(e.to_string()))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn a_runtime_policy_no_plugin_serves_is_refused_with_its_key() {
        let runtime = crate::plugin::PluginRuntime::new(RuntimeConfig::default()).unwrap();
        let jobset = crate::plugin::builtin::all()
            .iter()
            .find(|b| b.crate_name == "plugin-jobset")
            .unwrap();
        let set = PluginSet::new(vec![runtime.load(jobset.trusted_source()).unwrap()]).unwrap();
        let mut input = Input::new().unwrap();
        input
            .add_yaml(
                "in.yaml",
                "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n\
                 metadata: {name: rt}\nspec:\n  mlPolicy: {numNodes: 1, flux: {}}\n  \
                 template: {spec: {replicatedJobs: [{name: node, template: {spec: {template: \
                 {spec: {containers: [{name: node, image: busybox}]}}}}}]}}\n---\n\
                 apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n\
                 metadata: {name: j}\nspec: {runtimeRef: {name: rt}}\n",
                "default",
            )
            .unwrap();
        let results = render(&input, &set).unwrap();
        let [(_, result)] = results.as_slice() else {
            panic!("one TrainJob: {results:?}");
        };
        let error = result.as_ref().unwrap_err().to_string();
        assert_eq!(
            error,
            "runtime policy mlPolicy.flux served by no plugin in service \
             (plugins in service: jobset); nothing was built"
        );
    }

    #[test]
    fn cache_dir_resolution() {
        let all = [
            ("TRAINFORGE_CACHE_DIR", "/c"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(cache_dir_from(vars(&all)), Some(PathBuf::from("/c")));
        assert_eq!(
            cache_dir_from(vars(&[("TRAINFORGE_CACHE_DIR", ""), ("HOME", "/h")])),
            None
        );
        assert_eq!(
            cache_dir_from(vars(&all[1..])),
            Some(PathBuf::from("/x/trainforge/artifacts"))
        );
        assert_eq!(
            cache_dir_from(vars(&all[2..])),
            Some(PathBuf::from("/h/.cache/trainforge/artifacts"))
        );
        // Relative XDG_CACHE_HOME is ignored; no HOME at all means no cache.
        assert_eq!(
            cache_dir_from(vars(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/trainforge/artifacts"))
        );
        assert_eq!(cache_dir_from(vars(&[("HOME", "rel")])), None);
        assert_eq!(cache_dir_from(vars(&[])), None);
    }

    #[test]
    fn usable_cache_dir_is_created_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/artifacts");
        assert_eq!(usable_cache_dir(dir.clone()), Some(dir.clone()));
        assert!(dir.is_dir());
        // The probe file is cleaned up.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&dir).unwrap().permissions().mode() & 0o077,
                0
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn shared_writable_cache_dir_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shared");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(usable_cache_dir(dir), None);
    }

    #[test]
    fn cache_dir_under_a_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(usable_cache_dir(file.join("artifacts")), None);
    }
}
