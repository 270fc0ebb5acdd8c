//! A hostile plugin for the containment tests. It implements the raw WIT
//! bindings (not the SDK trait) so it can return anything at all.
//!
//! What it *declares* comes from [`DESCRIPTOR`], a fixed-size block the
//! tests overwrite in the compiled `.wasm` (after its marker) with a JSON
//! descriptor, so one build yields any number of differently-declared
//! components (each with its own sha256). Unpatched, it declares the
//! default below.
//!
//! What it *does* is chosen per call by the TrainJob's annotation
//! `hostile.trainforge.dev/<plugin name>` (JSON) when present, else by the
//! plugin config (so on a shared cluster each hostile plugin attacks only
//! the TrainJobs that ask it to):
//! - `{"attack": "<name>"}` for the named attacks in [`build`] and
//!   `validate` (`validate-loop`, `validate-alloc`, `validate-panic`,
//!   `validate-deny`, …);
//! - `{"set": [{"phase", "target": "trainjob"|"info", "pointer", "value"}]}`
//!   sets JSON pointers in the TrainJob or info during that phase;
//! - `{"emit": [objects]}` makes `build` return exactly those objects, with
//!   `{trainjob}` in a `metadata.name` replaced by the TrainJob's name;
//! - `{"read": {"apiVersion", "kind", "namespace", "name"}}` makes `build`
//!   call `get-object` and return a ConfigMap `<trainjob>-read-result` with
//!   the answer.
//!
//! The objects it emits on its own are named `<trainjob>-…`, as the host
//! requires (the name rules are attacked through `emit`).

use serde_json::{Value, json};
use std::hint::black_box;
use trainforge_sdk::bindings::exports::trainforge::plugin::guest::Guest;
use trainforge_sdk::bindings::exports::trainforge::plugin::naming;
use trainforge_sdk::bindings::trainforge::plugin::host;
use trainforge_sdk::bindings::trainforge::plugin::types::*;

/// Marker + room for a JSON descriptor, patched by the tests. Must stay one
/// array so the marker occurs once in the data segment.
static DESCRIPTOR: [u8; 4096] = {
    let marker = b"TRAINFORGE-HOSTILE-DESCRIPTOR:";
    let mut block = [b' '; 4096];
    let mut i = 0;
    while i < marker.len() {
        block[i] = marker[i];
        i += 1;
    }
    block
};

const MARKER_LEN: usize = 30;

struct Hostile;

/// The prefix of the annotation that selects an attack for one TrainJob.
const ANNOTATION: &str = "hostile.trainforge.dev/";

fn config(plugin_config: &str, trainjob: &str) -> Value {
    let tj: Value = serde_json::from_str(trainjob).unwrap_or(Value::Null);
    let key = format!("{ANNOTATION}{}", my_name());
    if let Some(text) = tj
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(&key))
        .and_then(Value::as_str)
    {
        return serde_json::from_str(text).unwrap_or(Value::Null);
    }
    serde_json::from_str(plugin_config).unwrap_or(Value::Null)
}

fn my_name() -> String {
    declared()
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("hostile")
        .to_owned()
}

fn attack(config: &Value) -> String {
    config.get("attack").and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn kind(api_version: &str, kind: &str) -> KindRef {
    KindRef { api_version: api_version.into(), kind: kind.into() }
}

fn kinds(v: Option<&Value>) -> Vec<KindRef> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|k| Some(kind(k.get(0)?.as_str()?, k.get(1)?.as_str()?)))
                .collect()
        })
        .unwrap_or_default()
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
}

fn declared() -> Value {
    // Read through black_box so the optimiser cannot assume the contents.
    let block: &[u8] = black_box(&DESCRIPTOR[..]);
    let text = std::str::from_utf8(&block[MARKER_LEN..]).unwrap_or("").trim();
    serde_json::from_str(text).unwrap_or(Value::Null)
}

thread_local! {
    /// The name of the TrainJob the current `build` call is for.
    static TRAINJOB: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// `<trainjob>-<suffix>`: a name the host lets this TrainJob's plugins use.
fn own_name(suffix: &str) -> String {
    TRAINJOB.with(|t| format!("{}-{suffix}", t.borrow()))
}

fn leak(what: &str, data: String) -> Result<Vec<String>, PluginError> {
    Ok(vec![json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": own_name("leak")},
        "data": {"what": what, "leaked": data},
    })
    .to_string()])
}

/// Set `pointer` in `doc` to `value`, creating objects on the way.
fn set_pointer(doc: &mut Value, pointer: &str, value: Value) {
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    set_at(doc, &parts, value);
}

