//! `trainforge plugin ...` subcommands for plugin authors.

use crate::plugin::{
    CacheOutcome, CallScope, Compiler, Grants, LoadedPlugin, Owner, PhaseInput, PluginRuntime,
    PluginSet, PluginSource, RuntimeConfig, StaticObjects, ValidateInput, builtin,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trainforge_api::plugin::{Info, KindRef, Phase};

use crate::pipeline::features::Features;
use crate::pipeline::input::{InputError, plugin_inputs};
use crate::pipeline::sample;

use super::recording::{Live, Recording, Replay};

/// Namespace of a TrainJob file that names none.
const DEFAULT_NAMESPACE: &str = "default";

/// `trainforge plugin` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {
    /// Show a plugin's name, WIT version, policy keys, phases, kinds and sha256.
    Inspect {
        /// The component (`.wasm`).
        file: PathBuf,
        /// Refuse the file unless its sha256 is this (hex).
        #[arg(long)]
        sha256: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run every phase of a plugin on a TrainJob and runtime (dry run): print
    /// the objects it would create, the resulting info and TrainJob, the
    /// validation result and the status, as one JSON document. The plugin
    /// starts from what the operator would give it: the TrainJob with its
    /// CRD defaults and the runtime info the operator builds (the TrainJob's
    /// `runtimePatches`, `podTemplateOverrides` and `resourcesPerNode`
    /// merged into the runtime it references).
    Run {
        /// The component (`.wasm`).
        file: PathBuf,
        /// TrainJob (YAML or JSON).
        #[arg(long)]
        trainjob: PathBuf,
        /// TrainingRuntime or ClusterTrainingRuntime (YAML or JSON).
        #[arg(long)]
        runtime: PathBuf,
        /// Plugin configuration (JSON).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Record what the plugin's `host.get-object` calls answer, read from
        /// the cluster of the current kubeconfig, into this file (JSON; a
        /// recorded Secret keeps its data).
        #[arg(long, conflicts_with_all = ["objects", "replay"])]
        record: Option<PathBuf>,
        /// Answer `host.get-object` from this recording (`--record`), and
        /// refuse a read it does not hold.
        #[arg(long, conflicts_with = "objects")]
        replay: Option<PathBuf>,
        /// Objects served to `host.get-object` (YAML or JSON; repeatable).
        #[arg(long = "object")]
        objects: Vec<PathBuf>,
        /// Grants, as an administrator would give them (repeatable):
        /// `random`, `clock`, `privileged`, `hostNamespaces`, `hostPorts`,
        /// `hostPath=<prefix>`, `capability=<CAP>`, `serviceAccount=<name>`,
        /// `image=<prefix>`, `schedulerName=<name>`, `priorityClass=<name>`,
        /// `nodePlacement=<key>`, `secret=<name>`, `configMap=<name>`, `serviceAccountTokens`,
        /// `dns`, `resources`, `container=<name>`.
        #[arg(long = "grant")]
        grants: Vec<String>,
        /// A kind the administrator allows the plugin to emit, as
        /// `<apiVersion>/<Kind>` (e.g. `v1/Pod`; repeatable; narrows what
        /// it declares).
        #[arg(long = "allowed-kind")]
        allowed_kinds: Vec<String>,
        /// A kind the administrator allows the plugin to read, as
        /// `<apiVersion>/<Kind>` (e.g. `v1/Secret`; repeatable).
        #[arg(long = "allowed-read")]
        allowed_reads: Vec<String>,
        /// A `TrainerPlugin` (YAML or JSON): run the component as that
        /// tenant plugin, with its spec's config, limits, phases, kinds and
        /// grants capped by the ceiling exactly as the operator would (a
        /// spec asking for more is refused, naming what). The TrainJob must
        /// be in the TrainerPlugin's namespace.
        #[arg(long, conflicts_with_all = ["config", "grants", "allowed_kinds", "allowed_reads"])]
        trainer_plugin: Option<PathBuf>,
        /// The `TrainerPluginPolicy` (YAML or JSON) whose ceiling applies
        /// to `--trainer-plugin` (default: the operator's defaults). Its
        /// `namespaceSelector` is not checked offline.
        #[arg(long, requires = "trainer_plugin")]
        policy: Option<PathBuf>,
        /// Upstream's feature gates, `Name=true,…`, as the operator's
        /// `--feature-gates` (each off by default): what the plugin sees of
        /// the TrainJob and runtime follows them.
        #[arg(long, default_value = "")]
        feature_gates: Features,
    },
    /// Measure load time and per-phase call latency (fresh store per call).
    Bench {
        /// The component (`.wasm`).
        file: PathBuf,
        /// Calls per phase.
        #[arg(long, default_value_t = 200)]
        iterations: usize,
        /// TrainJob (default: a synthetic one).
        #[arg(long, requires = "runtime")]
        trainjob: Option<PathBuf>,
        /// Runtime (default: a synthetic ~20 KB JobSet-sized one).
        #[arg(long, requires = "trainjob")]
        runtime: Option<PathBuf>,
        /// Plugin configuration (JSON).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Upstream's feature gates, as `run`'s.
        #[arg(long, default_value = "")]
        feature_gates: Features,
    },
    /// Make a new plugin crate: a working plugin (one policy key, env var,
    /// ConfigMap and validation rule) with its unit tests, a golden case
    /// for `plugin test` and a README with the commands from build to a
    /// signed artifact.
    New {
        /// The plugin's name (a DNS label, not a builtin's).
        name: String,
        /// The language: `rust` (no Python SDK yet).
        #[arg(long, default_value = "rust")]
        lang: String,
        /// The directory to create (default: `./NAME`).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The Rust SDK (`sdk/` of trainforge) to depend on (default: the
        /// one this binary was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Run a plugin against golden cases kept beside it: every
    /// subdirectory of `--cases` holds `trainjob.yaml`, `runtime.yaml`,
    /// optionally `config.json` and `objects/` (served to
    /// `host.get-object`), and `expected.json`, what `run` prints for it
    /// (without the plugin's digest; `{"error": …}` when the plugin fails).
    /// Fails naming each case that differs and where; `--update` writes
    /// the outputs as the new `expected.json`.
    Test {
        /// The component (`.wasm`).
        file: PathBuf,
        /// The directory of cases.
        #[arg(long)]
        cases: PathBuf,
        /// Write each case's output as its `expected.json` instead of
        /// comparing.
        #[arg(long)]
        update: bool,
        /// Upstream's feature gates, as `run`'s.
        #[arg(long, default_value = "")]
        feature_gates: Features,
    },
    /// Compile every builtin plugin for this binary's wasmtime
    /// configuration into `out`, to ship beside the binary: the operator
    /// loads them from there (`--plugin-artifacts-dir`, by default
    /// `trainforge-artifacts` next to its executable) instead of compiling
    /// at start. Artifacts for another binary or CPU are ignored there.
    Precompile {
        /// The directory to write (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// What it prints while it runs.
        #[command(flatten)]
        progress: crate::cmd::progress::ProgressArgs,
    },
    /// Write a new ECDSA P-256 signing key pair (`<out>.key`, `<out>.pub`).
    Keygen(crate::cmd::oci::KeygenArgs),
    /// Publish a component as a Wasm OCI artifact (`oci://registry/repo:tag`);
    /// prints the reference by digest to put in a `ClusterTrainerPlugin`.
    Push(crate::cmd::oci::PushArgs),
    /// Download an `oci://` plugin (checked as the operator checks it).
    Pull(crate::cmd::oci::PullArgs),
    /// Sign an `oci://` artifact by digest (cosign format, stored in the
    /// registry) or a `.wasm` file (`<file>.sig`).
    Sign(crate::cmd::oci::SignArgs),
    /// Check a plugin's signature against public keys, as the operator's
    /// `spec.verification` does.
    Verify(crate::cmd::oci::VerifyArgs),
    /// Compile a component in this process under a memory cap and write
    /// the precompiled artifact (run by the operator, not by people).
    #[command(hide = true)]
    CompileWorker {
        /// The process's data-segment limit in bytes.
        #[arg(long)]
        memory_bytes: u64,
        /// The component.
        input: PathBuf,
        /// Where the artifact goes.
        output: PathBuf,
    },
}

/// Errors of the plugin CLI.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading an input file failed.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An input file is not valid YAML/JSON.
    #[error("parsing {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Parser message.
        message: String,
    },
    /// The TrainJob and runtime could not be read as the operator would
    /// (CRD defaults, the runtime it references, its runtime info).
    #[error(transparent)]
    Inputs(#[from] InputError),
    /// The plugin failed (load or call).
    #[error(transparent)]
    Plugin(#[from] crate::plugin::Error),
    /// Writing output failed.
    #[error("writing output: {0}")]
    Output(String),
    /// A command-line argument is malformed.
    #[error("{0}")]
    Usage(String),
    /// The compile worker failed.
    #[error("compile worker: {0}")]
    Worker(String),
    /// Publishing, fetching, signing or verifying an OCI plugin failed.
    #[error(transparent)]
    Oci(#[from] crate::cmd::oci::CliError),
    /// `plugin test` did not pass.
    #[error(transparent)]
    Golden(#[from] super::goldens::Error),
    /// `plugin new` could not make the plugin.
    #[error(transparent)]
    Scaffold(#[from] super::scaffold::Error),
}

/// `<apiVersion>/<Kind>` (the kind is after the last `/`).
fn parse_kind(text: &str) -> Result<KindRef, Error> {
    match text.rsplit_once('/') {
        Some((api, kind)) if !api.is_empty() && !kind.is_empty() => Ok(KindRef::new(api, kind)),
        _ => Err(Error::Usage(format!(
            "{text:?}: expected <apiVersion>/<Kind>, e.g. v1/Secret or apps/v1/Deployment"
        ))),
    }
}

fn parse_kinds(texts: &[String]) -> Result<Option<Vec<KindRef>>, Error> {
    if texts.is_empty() {
        return Ok(None);
    }
    texts
        .iter()
        .map(|t| parse_kind(t))
        .collect::<Result<_, _>>()
        .map(Some)
}

/// The runtime of the CLI: components are compiled in a bounded child
/// process (this executable), as in the operator.
pub fn cli_runtime() -> Result<PluginRuntime, Error> {
    let compiler = Compiler::this_executable().map_err(Error::Usage)?;
    Ok(PluginRuntime::new(RuntimeConfig {
        compiler,
        ..RuntimeConfig::default()
    })?)
}

/// `trainforge plugin precompile --out DIR`: every builtin compiled into
/// `DIR` with the operator's engine configuration (the same cache keys the
/// operator looks up). Builtins are part of this binary, so they compile in
/// this process.
fn precompile(out: &Path, report: crate::cmd::progress::Reporter) -> Result<(), Error> {
    std::fs::create_dir_all(out).map_err(|source| Error::Read {
        path: out.to_owned(),
        source,
    })?;
    let rt = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(out.to_owned()),
        ..RuntimeConfig::default()
    })?;
    let all = builtin::all();
    // Progress on stderr: a compile takes seconds to a minute.
    let steps = report.steps(all.len());
    for (i, b) in all.iter().enumerate() {
        let started = Instant::now();
        steps.start(i, b.crate_name);
        let (_, outcome) = rt.load_traced(b.trusted_source())?;
        steps.result(format_args!(
            "{}: {} in {} ms",
            b.crate_name,
            match outcome {
                CacheOutcome::Compiled => "compiled",
                _ => "already there",
            },
            started.elapsed().as_millis()
        ));
    }
    steps.finish();
    println!(
        "{} builtin plugins precompiled into {}",
        builtin::all().len(),
        out.display()
    );
    Ok(())
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_doc(path: &Path) -> Result<Value, Error> {
    let text = read(path)?;
    if let Ok(v) = serde_json::from_str(&text) {
        return Ok(v);
    }
    serde_saphyr::from_str::<Value>(&text).map_err(|e| Error::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// `file` as the author tools load it: on its own, a builtin's name allowed
/// (see [`reserved_name_note`]).
fn load(rt: &PluginRuntime, file: &Path, config: Option<&Path>) -> Result<PluginSource, Error> {
    let mut src = PluginSource::from_file(file, rt.config().max_component_bytes)?;
    // A builtin's own bytes load as an operator serves that builtin, with
    // what it needs granted.
    let digest = crate::plugin::sha256_hex(&src.bytes);
    if let Some(b) = builtin::all().iter().find(|b| b.sha256 == digest) {
        src = PluginSource {
            label: src.label,
            ..b.trusted_source()
        };
    }
    src.reserve_builtin_names = false;
    if let Some(c) = config {
        let v: Value = serde_json::from_str(&read(c)?).map_err(|e| Error::Parse {
            path: c.to_owned(),
            message: e.to_string(),
        })?;
        src.config = v.to_string();
    }
    Ok(src)
}

/// Load `file` as the tenant plugin the `TrainerPlugin` in `tp` configures,
/// under the ceiling of the policy in `policy` (the operator's defaults when
/// `None`), for `trainjob` (which must be in the TrainerPlugin's namespace).
fn load_tenant(
    rt: &PluginRuntime,
    file: &Path,
    tp: &Path,
    policy: Option<&Path>,
    trainjob: &Value,
    objects: Arc<dyn crate::plugin::ObjectSource>,
) -> Result<LoadedPlugin, Error> {
    let plugin = read_trainer_plugin(tp)?;
    let policy = policy.map(read_policy).transpose()?;
    let src = PluginSource::from_file(file, rt.config().max_component_bytes)?;
    let t = crate::controller::tenants::offline::load(
        rt,
        &plugin,
        src.bytes,
        policy.as_ref(),
        DEFAULT_NAMESPACE,
        objects,
    )
    .map_err(|e| Error::Usage(e.to_string()))?;
    let job_ns = trainjob
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_NAMESPACE);
    if job_ns != t.namespace {
        return Err(Error::Usage(format!(
            "TrainerPlugin {}/{} serves only TrainJobs of namespace {}, not {job_ns}",
            t.namespace, t.name, t.namespace
        )));
    }
    Ok(t.plugin)
}

/// A `TrainerPlugin` (YAML or JSON) from `path`.
pub fn read_trainer_plugin(
    path: &Path,
) -> Result<trainforge_api::trainforge::v1alpha1::TrainerPlugin, Error> {
    serde_json::from_value(read_doc(path)?).map_err(|e| Error::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// The spec of a `TrainerPluginPolicy` (YAML or JSON) from `path`.
pub fn read_policy(
    path: &Path,
) -> Result<trainforge_api::trainforge::v1alpha1::TrainerPluginPolicySpec, Error> {
    let doc = read_doc(path)?;
    serde_json::from_value(doc.get("spec").cloned().unwrap_or_default()).map_err(|e| Error::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// The TrainJob in `trainjob` as the operator stores it and the runtime info
/// the operator builds for it on the runtime in `runtime`.
fn operator_inputs(
    trainjob: &Path,
    runtime: &Path,
    features: Features,
) -> Result<(Value, Info), Error> {
    let origin = |p: &Path| p.display().to_string();
    Ok(plugin_inputs(
        (&origin(trainjob), read_doc(trainjob)?),
        (&origin(runtime), read_doc(runtime)?),
        DEFAULT_NAMESPACE,
        features,
    )?)
}

fn print_json(v: &Value) -> Result<(), Error> {
    let s = serde_json::to_string_pretty(v).map_err(|e| Error::Output(e.to_string()))?;
    println!("{s}");
    Ok(())
}

/// Run a `trainforge plugin` subcommand.
pub fn run(cmd: PluginCommand) -> Result<(), Error> {
    if let PluginCommand::CompileWorker {
        memory_bytes,
        input,
        output,
    } = &cmd
    {
        return crate::plugin::run_compile_worker(*memory_bytes, input, output)
            .map_err(Error::Worker);
    }
    if let PluginCommand::Precompile { out, progress } = &cmd {
        return precompile(out, crate::cmd::progress::Reporter::new(*progress));
    }
    match &cmd {
        PluginCommand::Keygen(a) => return Ok(crate::cmd::oci::keygen(a)?),
        PluginCommand::Push(a) => return Ok(crate::cmd::oci::push(a)?),
        PluginCommand::Pull(a) => return Ok(crate::cmd::oci::pull(a)?),
        PluginCommand::Sign(a) => return Ok(crate::cmd::oci::sign(a)?),
        PluginCommand::Verify(a) => return Ok(crate::cmd::oci::verify(a)?),
        PluginCommand::New {
            name,
            lang,
            dir,
            sdk,
        } => {
            let made = super::scaffold::new_plugin(name, lang, dir.as_deref(), sdk.as_deref())?;
            println!(
                "made plugin {name} in {} (its README.md says what next)",
                made.display()
            );
            return Ok(());
        }
        _ => {}
    }
    let rt = cli_runtime()?;
    match cmd {
        PluginCommand::CompileWorker { .. }
        | PluginCommand::New { .. }
        | PluginCommand::Precompile { .. }
        | PluginCommand::Keygen(_)
        | PluginCommand::Push(_)
        | PluginCommand::Pull(_)
        | PluginCommand::Sign(_)
        | PluginCommand::Verify(_) => Ok(()),
        PluginCommand::Inspect { file, sha256, json } => {
            let mut src = load(&rt, &file, None)?;
            src.sha256 = sha256;
            let size = src.bytes.len();
            let p = rt.load(src)?;
            inspect(&p, size, json)
        }
        PluginCommand::Run {
            file,
            trainjob,
            runtime,
            config,
            record,
            replay,
            objects,
            grants,
            allowed_kinds,
            allowed_reads,
            trainer_plugin,
            policy,
            feature_gates,
        } => {
            let (served, recording) = object_source(&objects, record.is_some(), replay.as_deref())?;
            let out = if let Some(tp) = trainer_plugin {
                let (trainjob, info) = operator_inputs(&trainjob, &runtime, feature_gates)?;
                let p = load_tenant(&rt, &file, &tp, policy.as_deref(), &trainjob, served)?;
                dry_run(&p, &trainjob, &info)?
            } else {
                run_one(
                    &rt,
                    &file,
                    config.as_deref(),
                    served,
                    (&grants, &allowed_kinds, &allowed_reads),
                    (&trainjob, &runtime, feature_gates),
                )?
            };
            if let (Some(r), Some(path)) = (recording, record) {
                r.save(&path).map_err(|e| Error::Usage(e.to_string()))?;
                let secrets = r.secrets();
                if !secrets.is_empty() {
                    eprintln!(
                        "note: {} holds the data of Secret(s) {}: keep it as secret as they are",
                        path.display(),
                        secrets.join(", ")
                    );
                }
            }
            print_json(&out)
        }
        PluginCommand::Test {
            file,
            cases,
            update,
            feature_gates,
        } => Ok(super::goldens::run(&cases, update, |dir| {
            case_output(&rt, &file, dir, feature_gates).map_err(|e| e.to_string())
        })?),
        PluginCommand::Bench {
            file,
            iterations,
            trainjob,
            runtime,
            config,
            feature_gates,
        } => {
            let src = load(&rt, &file, config.as_deref())?;
            let (trainjob, info) = match (trainjob, runtime) {
                (Some(t), Some(r)) => operator_inputs(&t, &r, feature_gates)?,
                _ => sample::inputs(&[])?,
            };
            bench(&rt, src, &trainjob, &info, iterations.max(1))
        }
    }
}

/// What an author is told when the component takes a builtin plugin's
/// name: the author tools load it, an operator does not (it serves that
/// name only from its own builtin).
pub fn reserved_name_note(p: &LoadedPlugin) -> Option<String> {
    let name = p.name();
    if !builtin::names().iter().any(|n| n == name) {
        return None;
    }
    let own = builtin::find(name).is_some_and(|b| b.sha256 == p.sha256());
    Some(format!(
        "{name:?} is the name of a builtin plugin, reserved for it where plugins serve: {}",
        if own {
            "this is that builtin's own component, which an operator serves as `source: {builtin: ...}`"
        } else {
            "an operator refuses this component (InvalidDescriptor) until it is renamed"
        }
    ))
}

/// Where `run`'s `host.get-object` answers come from: the `--object`
/// files, a recording being made of the live cluster (returned too, to be
/// saved after the run), or a recording replayed.
#[allow(clippy::type_complexity)]
fn object_source(
    objects: &[PathBuf],
    record: bool,
    replay: Option<&Path>,
) -> Result<
    (
        Arc<dyn crate::plugin::ObjectSource>,
        Option<Arc<Recording<Live>>>,
    ),
    Error,
> {
    let usage = |e: super::recording::Error| Error::Usage(e.to_string());
    if record {
        let r = Arc::new(Recording::new(Live::connect().map_err(usage)?));
        return Ok((r.clone(), Some(r)));
    }
    if let Some(path) = replay {
        return Ok((Arc::new(Replay::load(path).map_err(usage)?), None));
    }
    let mut store = StaticObjects::default();
    for o in objects {
        store.insert(&read_doc(o)?);
    }
    Ok((Arc::new(store), None))
}

/// `run` of a cluster plugin: `file` with the grants and kinds given as
/// `(grants, allowed kinds, allowed reads)`, on the TrainJob and runtime in
/// `(trainjob, runtime, gates)`.
fn run_one(
    rt: &PluginRuntime,
    file: &Path,
    config: Option<&Path>,
    objects: Arc<dyn crate::plugin::ObjectSource>,
    (grants, allowed_kinds, allowed_reads): (&[String], &[String], &[String]),
    (trainjob, runtime, features): (&Path, &Path, Features),
) -> Result<Value, Error> {
    // A builtin's own bytes keep what the operator grants it unless the
    // command line says otherwise.
    let mut src = load(rt, file, config)?;
    if let Some(k) = parse_kinds(allowed_kinds)? {
        src.allowed_emits = Some(k);
    }
    if let Some(k) = parse_kinds(allowed_reads)? {
        src.allowed_reads = Some(k);
    }
    src.objects = objects;
    let (g, unknown) = Grants::from_names(grants.iter().map(String::as_str));
    if !unknown.is_empty() {
        return Err(Error::Usage(format!(
            "unknown grants {unknown:?}: use random, clock, privileged, hostNamespaces, hostPorts, hostPath=<prefix>, capability=<CAP>, serviceAccount=<name>, image=<prefix>, schedulerName=<name>, priorityClass=<name>, nodePlacement=<key>, secret=<name>, configMap=<name>, serviceAccountTokens, dns, resources or container=<name>"
        )));
    }
    if !grants.is_empty() || !src.builtin {
        src.grants = g;
    }
    let p = rt.load(src)?;
    if let Some(note) = reserved_name_note(&p) {
        eprintln!("note: {note}");
    }
    let (trainjob, info) = operator_inputs(trainjob, runtime, features)?;
    dry_run(&p, &trainjob, &info)
}

/// What `plugin test` compares for the case in `dir` (see
/// [`super::goldens`]): `run`'s output without the plugin's digest and
/// version, or `{"error": …}` when the plugin fails; an error only when the
/// case's own files cannot be read.
fn case_output(
    rt: &PluginRuntime,
    file: &Path,
    dir: &Path,
    features: Features,
) -> Result<Value, Error> {
    let config = Some(dir.join("config.json")).filter(|p| p.is_file());
    let mut src = load(rt, file, config.as_deref())?;
    let recording = dir.join("recording.json");
    if recording.is_file() {
        src.objects = Arc::new(Replay::load(&recording).map_err(|e| Error::Usage(e.to_string()))?);
        return case_result(rt, src, dir, features);
    }
    let mut objects = StaticObjects::default();
    let objects_dir = dir.join("objects");
    if objects_dir.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&objects_dir)
            .map_err(|source| Error::Read {
                path: objects_dir.clone(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for f in files {
            objects.insert(&read_doc(&f)?);
        }
    }
    src.objects = Arc::new(objects);
    case_result(rt, src, dir, features)
}

/// [`case_output`] once the case's objects are in `src`.
fn case_result(
    rt: &PluginRuntime,
    src: PluginSource,
    dir: &Path,
    features: Features,
) -> Result<Value, Error> {
    let (trainjob, info) = operator_inputs(
        &dir.join("trainjob.yaml"),
        &dir.join("runtime.yaml"),
        features,
    )?;
    Ok(
        match rt
            .load(src)
            .map_err(Error::from)
            .and_then(|p| dry_run(&p, &trainjob, &info))
        {
            Ok(mut out) => {
                if let Some(o) = out.as_object_mut() {
                    o.remove("plugin");
                }
                out
            }
            Err(e) => json!({ "error": e.to_string() }),
        },
    )
}

fn inspect(p: &LoadedPlugin, size: usize, as_json: bool) -> Result<(), Error> {
    let d = p.descriptor();
    let note = reserved_name_note(p);
    if as_json {
        return print_json(
            &json!({"descriptor": d, "sha256": p.sha256(), "size": size, "reservedName": note}),
        );
    }
    let list = |v: Vec<String>| {
        if v.is_empty() {
            "-".to_owned()
        } else {
            v.join(", ")
        }
    };
    let kinds =
        |v: &[trainforge_api::plugin::KindRef]| list(v.iter().map(ToString::to_string).collect());
    println!("name:          {}", d.name);
    println!("version:       {}", d.version);
    println!("wit-version:   {}", d.wit_version);
    println!("sha256:        {}", p.sha256());
    println!("size:          {size} bytes");
    println!("policy-keys:   {}", list(d.policy_keys.clone()));
    println!("phases:        {}", list(d.phases.clone()));
    println!("emits:         {}", kinds(&d.emits));
    println!("reads:         {}", kinds(&d.reads));
    println!("watches:       {}", kinds(&d.watches));
    println!("capabilities:  {}", list(d.capabilities.clone()));
    println!(
        "names:         {}",
        list(
            d.object_names
                .iter()
                .map(|n| format!("{} <trainjob>{}", n.kind, n.suffix))
                .collect()
        )
    );
    if let Some(note) = note {
        println!("note:          {note}");
    }
    Ok(())
}

/// Every phase of one plugin, like a reconcile plus admission, as JSON.
pub fn dry_run(p: &LoadedPlugin, trainjob: &Value, info: &Info) -> Result<Value, Error> {
    let set = PluginSet::new(vec![p.clone()])?;
    let validation = set.validate(trainjob, None, info)?;
    let out = set.reconcile(trainjob, info)?;
    let status = set.status(&out.trainjob, &out.info)?;
    Ok(json!({
        "plugin": {"name": p.name(), "version": p.descriptor().version, "sha256": p.sha256()},
        "validation": {
            "warnings": validation.warnings,
            "errors": validation.errors.iter().map(|e| &e.error).collect::<Vec<_>>(),
        },
        "objects": out.objects,
        "info": out.info,
        "trainjob": out.trainjob,
        "status": status,
    }))
}

/// Latency percentiles of `samples` (sorted in place), in microseconds.
pub fn percentiles(samples: &mut [Duration]) -> (f64, f64, f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    (at(0.5), at(0.9), at(0.99), at(1.0))
}

fn bench(
    rt: &PluginRuntime,
    src: PluginSource,
    trainjob: &Value,
    info: &Info,
    n: usize,
) -> Result<(), Error> {
    let start = Instant::now();
    let p = rt.load(src.clone())?;
    let cold = start.elapsed();
    let start = Instant::now();
    let _ = rt.load(src)?;
    let warm = start.elapsed();
    println!(
        "plugin {} ({} bytes of info JSON)",
        p.name(),
        serde_json::to_string(info).map(|s| s.len()).unwrap_or(0)
    );
    if let Some(note) = reserved_name_note(&p) {
        println!("note: {note}");
    }
    println!(
        "load: compile + describe {:.2} ms; cached + describe {:.3} ms",
        cold.as_secs_f64() * 1e3,
        warm.as_secs_f64() * 1e3
    );
    println!(
        "{:<26} {:>10} {:>10} {:>10} {:>10}",
        "phase (µs, fresh store)", "p50", "p90", "p99", "max"
    );
    let input = PhaseInput {
        trainjob: trainjob.to_string(),
        info: serde_json::to_string(info).map_err(|e| Error::Output(e.to_string()))?,
    };
    let owner = Owner::from_stored(trainjob).map_err(Error::Usage)?;
    let scope = CallScope::of(&owner);
    let row = |name: &str,
               f: &mut dyn FnMut() -> Result<(), crate::plugin::Error>|
     -> Result<(), Error> {
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let s = Instant::now();
            f()?;
            samples.push(s.elapsed());
        }
        let (p50, p90, p99, max) = percentiles(&mut samples);
        println!("{name:<26} {p50:>10.1} {p90:>10.1} {p99:>10.1} {max:>10.1}");
        Ok(())
    };
    row("describe", &mut || p.describe_fresh().map(drop))?;
    for phase in p.descriptor().known_phases() {
        match phase {
            Phase::Build => row("build", &mut || p.build(&input, &owner).map(drop))?,
            Phase::Status => row("status", &mut || p.status(&input, &scope).map(drop))?,
            Phase::Validate => {
                let vi = ValidateInput {
                    trainjob: input.trainjob.clone(),
                    old_trainjob: None,
                    info: input.info.clone(),
                };
                row("validate", &mut || p.validate(&vi, &scope).map(drop))?
            }
            other => row(other.as_str(), &mut || {
                p.enforce(other, &input, &scope).map(drop)
            })?,
        }
    }
    let set = PluginSet::new(vec![p.clone()])?;
    row("reconcile (all phases)", &mut || {
        set.reconcile(trainjob, info).map(drop)
    })?;
    Ok(())
}