fn set_at(cur: &mut Value, parts: &[String], value: Value) {
    let Some((part, rest)) = parts.split_first() else {
        *cur = value;
        return;
    };
    if let (Ok(idx), Some(arr)) = (part.parse::<usize>(), cur.as_array_mut()) {
        while arr.len() <= idx {
            arr.push(json!({}));
        }
        set_at(&mut arr[idx], rest, value);
        return;
    }
    if !cur.is_object() {
        *cur = json!({});
    }
    if let Some(map) = cur.as_object_mut() {
        set_at(map.entry(part.clone()).or_insert(Value::Null), rest, value);
    }
}

fn mutate(phase: &str, input: PhaseInput) -> Result<Mutation, PluginError> {
    let cfg = config(&input.config, &input.trainjob);
    match attack(&cfg).as_str() {
        "loop-enforce" if phase == "enforce-ml-policy" => loop {
            black_box(());
        },
        "bad-info" if phase == "enforce-ml-policy" => {
            return Ok(Mutation { info: Some("{\"labels\": ".into()), trainjob: None });
        }
        "sleep-enforce" if phase == "enforce-ml-policy" => {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        _ => {}
    }
    let sets: Vec<&Value> = cfg
        .get("set")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter(|s| s.get("phase").and_then(Value::as_str) == Some(phase)).collect())
        .unwrap_or_default();
    if sets.is_empty() {
        return Ok(Mutation { info: None, trainjob: None });
    }
    let mut trainjob: Value = serde_json::from_str(&input.trainjob).unwrap_or(Value::Null);
    let mut info: Value = serde_json::from_str(&input.info).unwrap_or(Value::Null);
    let (mut tj_changed, mut info_changed) = (false, false);
    for s in sets {
        let pointer = s.get("pointer").and_then(Value::as_str).unwrap_or("");
        let value = s.get("value").cloned().unwrap_or(Value::Null);
        if s.get("target").and_then(Value::as_str) == Some("trainjob") {
            set_pointer(&mut trainjob, pointer, value);
            tj_changed = true;
        } else {
            set_pointer(&mut info, pointer, value);
            info_changed = true;
        }
    }
    Ok(Mutation {
        info: info_changed.then(|| info.to_string()),
        trainjob: tj_changed.then(|| trainjob.to_string()),
    })
}

/// Naming rules from the descriptor block's `object_names`: a list of
/// `[apiVersion, kind, suffix]`, or `"loop"`, `"trap"`, `"many"` (10,000
/// rules) to attack the load-time call.
impl naming::Guest for Hostile {
    fn object_names() -> Vec<naming::ObjectName> {
        let rule = |api_version: &str, k: &str, suffix: &str| naming::ObjectName {
            kind: kind(api_version, k),
            suffix: suffix.into(),
        };
        match declared().get("object_names") {
            Some(Value::String(s)) if s == "loop" => loop {
                black_box(());
            },
            Some(Value::String(s)) if s == "trap" => panic!("hostile object-names trapped on purpose"),
            Some(Value::String(s)) if s == "many" => {
                (0..10_000).map(|i| rule("v1", "ConfigMap", &format!("-n{i}"))).collect()
            }
            Some(Value::Array(rules)) => rules
                .iter()
                .filter_map(|r| {
                    Some(rule(r.get(0)?.as_str()?, r.get(1)?.as_str()?, r.get(2)?.as_str()?))
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl Guest for Hostile {
    fn describe() -> Descriptor {
        let d = declared();
        match d.get("describe").and_then(Value::as_str) {
            Some("loop") => loop {
                black_box(());
            },
            Some("sleep") => std::thread::sleep(std::time::Duration::from_secs(120)),
            Some("trap") => panic!("hostile describe trapped on purpose"),
            Some("alloc") => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    black_box(&hoard);
                }
            }
            _ => {}
        }
        let s = |k: &str, default: &str| {
            d.get(k).and_then(Value::as_str).unwrap_or(default).to_owned()
        };
        let mut name = s("name", "hostile");
        if let Some(n) = d.get("name_repeat").and_then(Value::as_u64) {
            name = name.repeat(n as usize);
        }
        let mut reads = if d.get("reads").is_some() {
            kinds(d.get("reads"))
        } else {
            vec![kind("v1", "ConfigMap")]
        };
        if let Some(n) = d.get("generate_reads").and_then(Value::as_u64) {
            reads.extend((0..n).map(|i| kind("example.com/v1", &format!("Kind{i}"))));
        }
        Descriptor {
            name,
            version: s("version", "0.0.0"),
            wit_version: s("wit_version", "0.1.0"),
            policy_keys: strings(d.get("policy_keys")).unwrap_or_default(),
            phases: strings(d.get("phases")).unwrap_or_else(|| {
                let mut p: Vec<String> =
                    ["enforce-ml-policy", "enforce-pod-spec", "pre-build", "build", "validate"]
                        .map(String::from)
                        .to_vec();
                if d.get("object_names").is_some() {
                    p.push("object-names".into());
                }
                p
            }),
            emits: if d.get("emits").is_some() {
                kinds(d.get("emits"))
            } else {
                vec![kind("v1", "ConfigMap"), kind("jobset.x-k8s.io/v1alpha2", "JobSet")]
            },
            reads,
            watches: kinds(d.get("watches")),
            capabilities: strings(d.get("capabilities")).unwrap_or_default(),
        }
    }

    fn enforce_ml_policy(input: PhaseInput) -> Result<Mutation, PluginError> {
        mutate("enforce-ml-policy", input)
    }

    fn enforce_pod_group_policy(input: PhaseInput) -> Result<Mutation, PluginError> {
        mutate("enforce-pod-group-policy", input)
    }

    fn enforce_pod_spec(input: PhaseInput) -> Result<Mutation, PluginError> {
        mutate("enforce-pod-spec", input)
    }

    fn pre_build(input: PhaseInput) -> Result<Mutation, PluginError> {
        mutate("pre-build", input)
    }

    fn build(input: PhaseInput) -> Result<Vec<String>, PluginError> {
        let cfg = config(&input.config, &input.trainjob);
        let tj: Value = serde_json::from_str(&input.trainjob).unwrap_or(Value::Null);
        let tj_name = tj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        TRAINJOB.with(|t| *t.borrow_mut() = tj_name.to_owned());
        if let Some(objects) = cfg.get("emit").and_then(Value::as_array) {
            return Ok(objects
                .iter()
                .map(|o| {
                    let mut o = o.clone();
                    if let Some(n) = o.pointer_mut("/metadata/name")
                        && let Some(text) = n.as_str()
                    {
                        *n = Value::String(text.replace("{trainjob}", tj_name));
                    }
                    o.to_string()
                })
                .collect());
        }
        if let Some(r) = cfg.get("read") {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
            let times = r.get("times").and_then(Value::as_u64).unwrap_or(1);
            let mut answer = String::new();
            for _ in 0..times {
                answer = match host::get_object(&kind(s("apiVersion"), s("kind")), s("namespace"), s("name")) {
                    Ok(Some(o)) => format!("found: {o}"),
                    Ok(None) => "absent".into(),
                    Err(HostError::Denied(m)) => format!("denied: {m}"),
                    Err(HostError::Unavailable(m)) => format!("unavailable: {m}"),
                };
            }
            return Ok(vec![json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": own_name("read-result")},
                "data": {"result": answer},
            })
            .to_string()]);
        }
        let obj = |v: Value| Ok(vec![v.to_string()]);
        match attack(&cfg).as_str() {
            "loop" => {
                let mut x = 0u64;
                loop {
                    x = black_box(x.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    black_box(&hoard);
                }
            }
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(60));
                Ok(vec![])
            }
            "panic" => panic!("hostile plugin panicked on purpose"),
            "huge-output" => Ok(vec!["x".repeat(100 << 20)]),
            "huge-error" => Err(PluginError::Internal("E\nINFO forged line ".repeat(1 << 19))),
            "many-objects" => Ok((0..2000)
                .map(|i| {
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": own_name(&format!("cm-{i}"))}})
                        .to_string()
                })
                .collect()),
            // `objects` ConfigMaps `<trainjob>-fill-<i>` of `bytes` each.
            "fill" => {
                let n = cfg.get("objects").and_then(Value::as_u64).unwrap_or(1);
                let bytes = cfg.get("bytes").and_then(Value::as_u64).unwrap_or(1024);
                let blob = "x".repeat(usize::try_from(bytes).unwrap_or(0));
                Ok((0..n)
                    .map(|i| {
                        json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": own_name(&format!("fill-{i}"))},
                            "data": {"blob": blob}})
                        .to_string()
                    })
                    .collect())
            }
            "invalid-json" => Ok(vec!["{\"apiVersion\": \"v1\", \"kind\": ".into()]),
            "stderr-flood" => {
                for _ in 0..100_000 {
                    eprintln!("{}", "noise ".repeat(100));
                }
                panic!("after the flood")
            }
            "wasi-random-huge" => {
                // Raw WASI import: the host must not allocate a gigabyte.
                let bytes = wasi_random(1 << 30);
                leak("random", bytes.len().to_string())
            }
            "cluster-role-binding" => obj(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "pwn"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "team"}],
            })),
            "file" => match std::fs::read_to_string("/etc/passwd") {
                Ok(s) => leak("file", s),
                Err(e) => Err(PluginError::Internal(format!("blocked: file: {e}"))),
            },
            "env" => {
                let vars: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
                match std::env::var("PATH") {
                    Ok(p) => leak("env", p),
                    Err(_) if vars.is_empty() => Err(PluginError::Internal("blocked: env: no variables".into())),
                    Err(_) => leak("env", vars.join(",")),
                }
            }
            "socket" => match std::net::TcpStream::connect("127.0.0.1:6443") {
                Ok(_) => leak("socket", "connected".into()),
                Err(e) => Err(PluginError::Internal(format!("blocked: socket: {e}"))),
            },
            "clock" => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                if now == 0 {
                    Err(PluginError::Internal("blocked: clock: frozen at epoch".into()))
                } else {
                    leak("clock", now.to_string())
                }
            }
            "random" => match host::random_bytes(16) {
                Ok(b) => leak("random", format!("{b:?}")),
                Err(HostError::Denied(m)) => Err(PluginError::Internal(format!("blocked: random: {m}"))),
                Err(HostError::Unavailable(m)) => Err(PluginError::Internal(format!("random unavailable: {m}"))),
            },
            "log-flood" => {
                for _ in 0..10_000 {
                    host::log(LogLevel::Info, &"spam ".repeat(1000));
                }
                Ok(vec![])
            }
            "log-forge" => {
                host::log(LogLevel::Error, "innocent\n{\"level\":\"ERROR\",\"message\":\"FORGED operator line\"}\r\u{1b}[2K");
                Ok(vec![])
            }
            _ => Ok(vec![]),
        }
    }

    fn validate(input: ValidateInput) -> Result<Validation, PluginError> {
        let cfg = config(&input.config, &input.trainjob);
        match attack(&cfg).as_str() {
            "many-warnings" => Ok(Validation {
                warnings: (0..10_000).map(|i| format!("warning {i}")).collect(),
                errors: vec![],
            }),
            "forged-warning" => Ok(Validation {
                warnings: vec!["ok\nWarning: forged second warning".into()],
                errors: vec![],
            }),
            "validate-loop" => {
                let mut x = 0u64;
                loop {
                    x = black_box(x.wrapping_add(1));
                }
            }
            "validate-alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    black_box(&hoard);
                }
            }
            "validate-panic" => panic!("hostile plugin panicked in validate on purpose"),
            "validate-deny" => Ok(Validation {
                warnings: vec![],
                errors: vec![FieldError {
                    error_type: FieldErrorType::Forbidden,
                    field: "spec.trainer".into(),
                    bad_value: None,
                    detail: "refused by the hostile plugin".into(),
                }],
            }),
            "loop-validate" => loop {
                black_box(());
            },
            "trap-validate" => panic!("hostile validate trapped on purpose"),
            _ => Ok(Validation { warnings: vec![], errors: vec![] }),
        }
    }

    fn status(input: PhaseInput) -> Result<Option<String>, PluginError> {
        match attack(&config(&input.config, &input.trainjob)).as_str() {
            "bad-status" => Ok(Some("not json".into())),
            "many-conditions" => Ok(Some(
                json!({"conditions": (0..20_001)
                    .map(|i| json!({"type": format!("C{i}"), "status": "True", "reason": "R", "message": ""}))
                    .collect::<Vec<_>>()})
                .to_string(),
            )),
            "long-message" => Ok(Some(
                json!({"conditions": [{"type": "Complete", "status": "True", "reason": "R",
                    "message": "x".repeat(2 << 20)}]})
                .to_string(),
            )),
            "big-status" => Ok(Some(
                json!({"jobsStatus": (0..2_000)
                    .map(|i| json!({"name": format!("replicated-job-{i:04}-{}", "y".repeat(40)), "active": 1}))
                    .collect::<Vec<_>>()})
                .to_string(),
            )),
            "complete" => Ok(Some(
                json!({"conditions": [{"type": "Complete", "status": "True", "reason": "Forged",
                    "message": "forged by a hostile plugin", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
                .to_string(),
            )),
            _ => Ok(None),
        }
    }
}

/// `wasi:random/random.get-random-bytes`, called directly.
fn wasi_random(len: u64) -> Vec<u8> {
    #[link(wasm_import_module = "wasi:random/random@0.2.0")]
    unsafe extern "C" {
        #[link_name = "get-random-bytes"]
        fn get_random_bytes(len: i64, ret: *mut u8);
    }
    let mut ret = [0u32; 2];
    unsafe { get_random_bytes(len as i64, ret.as_mut_ptr().cast()) };
    let (ptr, n) = (ret[0] as usize, ret[1] as usize);
    unsafe { Vec::from_raw_parts(ptr as *mut u8, n, n) }
}

trainforge_sdk::bindings::export!(Hostile with_types_in trainforge_sdk::bindings);
