//! Pod-security policy on what a plugin *changed*.
//!
//! Whatever the runtime author and the TrainJob's user wrote is theirs to
//! write (and the cluster's Pod Security Admission judges it). A plugin,
//! though, may only add to the pods it shapes what the Pod Security
//! Standards "baseline" level allows, plus what its configuration grants
//! ([`PodGrants`]). The host compares the privileges present in what a
//! plugin was given with those in what it returned, after every call:
//!
//! - an enforce or pre-build phase: the TrainJob and info before and after;
//! - `build`: the TrainJob and info it was given, and every object it
//!   emitted.
//!
//! A privilege the plugin introduced and was not granted refuses the call
//! ([`Error::PodSecurity`](super::Error::PodSecurity)).
//!
//! A tenant plugin is held to the "restricted" level instead
//! ([`PodGrants::restricted`]): on top of baseline it may not add
//! `allowPrivilegeEscalation: true`, `runAsNonRoot: false`, `runAsUser: 0`,
//! any added capability but `NET_BIND_SERVICE`, nor a volume type outside
//! the restricted list ([`Privilege::Unrestricted`]).
//!
//! Beyond baseline, a plugin's pod changes are judged by allow-list
//! (`pod_fields`): of a pod spec it may change without a grant only the
//! fields of [`ALLOWED_POD_FIELDS`] and [`ALLOWED_CONTAINER_FIELDS`] that
//! cannot widen what the pods reach, and volumes of
//! [`ALLOWED_VOLUME_TYPES`]; the scheduler, priority class, node placement
//! (`nodeName`, `nodeSelector`, node affinity, tolerations), Secret
//! references, service-account tokens, DNS and added containers only as
//! far as its grants name them ([`PodGrants`]); any other field only with
//! `privileged`. A Secret named from the TrainJob (`<trainjob>-…`, the
//! names its plugins emit) needs no grant (see the pipeline's check).
//!
//! Privileges ([`Privilege`]) are found anywhere in a document by field
//! name (`securityContext`, `hostNetwork`, `hostPath`, `hostPort`,
//! `serviceAccountName`, `image`, AppArmor/seccomp annotations), so the
//! same rules cover the info's pod sets, the JobSet template inside it, the
//! TrainJob's `runtimePatches`/`podTemplateOverrides` and every kind of
//! emitted object. Container-level privileges are keyed by container name
//! (a plugin cannot make a second container privileged because the first
//! one is); host paths, images and service accounts by value. ConfigMap and
//! Secret payloads (`data`, `binaryData`, `stringData`) are not pod content
//! and are not searched.

use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Capabilities a baseline pod may add (Pod Security Standards).
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Sysctls a baseline pod may set.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// SELinux types a baseline pod may use.
const BASELINE_SELINUX_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Volume types a restricted pod may use.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// One privilege a pod template can carry beyond the baseline level, or one
/// identity-changing setting (service account, image).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Privilege {
    /// `securityContext.privileged: true` on a container.
    Privileged {
        /// Container name (`?` when unnamed).
        container: String,
    },
    /// A capability outside the baseline set in `capabilities.add`.
    Capability {
        /// Container name.
        container: String,
        /// Capability, upper case without `CAP_`.
        name: String,
    },
    /// `hostNetwork`, `hostPID` or `hostIPC` set to true.
    HostNamespace(&'static str),
    /// A `hostPath` volume.
    HostPath(String),
    /// A container port bound on the host.
    HostPort(i64),
    /// Any other relaxation beyond baseline (unconfined seccomp/AppArmor,
    /// SELinux type or user/role, unmasked `/proc`, unsafe sysctls, Windows
    /// host processes), described.
    Other(String),
    /// Within baseline but beyond the restricted level (privilege
    /// escalation, running as root, a baseline capability, a volume type
    /// outside the restricted list), described. Counts only for a plugin
    /// held to restricted.
    Unrestricted(String),
    /// `serviceAccountName` (or the deprecated `serviceAccount`).
    ServiceAccount(String),
    /// A container image.
    Image(String),
    /// `schedulerName`.
    Scheduler(String),
    /// `priorityClassName`.
    PriorityClass(String),
    /// Where pods may run: a `nodeSelector` term, node affinity, a
    /// toleration or `nodeName`, by the node label or taint key it is about
    /// (`*` for `nodeName` and keyless tolerations), with its value.
    Placement {
        /// The node label or taint key (`*`: any node).
        key: String,
        /// The setting, as written.
        what: String,
    },
    /// A Secret a pod references: an env `secretKeyRef`, an `envFrom`
    /// `secretRef`, a `secret` or projected volume, an image pull secret.
    SecretRef(String),
    /// A ConfigMap a pod references: an env `configMapKeyRef`, an `envFrom`
    /// `configMapRef`, a `configMap` or projected volume.
    ConfigMapRef(String),
    /// A compute resource a container (or a pod, or a TrainJob's
    /// `resourcesPerNode`) requests or is limited to, with its quantity as
    /// written. A plugin may set one only up to the largest quantity of that
    /// resource its input already had ([`within_seen`]).
    Resource {
        /// The resource (`cpu`, `memory`, `nvidia.com/gpu`, ...).
        name: String,
        /// The quantity, as written.
        quantity: String,
    },
    /// A service-account token in the pods: `automountServiceAccountToken:
    /// true`, or a projected token for no particular audience.
    Token(String),
    /// A projected service-account token for `audience`, as written.
    ProjectedToken {
        /// The token's audience.
        audience: String,
        /// The projection, as written.
        what: String,
    },
    /// DNS of the pods: `dnsPolicy`, `dnsConfig`, `hostAliases`.
    Dns(String),
    /// A container, init container or ephemeral container, by list and name.
    Container {
        /// `containers`, `initContainers` or `ephemeralContainers`.
        list: &'static str,
        /// Container name.
        name: String,
    },
    /// A pod or container field outside the allow-list ([`ALLOWED_POD_FIELDS`],
    /// [`ALLOWED_CONTAINER_FIELDS`]), with its value.
    Field(String),
}

impl std::fmt::Display for Privilege {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Privilege::Privileged { container } => {
                write!(f, "privileged container {container:?}")
            }
            Privilege::Capability { container, name } => {
                write!(f, "capability {name} on container {container:?}")
            }
            Privilege::HostNamespace(which) => write!(f, "{which}: true"),
            Privilege::HostPath(p) => write!(f, "hostPath volume {p:?}"),
            Privilege::HostPort(p) => write!(f, "hostPort {p}"),
            Privilege::Other(what) => f.write_str(what),
            Privilege::Unrestricted(what) => write!(f, "{what} (beyond the restricted level)"),
            Privilege::ServiceAccount(sa) => write!(f, "serviceAccountName {sa:?}"),
            Privilege::Image(i) => write!(f, "image {i:?}"),
            Privilege::Scheduler(n) => write!(f, "schedulerName {n:?}"),
            Privilege::PriorityClass(n) => write!(f, "priorityClassName {n:?}"),
            Privilege::Placement { what, .. } => f.write_str(&shown(what)),
            Privilege::SecretRef(n) => write!(f, "a reference to Secret {n:?}"),
            Privilege::ConfigMapRef(n) => write!(f, "a reference to ConfigMap {n:?}"),
            Privilege::Resource { name, quantity } => write!(
                f,
                "{} of resource {name:?}, more than the runtime and TrainJob ask for",
                shown(quantity)
            ),
            Privilege::Token(t) => f.write_str(&shown(t)),
            Privilege::ProjectedToken { what, .. } => f.write_str(&shown(what)),
            Privilege::Dns(what) => f.write_str(&shown(what)),
            Privilege::Container { list, name } => write!(f, "{list} entry {name:?}"),
            Privilege::Field(what) => write!(f, "{} (a field plugins may not set)", shown(what)),
        }
    }
}

/// What a plugin may add to pods beyond the baseline level. The default
/// grants nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodGrants {
    /// Privileged containers and every other relaxation beyond baseline
    /// (any capability, unconfined profiles, SELinux, `/proc`, sysctls).
    pub privileged: bool,
    /// `hostNetwork`, `hostPID`, `hostIPC`.
    pub host_namespaces: bool,
    /// Host ports.
    pub host_ports: bool,
    /// `hostPath` volumes under these path prefixes (`/` = any).
    pub host_paths: Vec<String>,
    /// Capabilities beyond the baseline set (upper case, without `CAP_`).
    pub capabilities: Vec<String>,
    /// Service accounts a plugin may set (`*` = any).
    pub service_accounts: Vec<String>,
    /// Image prefixes a plugin may set (`*` = any).
    pub images: Vec<String>,
    /// Scheduler names a plugin may set (`*` = any).
    pub scheduler_names: Vec<String>,
    /// Priority classes a plugin may set (`*` = any).
    pub priority_classes: Vec<String>,
    /// Node label and taint keys a plugin may place pods by: `nodeSelector`,
    /// node affinity, tolerations (`*` = any, which `nodeName` and keyless
    /// tolerations need).
    pub node_placement: Vec<String>,
    /// Secrets a plugin may reference from pods beyond the TrainJob's own
    /// (`<trainjob>-…`, the names its plugins emit); `*` = any.
    pub secret_names: Vec<String>,
    /// ConfigMaps a plugin may reference from pods beyond the TrainJob's own
    /// (`<trainjob>-…`); `*` = any.
    pub config_map_names: Vec<String>,
    /// Container resources above the largest quantity of each resource the
    /// runtime and TrainJob ask for (or of a resource they do not name).
    pub resources: bool,
    /// Service-account tokens: `automountServiceAccountToken: true` and
    /// projected tokens for any audience.
    pub service_account_tokens: bool,
    /// `dnsPolicy`, `dnsConfig` and `hostAliases`.
    pub dns: bool,
    /// Containers (init, sidecar, ephemeral or regular) a plugin may add,
    /// by name (`*` = any).
    pub containers: Vec<String>,
    /// Whether the plugin is held to the restricted level rather than
    /// baseline (tenant plugins): [`Privilege::Unrestricted`] then needs
    /// `privileged` (a baseline capability may also be granted by name).
    pub restricted: bool,
}

impl PodGrants {
    /// `Ok` if `p` is granted; otherwise the grant that would allow it.
    pub fn check(&self, p: &Privilege) -> Result<(), &'static str> {
        let ok = match p {
            Privilege::Privileged { .. } | Privilege::Other(_) => self.privileged,
            Privilege::Unrestricted(what) => {
                !self.restricted
                    || self.privileged
                    || self
                        .capabilities
                        .iter()
                        .any(|c| what == &format!("capability {}", normalize_cap(c)))
            }
            Privilege::Capability { name, .. } => {
                self.privileged || self.capabilities.iter().any(|c| normalize_cap(c) == *name)
            }
            Privilege::HostNamespace(_) => self.host_namespaces,
            Privilege::HostPort(_) => self.host_ports,
            Privilege::HostPath(path) => self.host_paths.iter().any(|prefix| under(path, prefix)),
            Privilege::ServiceAccount(sa) => {
                self.service_accounts.iter().any(|s| s == "*" || s == sa)
            }
            Privilege::Image(image) => self
                .images
                .iter()
                .any(|prefix| prefix == "*" || image.starts_with(prefix.as_str())),
            Privilege::Scheduler(n) => listed(&self.scheduler_names, n),
            Privilege::PriorityClass(n) => listed(&self.priority_classes, n),
            Privilege::Placement { key, .. } => listed(&self.node_placement, key),
            Privilege::SecretRef(n) => listed(&self.secret_names, n),
            Privilege::ConfigMapRef(n) => listed(&self.config_map_names, n),
            Privilege::Resource { .. } => self.resources,
            Privilege::Token(_) | Privilege::ProjectedToken { .. } => self.service_account_tokens,
            Privilege::Dns(_) => self.dns,
            Privilege::Container { name, .. } => listed(&self.containers, name),
            Privilege::Field(_) => self.privileged,
        };
        if ok {
            return Ok(());
        }
        Err(match p {
            Privilege::Privileged { .. } | Privilege::Other(_) | Privilege::Unrestricted(_) => {
                "grants.pod.privileged"
            }
            Privilege::Capability { .. } => "grants.pod.capabilities",
            Privilege::HostNamespace(_) => "grants.pod.hostNamespaces",
            Privilege::HostPort(_) => "grants.pod.hostPorts",
            Privilege::HostPath(_) => "grants.pod.hostPaths",
            Privilege::ServiceAccount(_) => "grants.pod.serviceAccountNames",
            Privilege::Image(_) => "grants.pod.images",
            Privilege::Scheduler(_) => "grants.pod.schedulerNames",
            Privilege::PriorityClass(_) => "grants.pod.priorityClassNames",
            Privilege::Placement { .. } => "grants.pod.nodePlacement",
            Privilege::SecretRef(_) => "grants.pod.secretNames",
            Privilege::ConfigMapRef(_) => "grants.pod.configMapNames",
            Privilege::Resource { .. } => "grants.pod.resources",
            Privilege::Token(_) | Privilege::ProjectedToken { .. } => {
                "grants.pod.serviceAccountTokens"
            }
            Privilege::Dns(_) => "grants.pod.dns",
            Privilege::Container { .. } => "grants.pod.containers",
            Privilege::Field(_) => "grants.pod.privileged",
        })
    }
}

/// Whether `list` holds `*` or `value`.
fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

/// A setting as shown in a refusal: at most 160 characters.
fn shown(what: &str) -> String {
    super::bounded::sanitize(what, 160)
}

/// Whether `path` is `prefix` or below it (by path components).
fn under(path: &str, prefix: &str) -> bool {
    let norm = |s: &str| s.trim_end_matches('/').to_owned();
    let (path, prefix) = (norm(path), norm(prefix));
    prefix.is_empty() || path == prefix || path.starts_with(&format!("{prefix}/"))
}

fn normalize_cap(c: &str) -> String {
    let up = c.trim().to_ascii_uppercase();
    up.strip_prefix("CAP_").map(str::to_owned).unwrap_or(up)
}

/// Every privilege found in `doc`.
pub fn privileges(doc: &Value) -> BTreeSet<Privilege> {
    let mut out = BTreeSet::new();
    walk(doc, "?", &mut out);
    out
}

/// The privileges in `after` that are not in `before`.
pub fn added<'a>(
    before: &'a BTreeSet<Privilege>,
    after: &'a BTreeSet<Privilege>,
) -> impl Iterator<Item = &'a Privilege> {
    after.difference(before)
}

fn walk(v: &Value, container: &str, out: &mut BTreeSet<Privilege>) {
    match v {
        Value::Object(map) => {
            for (key, x) in map {
                // A pod spec (of a pod template, a Pod, a patch): the info's
                // pod sets hold containers too, but never their security
                // context, so they are not judged for it.
                if key == "spec"
                    && let Some(pod) = x.as_object()
                    && pod.get("containers").is_some_and(Value::is_array)
                {
                    restricted_gaps(pod, out);
                    pod_fields(pod, true, out);
                } else if key == "spec"
                    && let Some(partial) = x.as_object()
                    && VALUE_JUDGED_POD_FIELDS
                        .iter()
                        .any(|k| partial.contains_key(*k))
                {
                    // A partial pod spec (a TrainJob's `podTemplateOverrides`
                    // or `runtimePatches` entry without containers): its
                    // value-judged settings count; other keys are not
                    // judged, as this may be no pod spec at all.
                    pod_fields(partial, false, out);
                }
                match key.as_str() {
                    "containers" | "initContainers" | "ephemeralContainers" => match x {
                        Value::Array(items) => {
                            for item in items {
                                let name = item.get("name").and_then(Value::as_str).unwrap_or("?");
                                walk(item, name, out);
                            }
                        }
                        other => walk(other, container, out),
                    },
                    "securityContext" => security_context(x, container, out),
                    // The runtime info's pod sets: a container added there
                    // (Flux's init container), a Secret, ConfigMap or token
                    // its env or volumes reference, is the adding plugin's
                    // doing, judged as in a pod spec, not the JobSet
                    // plugin's, which only copies it into the JobSet.
                    "podSets" => {
                        for ps in x.as_array().into_iter().flatten() {
                            for list in ["containers", "initContainers"] {
                                for c in
                                    ps.get(list).and_then(Value::as_array).into_iter().flatten()
                                {
                                    container_fields(list, c, false, out);
                                }
                            }
                            if let Some(v) = ps.get("volumes") {
                                volume_refs(v, out);
                            }
                        }
                        walk(x, container, out);
                    }
                    "volumes" => {
                        volumes(x, out);
                        walk(x, container, out);
                    }
                    "hostNetwork" | "hostPID" | "hostIPC" => {
                        if x.as_bool() == Some(true) {
                            out.insert(Privilege::HostNamespace(match key.as_str() {
                                "hostNetwork" => "hostNetwork",
                                "hostPID" => "hostPID",
                                _ => "hostIPC",
                            }));
                        }
                    }
                    "hostPath" => match x {
                        Value::Object(h) => {
                            let path = h.get("path").and_then(Value::as_str).unwrap_or_default();
                            out.insert(Privilege::HostPath(path.to_owned()));
                        }
                        Value::Null => {}
                        other => {
                            out.insert(Privilege::HostPath(other.to_string()));
                        }
                    },
                    "hostPort" => {
                        if let Some(n) = x.as_i64().filter(|n| *n != 0) {
                            out.insert(Privilege::HostPort(n));
                        } else if !x.is_null() && x.as_i64().is_none() {
                            out.insert(Privilege::Other(format!("hostPort {x}")));
                        }
                    }
                    "serviceAccountName" | "serviceAccount" => {
                        if let Some(sa) = x.as_str().filter(|s| !s.is_empty()) {
                            out.insert(Privilege::ServiceAccount(sa.to_owned()));
                        }
                    }
                    "image" => match x {
                        Value::String(s) if !s.is_empty() => {
                            out.insert(Privilege::Image(s.clone()));
                        }
                        // An image volume (`image: {reference: ...}`).
                        Value::Object(o) => {
                            if let Some(r) = o.get("reference").and_then(Value::as_str) {
                                out.insert(Privilege::Image(r.to_owned()));
                            }
                        }
                        _ => {}
                    },
                    // A Secret named anywhere (a TrainJob's initializer
                    // `secretRef`, an `envFrom`): the user's choice where
                    // the user wrote it, a plugin's where a plugin did.
                    "secretRef" | "secretKeyRef" => {
                        if let Some(n) = x.get("name").and_then(Value::as_str) {
                            out.insert(Privilege::SecretRef(n.to_owned()));
                        }
                        walk(x, container, out);
                    }
                    "annotations" => annotations(x, out),
                    // A container's or pod's `resources`, a TrainJob's
                    // `resourcesPerNode` (a ClusterRole's `resources` is a
                    // list: not this).
                    "resources" | "resourcesPerNode" if x.is_object() => {
                        resources(x, out);
                        walk(x, container, out);
                    }
                    "data" | "binaryData" | "stringData" => {}
                    _ => walk(x, container, out),
                }
            }
        }
        Value::Array(items) => {
            for x in items {
                walk(x, container, out);
            }
        }
        _ => {}
    }
}

/// The quantities of a `resources` object (`requests`, `limits`).
fn resources(v: &Value, out: &mut BTreeSet<Privilege>) {
    for which in ["requests", "limits"] {
        for (name, q) in v
            .get(which)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let quantity = match q {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                other => other.to_string(),
            };
            out.insert(Privilege::Resource {
                name: name.clone(),
                quantity,
            });
        }
    }
}

/// Whether `p` is a resource quantity no larger than one of the same
/// resource in `seen` (so a plugin may copy, split or lower what the
/// runtime and TrainJob ask for, never raise it). A quantity that does not
/// parse is not within anything.
pub fn within_seen<'a>(p: &Privilege, seen: impl IntoIterator<Item = &'a Privilege>) -> bool {
    let Privilege::Resource { name, quantity } = p else {
        return false;
    };
    let parse = |q: &str| kube_quantity::ParsedQuantity::try_from(q).ok();
    let Some(asked) = parse(quantity) else {
        return false;
    };
    seen.into_iter().any(|s| match s {
        Privilege::Resource {
            name: n,
            quantity: q,
        } if n == name => parse(q).is_some_and(|had| asked <= had),
        _ => false,
    })
}

/// Pod-spec fields a plugin may change without a grant: containers and
/// volumes are judged entry by entry, the rest cannot widen what the pods
/// may reach (restart policy, deadlines, scheduling gates, topology spread,
/// hostname and subdomain, resources). The identity and baseline fields
/// (`serviceAccountName`, host namespaces, `securityContext`) have their
/// own privileges; the value-judged fields (scheduler, priority class,
/// placement, pull secrets, tokens, DNS) are not listed here, they are
/// judged before this list is consulted.
pub const ALLOWED_POD_FIELDS: &[&str] = &[
    "containers",
    "initContainers",
    "ephemeralContainers",
    "volumes",
    "securityContext",
    "serviceAccountName",
    "serviceAccount",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostUsers",
    "restartPolicy",
    "terminationGracePeriodSeconds",
    "activeDeadlineSeconds",
    "schedulingGates",
    "topologySpreadConstraints",
    "readinessGates",
    "subdomain",
    "hostname",
    "setHostnameAsFQDN",
    "enableServiceLinks",
    "os",
    "resources",
];

/// Container fields a plugin may change without a grant (`image`, `env`
/// and `envFrom` Secret references and `securityContext` are judged on
/// their own).
pub const ALLOWED_CONTAINER_FIELDS: &[&str] = &[
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "workingDir",
    "ports",
    "env",
    "envFrom",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "volumeMounts",
    "volumeDevices",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "securityContext",
    "stdin",
    "stdinOnce",
    "tty",
];

/// Volume types a plugin may add without a grant: none carries
/// credentials of its own (Secrets and projected tokens are judged by
/// name and audience; `hostPath` is a baseline privilege; an image volume
/// is judged by image).
pub const ALLOWED_VOLUME_TYPES: &[&str] = &[
    "emptyDir",
    "configMap",
    "downwardAPI",
    "secret",
    "projected",
    "hostPath",
    "image",
];

/// Pod-spec fields judged by value ([`pod_fields`]), also in a partial pod
/// spec.
const VALUE_JUDGED_POD_FIELDS: &[&str] = &[
    "imagePullSecrets",
    "schedulerName",
    "priorityClassName",
    "nodeName",
    "nodeSelector",
    "tolerations",
    "affinity",
    "dnsPolicy",
    "dnsConfig",
    "hostAliases",
    "automountServiceAccountToken",
    "volumes",
    "initContainers",
];

/// Rule: a pod spec's settings beyond [`ALLOWED_POD_FIELDS`] and
/// [`ALLOWED_CONTAINER_FIELDS`], and the value-judged ones among them
/// (scheduler, priority class, placement, Secret references, tokens, DNS,
/// containers), are privileges keyed by their value: a plugin that sets or
/// changes one has added a privilege its grants must allow, and one it
/// only kept (the runtime's or the TrainJob's) is not its doing. `strict`:
/// a whole pod spec, whose other fields count as [`Privilege::Field`].
fn pod_fields(pod: &Map<String, Value>, strict: bool, out: &mut BTreeSet<Privilege>) {
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    for (key, v) in pod {
        if v.is_null() {
            continue;
        }
        match key.as_str() {
            "schedulerName" => {
                out.insert(Privilege::Scheduler(text(v)));
            }
            "priorityClassName" => {
                out.insert(Privilege::PriorityClass(text(v)));
            }
            "nodeName" => {
                out.insert(Privilege::Placement {
                    key: "*".into(),
                    what: format!("nodeName {v}"),
                });
            }
            "nodeSelector" => match v.as_object() {
                Some(m) => {
                    for (k, x) in m {
                        out.insert(Privilege::Placement {
                            key: k.clone(),
                            what: format!("nodeSelector {k}={}", text(x)),
                        });
                    }
                }
                None => {
                    out.insert(Privilege::Field(format!("nodeSelector: {v}")));
                }
            },
            "tolerations" => {
                for t in v.as_array().into_iter().flatten() {
                    let key = t
                        .get("key")
                        .and_then(Value::as_str)
                        .filter(|k| !k.is_empty())
                        .unwrap_or("*");
                    out.insert(Privilege::Placement {
                        key: key.to_owned(),
                        what: format!("toleration {t}"),
                    });
                }
            }
            "affinity" => {
                if let Some(node) = v.get("nodeAffinity").filter(|n| !n.is_null()) {
                    let mut keys = BTreeSet::new();
                    node_affinity_keys(node, &mut keys);
                    if keys.is_empty() {
                        keys.insert("*".to_owned());
                    }
                    for key in keys {
                        out.insert(Privilege::Placement {
                            key,
                            what: format!("nodeAffinity {node}"),
                        });
                    }
                }
            }
            "imagePullSecrets" => {
                for r in v.as_array().into_iter().flatten() {
                    if let Some(n) = r.get("name").and_then(Value::as_str) {
                        out.insert(Privilege::SecretRef(n.to_owned()));
                    }
                }
            }
            "automountServiceAccountToken" => {
                if v.as_bool() != Some(false) {
                    out.insert(Privilege::Token(format!(
                        "automountServiceAccountToken: {v}"
                    )));
                }
            }
            "dnsPolicy" | "dnsConfig" | "hostAliases" => {
                out.insert(Privilege::Dns(format!("{key}: {v}")));
            }
            "volumes" => volume_refs(v, out),
            "containers" | "initContainers" | "ephemeralContainers" => {
                let list = match key.as_str() {
                    "containers" => "containers",
                    "initContainers" => "initContainers",
                    _ => "ephemeralContainers",
                };
                for c in v.as_array().into_iter().flatten() {
                    container_fields(list, c, strict, out);
                }
            }
            k if ALLOWED_POD_FIELDS.contains(&k) || !strict => {}
            k => {
                out.insert(Privilege::Field(format!("{k}: {v}")));
            }
        }
    }
}

/// The node label keys a node affinity selects on.
fn node_affinity_keys(v: &Value, keys: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if (k == "matchExpressions" || k == "matchFields")
                    && let Some(items) = x.as_array()
                {
                    for e in items {
                        if let Some(key) = e.get("key").and_then(Value::as_str) {
                            keys.insert(key.to_owned());
                        }
                    }
                } else {
                    node_affinity_keys(x, keys);
                }
            }
        }
        Value::Array(items) => {
            for x in items {
                node_affinity_keys(x, keys);
            }
        }
        _ => {}
    }
}

/// One container of a pod spec: itself (by list and name), its Secret
/// references and its fields beyond [`ALLOWED_CONTAINER_FIELDS`].
fn container_fields(list: &'static str, c: &Value, strict: bool, out: &mut BTreeSet<Privilege>) {
    let Some(c) = c.as_object() else { return };
    let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
    out.insert(Privilege::Container {
        list,
        name: name.to_owned(),
    });
    for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
        if let Some(n) = e
            .pointer("/valueFrom/secretKeyRef/name")
            .and_then(Value::as_str)
        {
            out.insert(Privilege::SecretRef(n.to_owned()));
        }
        if let Some(n) = e
            .pointer("/valueFrom/configMapKeyRef/name")
            .and_then(Value::as_str)
        {
            out.insert(Privilege::ConfigMapRef(n.to_owned()));
        }
    }
    for e in c
        .get("envFrom")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(n) = e.pointer("/secretRef/name").and_then(Value::as_str) {
            out.insert(Privilege::SecretRef(n.to_owned()));
        }
        if let Some(n) = e.pointer("/configMapRef/name").and_then(Value::as_str) {
            out.insert(Privilege::ConfigMapRef(n.to_owned()));
        }
    }
    for (k, v) in c.iter().filter(|_| strict) {
        if !v.is_null() && !ALLOWED_CONTAINER_FIELDS.contains(&k.as_str()) {
            out.insert(Privilege::Field(format!("{list} {name:?}: {k}: {v}")));
        }
    }
}

/// The Secrets and tokens a pod's volumes reference, and volume types
/// beyond [`ALLOWED_VOLUME_TYPES`].
fn volume_refs(v: &Value, out: &mut BTreeSet<Privilege>) {
    for vol in v.as_array().into_iter().flatten() {
        let Some(o) = vol.as_object() else { continue };
        if let Some(n) = vol.pointer("/secret/secretName").and_then(Value::as_str) {
            out.insert(Privilege::SecretRef(n.to_owned()));
        }
        if let Some(n) = vol.pointer("/configMap/name").and_then(Value::as_str) {
            out.insert(Privilege::ConfigMapRef(n.to_owned()));
        }
        let sources = vol.pointer("/projected/sources").and_then(Value::as_array);
        for src in sources.into_iter().flatten() {
            if let Some(n) = src.pointer("/secret/name").and_then(Value::as_str) {
                out.insert(Privilege::SecretRef(n.to_owned()));
            }
            if let Some(n) = src.pointer("/configMap/name").and_then(Value::as_str) {
                out.insert(Privilege::ConfigMapRef(n.to_owned()));
            }
            if let Some(t) = src.get("serviceAccountToken").filter(|t| !t.is_null()) {
                let what = format!("projected serviceAccountToken {t}");
                out.insert(match t.get("audience").and_then(Value::as_str) {
                    Some(a) if !a.is_empty() => Privilege::ProjectedToken {
                        audience: a.to_owned(),
                        what,
                    },
                    _ => Privilege::Token(what),
                });
            }
        }
        for (k, x) in o {
            if k != "name" && !x.is_null() && !ALLOWED_VOLUME_TYPES.contains(&k.as_str()) {
                out.insert(Privilege::Field(format!("volume {vol}")));
            }
        }
    }
}

/// What `pod` (a pod spec: an object with a `containers` list under a
/// `spec` key) lacks of the restricted level, per container that is
/// defined in full (has an `image`; a patch's partial container is not
/// judged): the Pod
/// Security Standards require `allowPrivilegeEscalation: false`,
/// `capabilities.drop` with `ALL`, `runAsNonRoot: true` and a
/// `RuntimeDefault` or `Localhost` seccomp profile (the last two on the
/// container or the pod).
///
/// Rule: a restriction is judged by its absence, so that taking one away
/// is adding a privilege. A runtime that sets them and a plugin that removes
/// one (deletes `drop: [ALL]`, sets `runAsNonRoot` to null, …) has added a
/// gap that was not there, which a plugin held to the restricted level may
/// not; a runtime without them has the gaps already and a plugin that
/// leaves them is not blamed. A container a plugin adds must meet the level.
fn restricted_gaps(pod: &Map<String, Value>, out: &mut BTreeSet<Privilege>) {
    let pod_sc = pod.get("securityContext");
    let pod_non_root = pod_sc
        .and_then(|s| s.get("runAsNonRoot"))
        .and_then(Value::as_bool);
    let pod_seccomp = pod_sc
        .and_then(|s| s.pointer("/seccompProfile/type"))
        .and_then(Value::as_str);
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        let Some(items) = pod.get(key).and_then(Value::as_array) else {
            continue;
        };
        for c in items.iter().filter(|c| c.get("image").is_some()) {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
            let at = |p: &str| c.get("securityContext").and_then(|s| s.pointer(p));
            let mut gap = |what: &str| {
                out.insert(Privilege::Unrestricted(format!(
                    "{what} on container {name:?}"
                )));
            };
            if at("/allowPrivilegeEscalation").and_then(Value::as_bool) != Some(false) {
                gap("allowPrivilegeEscalation not false");
            }
            let drops_all = at("/capabilities/drop")
                .and_then(Value::as_array)
                .is_some_and(|d| {
                    d.iter()
                        .any(|x| x.as_str().is_some_and(|x| x.eq_ignore_ascii_case("ALL")))
                });
            if !drops_all {
                gap("capabilities.drop without ALL");
            }
            let non_root = at("/runAsNonRoot")
                .and_then(Value::as_bool)
                .or(pod_non_root);
            if non_root != Some(true) {
                gap("runAsNonRoot not true");
            }
            let seccomp = at("/seccompProfile/type")
                .and_then(Value::as_str)
                .or(pod_seccomp);
            if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
                gap("seccompProfile neither RuntimeDefault nor Localhost");
            }
        }
    }
}

/// Whether a JSON value is the number zero, whatever its spelling (`0`,
/// `0.0`, `-0.0`): the API server stores an integer field sent as `0.0` as
/// `0`, so a check of `as_i64` alone would miss it.
fn is_zero(v: &Value) -> bool {
    v.as_f64() == Some(0.0)
}

fn security_context(sc: &Value, container: &str, out: &mut BTreeSet<Privilege>) {
    let Some(sc) = sc.as_object() else { return };
    let c = || container.to_owned();
    if sc.get("privileged").and_then(Value::as_bool) == Some(true) {
        out.insert(Privilege::Privileged { container: c() });
    }
    if sc.get("allowPrivilegeEscalation").and_then(Value::as_bool) == Some(true) {
        out.insert(Privilege::Unrestricted(format!(
            "allowPrivilegeEscalation true on container {container:?}"
        )));
    }
    if sc.get("runAsNonRoot").and_then(Value::as_bool) == Some(false) {
        out.insert(Privilege::Unrestricted(format!(
            "runAsNonRoot false on {container:?}"
        )));
    }
    match sc.get("runAsUser") {
        Some(v) if is_zero(v) => {
            out.insert(Privilege::Unrestricted(format!(
                "runAsUser 0 on {container:?}"
            )));
        }
        // Not a whole non-negative number: not judged safe by its spelling.
        Some(v)
            if !v.is_null()
                && v.as_u64().is_none()
                && v.as_f64().is_none_or(|f| f.fract() != 0.0 || f < 0.0) =>
        {
            out.insert(Privilege::Unrestricted(format!(
                "runAsUser {v} on {container:?}"
            )));
        }
        _ => {}
    }
    if let Some(add) = sc
        .pointer_in("capabilities", "add")
        .and_then(Value::as_array)
    {
        for cap in add {
            let name = normalize_cap(cap.as_str().unwrap_or_default());
            if name != "NET_BIND_SERVICE" && BASELINE_CAPABILITIES.contains(&name.as_str()) {
                out.insert(Privilege::Unrestricted(format!("capability {name}")));
            }
            if !BASELINE_CAPABILITIES.contains(&name.as_str()) {
                out.insert(Privilege::Capability {
                    container: c(),
                    name,
                });
            }
        }
    }
    if let Some(pm) = sc.get("procMount").and_then(Value::as_str)
        && pm != "Default"
        && !pm.is_empty()
    {
        out.insert(Privilege::Other(format!(
            "procMount {pm:?} on container {container:?}"
        )));
    }
    if let Some(se) = sc.get("seLinuxOptions").and_then(Value::as_object) {
        let s = |k: &str| se.get(k).and_then(Value::as_str).unwrap_or_default();
        if !BASELINE_SELINUX_TYPES.contains(&s("type"))
            || !s("user").is_empty()
            || !s("role").is_empty()
        {
            out.insert(Privilege::Other(format!(
                "seLinuxOptions {} on {container:?}",
                Value::Object(se.clone())
            )));
        }
    }
    for key in ["seccompProfile", "appArmorProfile"] {
        if sc.pointer_in(key, "type").and_then(Value::as_str) == Some("Unconfined") {
            out.insert(Privilege::Other(format!(
                "{key} Unconfined on {container:?}"
            )));
        }
    }
    if sc
        .pointer_in("windowsOptions", "hostProcess")
        .and_then(Value::as_bool)
        == Some(true)
    {
        out.insert(Privilege::Other("windowsOptions.hostProcess".to_owned()));
    }
    if let Some(sysctls) = sc.get("sysctls").and_then(Value::as_array) {
        for s in sysctls {
            let name = s.get("name").and_then(Value::as_str).unwrap_or_default();
            if !SAFE_SYSCTLS.contains(&name) {
                out.insert(Privilege::Other(format!("sysctl {name:?}")));
            }
        }
    }
}

/// Volume types outside the restricted list (`hostPath` is a baseline
/// privilege of its own).
fn volumes(v: &Value, out: &mut BTreeSet<Privilege>) {
    let Some(items) = v.as_array() else { return };
    for item in items {
        let Some(o) = item.as_object() else { continue };
        for k in o.keys() {
            if k != "name" && k != "hostPath" && !RESTRICTED_VOLUMES.contains(&k.as_str()) {
                out.insert(Privilege::Unrestricted(format!("{k} volume")));
            }
        }
    }
}

fn annotations(a: &Value, out: &mut BTreeSet<Privilege>) {
    let Some(a) = a.as_object() else { return };
    for (k, v) in a {
        let v = v.as_str().unwrap_or_default();
        if k.starts_with("container.apparmor.security.beta.kubernetes.io/")
            && v != "runtime/default"
            && !v.starts_with("localhost/")
        {
            out.insert(Privilege::Other(format!("AppArmor annotation {k}={v}")));
        }
        if (k == "seccomp.security.alpha.kubernetes.io/pod"
            || k.starts_with("container.seccomp.security.alpha.kubernetes.io/"))
            && v == "unconfined"
        {
            out.insert(Privilege::Other(format!("seccomp annotation {k}={v}")));
        }
    }
}

/// `map[a][b]`.
trait PointerIn {
    fn pointer_in(&self, a: &str, b: &str) -> Option<&Value>;
}

impl PointerIn for serde_json::Map<String, Value> {
    fn pointer_in(&self, a: &str, b: &str) -> Option<&Value> {
        self.get(a)?.get(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": spec}}}}]}})
    }

    /// A container that meets the restricted level.
    fn restricted_container(name: &str) -> Value {
        json!({"name": name, "image": "app:1", "securityContext": {
            "allowPrivilegeEscalation": false, "runAsNonRoot": true,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}})
    }

    /// A tenant plugin allowed any image and any added container, so that
    /// these tests judge the restricted level alone.
    fn tenant() -> PodGrants {
        PodGrants {
            restricted: true,
            images: vec!["*".into()],
            containers: vec!["*".into()],
            ..PodGrants::default()
        }
    }

    /// What a restricted plugin is refused for turning `before` into `after`.
    fn refused(before: &Value, after: &Value) -> Vec<String> {
        let (b, a) = (privileges(before), privileges(after));
        added(&b, &a)
            .filter(|p| tenant().check(p).is_err())
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn removing_a_restriction_is_adding_a_privilege() {
        let before = pod(json!({"containers": [restricted_container("node")]}));
        assert!(refused(&before, &before).is_empty());
        let sc = "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/securityContext";
        let removals: [(&str, Value, &str); 6] = [
            (
                "/capabilities/drop",
                json!([]),
                "capabilities.drop without ALL",
            ),
            (
                "/capabilities",
                Value::Null,
                "capabilities.drop without ALL",
            ),
            ("/seccompProfile", json!({}), "seccompProfile neither"),
            ("/runAsNonRoot", Value::Null, "runAsNonRoot not true"),
            (
                "/allowPrivilegeEscalation",
                Value::Null,
                "allowPrivilegeEscalation not false",
            ),
            ("", Value::Null, "allowPrivilegeEscalation not false"),
        ];
        for (field, value, words) in removals {
            let mut after = before.clone();
            *after.pointer_mut(&format!("{sc}{field}")).unwrap() = value.clone();
            let r = refused(&before, &after);
            assert!(
                r.iter()
                    .any(|x| x.contains(words) && x.contains("\"node\"")),
                "{field} = {value}: {r:?}"
            );
        }
    }

    #[test]
    fn pod_level_restrictions_count_for_every_container() {
        let mut c = restricted_container("node");
        let sc = c["securityContext"].as_object_mut().unwrap();
        sc.remove("runAsNonRoot");
        sc.remove("seccompProfile");
        let before = pod(json!({"securityContext": {"runAsNonRoot": true,
            "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}, "containers": [c]}));
        assert!(
            refused(&json!({}), &before).is_empty(),
            "{:?}",
            refused(&json!({}), &before)
        );
        let mut after = before.clone();
        after["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("securityContext");
        let r = refused(&before, &after);
        assert_eq!(r.len(), 2, "{r:?}");
    }

    #[test]
    fn a_runtime_without_restrictions_blames_no_plugin_but_an_added_container_must_meet_them() {
        let bare = pod(json!({"containers": [{"name": "node", "image": "app:1"}]}));
        assert!(refused(&bare, &bare).is_empty());
        let mut sidecar = bare.clone();
        sidecar["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "side", "image": "side:1"}));
        let r = refused(&bare, &sidecar);
        assert_eq!(r.len(), 4, "{r:?}");
        assert!(r.iter().all(|x| x.contains("\"side\"")), "{r:?}");
        // Without `containers` granted, adding one is refused as such.
        let added_container: Vec<_> = added(&privileges(&bare), &privileges(&sidecar))
            .filter_map(|p| {
                PodGrants::default()
                    .check(p)
                    .err()
                    .map(|g| (p.to_string(), g))
            })
            .collect();
        assert!(
            added_container.contains(&(
                "containers entry \"side\"".to_owned(),
                "grants.pod.containers"
            )),
            "{added_container:?}"
        );
        let mut good = bare.clone();
        good["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(restricted_container("side"));
        assert!(refused(&bare, &good).is_empty());
        // A patch's partial container (no image) is not judged.
        let patch = json!({"spec": {"containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}]}});
        assert!(refused(&json!({}), &patch).is_empty());
        // A cluster plugin (baseline) may remove restrictions.
        let before = pod(json!({"containers": [restricted_container("node")]}));
        let (b, a) = (privileges(&before), privileges(&bare));
        assert!(added(&b, &a).all(|p| PodGrants::default().check(p).is_ok()));
    }

    #[test]
    fn root_is_root_however_it_is_spelled() {
        for v in [json!(0), json!(0.0), json!(-0.0)] {
            let p = privileges(&json!({"securityContext": {"runAsUser": v}}));
            assert!(
                p.iter().any(|x| x.to_string().starts_with("runAsUser 0")),
                "{v}: {p:?}"
            );
        }
        for v in [json!(-1), json!(1.5), json!("0")] {
            let p = privileges(&json!({"securityContext": {"runAsUser": v}}));
            assert!(
                p.iter().any(|x| x.to_string().starts_with("runAsUser ")),
                "{v}: {p:?}"
            );
        }
        for v in [json!(1000), json!(1000.0), Value::Null] {
            let p = privileges(&json!({"securityContext": {"runAsUser": v}}));
            assert!(p.is_empty(), "{v}: {p:?}");
        }
    }

    #[test]
    fn finds_every_baseline_violation() {
        let p = privileges(&pod(json!({
            "hostNetwork": true, "hostPID": true, "hostIPC": false,
            "serviceAccountName": "admin",
            "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}, {"name": "net.ipv4.tcp_syncookies", "value": "1"}]},
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}, {"name": "cm", "configMap": {"name": "x"}}],
            "containers": [
                {"name": "a", "image": "evil:1", "ports": [{"containerPort": 1, "hostPort": 22}],
                 "securityContext": {"privileged": true, "procMount": "Unmasked",
                    "capabilities": {"add": ["CAP_SYS_ADMIN", "NET_BIND_SERVICE"]},
                    "seccompProfile": {"type": "Unconfined"}, "seLinuxOptions": {"type": "spc_t"}}},
                {"name": "b", "image": "ok:1", "securityContext": {"privileged": false, "appArmorProfile": {"type": "RuntimeDefault"}}}
            ]
        })));
        let has = |x: Privilege| assert!(p.contains(&x), "missing {x}: {p:?}");
        has(Privilege::HostNamespace("hostNetwork"));
        has(Privilege::HostNamespace("hostPID"));
        has(Privilege::ServiceAccount("admin".into()));
        has(Privilege::HostPath("/".into()));
        has(Privilege::HostPort(22));
        has(Privilege::Privileged {
            container: "a".into(),
        });
        has(Privilege::Capability {
            container: "a".into(),
            name: "SYS_ADMIN".into(),
        });
        has(Privilege::Image("evil:1".into()));
        has(Privilege::Image("ok:1".into()));
        assert!(!p.contains(&Privilege::HostNamespace("hostIPC")));
        assert!(!p.contains(&Privilege::Privileged {
            container: "b".into()
        }));
        let others: Vec<String> = p
            .iter()
            .filter_map(|x| match x {
                Privilege::Other(s) => Some(s.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(others.len(), 4, "{others:?}");
        assert!(!others.iter().any(|o| o.contains("tcp_syncookies")));
    }

    #[test]
    fn payloads_are_not_pod_content() {
        let cm = json!({"kind": "ConfigMap", "data": {"image": "x", "hostNetwork": "true"},
            "stringData": {"securityContext": {"privileged": true}}});
        assert!(privileges(&cm).is_empty());
    }

    #[test]
    fn annotations_and_patches_count() {
        let tj = json!({"spec": {"runtimePatches": [{"manager": "x", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
                "metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/node": "unconfined"}},
                "spec": {"hostNetwork": true}}}}}]}}}}]}});
        let p = privileges(&tj);
        assert!(p.contains(&Privilege::HostNamespace("hostNetwork")));
        assert!(
            p.iter()
                .any(|x| matches!(x, Privilege::Other(s) if s.contains("AppArmor")))
        );
    }

    #[test]
    fn grants() {
        let none = PodGrants::default();
        let some = PodGrants {
            host_paths: vec!["/data".into()],
            capabilities: vec!["cap_net_admin".into()],
            service_accounts: vec!["trainer".into()],
            images: vec!["registry.example/".into()],
            ..PodGrants::default()
        };
        let cases = [
            (Privilege::HostPath("/data/x".into()), true),
            (Privilege::HostPath("/database".into()), false),
            (Privilege::HostPath("/".into()), false),
            (
                Privilege::Capability {
                    container: "c".into(),
                    name: "NET_ADMIN".into(),
                },
                true,
            ),
            (Privilege::ServiceAccount("trainer".into()), true),
            (Privilege::ServiceAccount("admin".into()), false),
            (Privilege::Image("registry.example/a:1".into()), true),
            (Privilege::Image("evil.example/a:1".into()), false),
            (Privilege::HostNamespace("hostPID"), false),
        ];
        for (p, ok) in cases {
            assert_eq!(some.check(&p).is_ok(), ok, "{p}");
            assert!(none.check(&p).is_err(), "{p}");
        }
        assert_eq!(
            none.check(&Privilege::HostPort(1)),
            Err("grants.pod.hostPorts")
        );
        let root = PodGrants {
            host_paths: vec!["/".into()],
            ..PodGrants::default()
        };
        assert!(root.check(&Privilege::HostPath("/etc".into())).is_ok());
    }

    #[test]
    fn restricted_level_counts_only_when_held_to_it() {
        let p = privileges(&pod(json!({
            "volumes": [{"name": "n", "nfs": {"server": "x", "path": "/"}}, {"name": "e", "emptyDir": {}}],
            "containers": [{"name": "a", "securityContext": {
                "allowPrivilegeEscalation": true, "runAsNonRoot": false, "runAsUser": 0,
                "capabilities": {"add": ["CHOWN", "NET_BIND_SERVICE"]}}}]
        })));
        let relaxed: Vec<String> = p
            .iter()
            .filter_map(|x| match x {
                Privilege::Unrestricted(s) => Some(s.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            relaxed,
            [
                "allowPrivilegeEscalation true on container \"a\"",
                "capability CHOWN",
                "nfs volume",
                "runAsNonRoot false on \"a\"",
                "runAsUser 0 on \"a\"",
            ]
        );
        let baseline = PodGrants::default();
        let restricted = PodGrants {
            restricted: true,
            ..PodGrants::default()
        };
        let chown = PodGrants {
            restricted: true,
            capabilities: vec!["CAP_CHOWN".into()],
            ..PodGrants::default()
        };
        for x in p.iter().filter(|x| matches!(x, Privilege::Unrestricted(_))) {
            assert!(baseline.check(x).is_ok(), "{x}");
            assert_eq!(restricted.check(x), Err("grants.pod.privileged"), "{x}");
            assert_eq!(
                chown.check(x).is_ok(),
                x.to_string().starts_with("capability CHOWN"),
                "{x}"
            );
        }
    }

    #[test]
    fn added_is_the_difference() {
        let before = privileges(&pod(json!({"containers": [{"name": "a", "image": "x"}]})));
        let after = privileges(&pod(
            json!({"hostPID": true, "containers": [{"name": "a", "image": "x"}]}),
        ));
        let new: Vec<_> = added(&before, &after).collect();
        assert_eq!(new, vec![&Privilege::HostNamespace("hostPID")]);
    }

    /// A container added to the runtime info's pod sets counts as the
    /// adding plugin's, judged by name (and image) as in a pod spec.
    #[test]
    fn a_container_added_to_the_infos_pod_sets_is_judged_by_name() {
        let info = |init: Value| {
            json!({"templateSpec": {"podSets": [{"name": "node",
                "containers": [{"name": "node"}], "initContainers": init}]}})
        };
        let before = privileges(&info(json!([])));
        let after = privileges(&info(json!([{"name": "flux-installer", "image": "v:1"}])));
        let new: Vec<String> = added(&before, &after).map(ToString::to_string).collect();
        assert_eq!(
            new,
            ["image \"v:1\"", "initContainers entry \"flux-installer\""]
        );
        assert!(before.contains(&Privilege::Container {
            list: "containers",
            name: "node".into()
        }));
    }

    /// Secrets, ConfigMaps and tokens the info's pod sets reference (env,
    /// `envFrom`, volumes) are the adding plugin's doing, as in a pod spec.
    #[test]
    fn references_added_to_the_infos_pod_sets_are_judged_as_in_a_pod_spec() {
        let info = |env: Value, volumes: Value| {
            json!({"templateSpec": {"podSets": [{"name": "node",
                "containers": [{"name": "node", "env": env}], "volumes": volumes}]}})
        };
        let before = privileges(&info(json!([]), json!([])));
        let after = privileges(&info(
            json!([{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
                   {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "c"}}}]),
            json!([{"name": "s", "secret": {"secretName": "keys"}},
                   {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"audience": "vault", "path": "t"}}]}},
                   {"name": "p", "persistentVolumeClaim": {"claimName": "data"}}]),
        ));
        let new: Vec<String> = added(&before, &after).map(ToString::to_string).collect();
        assert!(
            new.contains(&"a reference to Secret \"db\"".to_owned()),
            "{new:?}"
        );
        assert!(
            new.contains(&"a reference to ConfigMap \"cfg\"".to_owned()),
            "{new:?}"
        );
        assert!(
            new.contains(&"a reference to Secret \"keys\"".to_owned()),
            "{new:?}"
        );
        assert!(
            after.contains(&Privilege::ProjectedToken {
                audience: "vault".into(),
                what: r#"projected serviceAccountToken {"audience":"vault","path":"t"}"#.into()
            }),
            "{new:?}"
        );
        assert!(
            new.iter().any(|p| p.contains("persistentVolumeClaim")),
            "a volume type beyond the allow-list: {new:?}"
        );
    }

    /// Everything beyond baseline a plugin may not change in pods without a
    /// grant, each refused naming the grant that would allow it; the same
    /// settings kept from the runtime are not the plugin's doing.
    #[test]
    fn pod_changes_beyond_the_allow_list_need_their_grant() {
        let base = json!({"containers": [{"name": "node", "image": "app:1",
            "env": [{"name": "A", "value": "1"}],
            "resources": {"limits": {"nvidia.com/gpu": 2, "memory": "8Gi"}}}]});
        let with = |pointer: &str, value: Value| {
            let mut spec = base.clone();
            let mut at = &mut spec;
            for part in pointer.split('/').skip(1) {
                at = match part.parse::<usize>() {
                    Ok(i) => &mut at[i],
                    Err(_) => &mut at[part],
                };
            }
            *at = value;
            pod(spec)
        };
        let before = pod(base.clone());
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "/containers/0/resources",
                json!({"limits": {"nvidia.com/gpu": 64, "memory": "8Gi"}}),
                "grants.pod.resources",
            ),
            (
                "/containers/0/resources",
                json!({"limits": {"nvidia.com/gpu": 2, "memory": "9Gi"}}),
                "grants.pod.resources",
            ),
            (
                "/containers/0/resources",
                json!({"limits": {"nvidia.com/gpu": 2, "example.com/fpga": 1}}),
                "grants.pod.resources",
            ),
            (
                "/resources",
                json!({"requests": {"cpu": "1000"}}),
                "grants.pod.resources",
            ),
            (
                "/volumes",
                json!([{"name": "c", "configMap": {"name": "other-team-config"}}]),
                "grants.pod.configMapNames",
            ),
            (
                "/volumes",
                json!([{"name": "p", "projected": {"sources": [
                {"configMap": {"name": "other-team-config"}}]}}]),
                "grants.pod.configMapNames",
            ),
            (
                "/containers/0/env/0",
                json!({"name": "A", "valueFrom": {"configMapKeyRef": {"name": "other-team-config", "key": "k"}}}),
                "grants.pod.configMapNames",
            ),
            (
                "/containers/0/envFrom",
                json!([{"configMapRef": {"name": "other-team-config"}}]),
                "grants.pod.configMapNames",
            ),
            (
                "/automountServiceAccountToken",
                json!(true),
                "grants.pod.serviceAccountTokens",
            ),
            (
                "/volumes",
                json!([{"name": "t", "projected": {"sources": [
                {"serviceAccountToken": {"audience": "vault", "path": "t"}}]}}]),
                "grants.pod.serviceAccountTokens",
            ),
            (
                "/containers/0/env/0",
                json!({"name": "A", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}),
                "grants.pod.secretNames",
            ),
            (
                "/containers/0/envFrom",
                json!([{"secretRef": {"name": "db"}}]),
                "grants.pod.secretNames",
            ),
            (
                "/volumes",
                json!([{"name": "s", "secret": {"secretName": "db"}}]),
                "grants.pod.secretNames",
            ),
            (
                "/volumes",
                json!([{"name": "s", "projected": {"sources": [{"secret": {"name": "db"}}]}}]),
                "grants.pod.secretNames",
            ),
            (
                "/imagePullSecrets",
                json!([{"name": "registry"}]),
                "grants.pod.secretNames",
            ),
            (
                "/nodeName",
                json!("control-plane"),
                "grants.pod.nodePlacement",
            ),
            (
                "/nodeSelector",
                json!({"node-role.kubernetes.io/control-plane": ""}),
                "grants.pod.nodePlacement",
            ),
            (
                "/tolerations",
                json!([{"operator": "Exists"}]),
                "grants.pod.nodePlacement",
            ),
            (
                "/affinity",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname",
                "operator": "In", "values": ["cp"]}]}]}}}),
                "grants.pod.nodePlacement",
            ),
            (
                "/priorityClassName",
                json!("system-node-critical"),
                "grants.pod.priorityClassNames",
            ),
            (
                "/schedulerName",
                json!("my-scheduler"),
                "grants.pod.schedulerNames",
            ),
            ("/dnsPolicy", json!("None"), "grants.pod.dns"),
            (
                "/dnsConfig",
                json!({"nameservers": ["6.6.6.6"]}),
                "grants.pod.dns",
            ),
            (
                "/hostAliases",
                json!([{"ip": "6.6.6.6", "hostnames": ["kubernetes.default.svc"]}]),
                "grants.pod.dns",
            ),
            (
                "/initContainers",
                json!([{"name": "fetch", "image": "app:1", "command": ["sh", "-c", "wget x | sh"]}]),
                "grants.pod.containers",
            ),
            (
                "/runtimeClassName",
                json!("unsandboxed"),
                "grants.pod.privileged",
            ),
            (
                "/shareProcessNamespace",
                json!(true),
                "grants.pod.privileged",
            ),
            (
                "/volumes",
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": "someone-elses"}}]),
                "grants.pod.privileged",
            ),
            (
                "/containers/0/someFutureField",
                json!(true),
                "grants.pod.privileged",
            ),
        ];
        for (pointer, value, grant) in cases {
            let after = with(pointer, value.clone());
            let seen = privileges(&before);
            let refused: Vec<_> = added(&seen, &privileges(&after))
                .filter(|p| !within_seen(p, &seen))
                .filter_map(|p| PodGrants::default().check(p).err())
                .collect();
            assert!(refused.contains(&grant), "{pointer} = {value}: {refused:?}");
            // The same setting in the runtime is not the plugin's doing.
            assert_eq!(added(&privileges(&after), &privileges(&after)).count(), 0);
        }
        // Allowed by default: env literals, args, resources, labels,
        // emptyDir volumes, scheduling gates (a ConfigMap named from the
        // TrainJob is allowed by the pipeline's check, which knows it).
        for (pointer, value) in [
            ("/containers/0/env", json!([{"name": "B", "value": "2"}])),
            ("/containers/0/args", json!(["--epochs", "3"])),
            (
                "/containers/0/resources",
                json!({"limits": {"nvidia.com/gpu": 1, "memory": "8192Mi"}}),
            ),
            (
                "/containers/0/resources",
                json!({"requests": {"nvidia.com/gpu": "2", "memory": "1Gi"}}),
            ),
            ("/volumes", json!([{"name": "e", "emptyDir": {}}])),
            ("/schedulingGates", json!([{"name": "example.com/gate"}])),
        ] {
            let after = with(pointer, value.clone());
            let seen = privileges(&before);
            let refused: Vec<_> = added(&seen, &privileges(&after))
                .filter(|p| !within_seen(p, &seen))
                .filter(|p| PodGrants::default().check(p).is_err())
                .map(ToString::to_string)
                .collect();
            assert!(refused.is_empty(), "{pointer} = {value}: {refused:?}");
        }
    }

    #[test]
    fn typed_grants_allow_exactly_what_they_name() {
        let g = PodGrants {
            scheduler_names: vec!["volcano".into()],
            priority_classes: vec!["high".into()],
            node_placement: vec!["nvidia.com/gpu.product".into()],
            secret_names: vec!["registry".into()],
            config_map_names: vec!["shared-ca".into()],
            containers: vec!["installer".into()],
            ..PodGrants::default()
        };
        let place = |key: &str| Privilege::Placement {
            key: key.into(),
            what: String::new(),
        };
        assert!(g.check(&Privilege::Scheduler("volcano".into())).is_ok());
        assert!(g.check(&Privilege::Scheduler("evil".into())).is_err());
        assert!(g.check(&Privilege::PriorityClass("high".into())).is_ok());
        assert!(
            g.check(&Privilege::PriorityClass("system-node-critical".into()))
                .is_err()
        );
        assert!(g.check(&place("nvidia.com/gpu.product")).is_ok());
        assert!(g.check(&place("*")).is_err(), "nodeName needs *");
        assert!(g.check(&Privilege::SecretRef("registry".into())).is_ok());
        assert!(g.check(&Privilege::SecretRef("db".into())).is_err());
        assert!(
            g.check(&Privilege::ConfigMapRef("shared-ca".into()))
                .is_ok()
        );
        assert!(
            g.check(&Privilege::ConfigMapRef("other-team-config".into()))
                .is_err()
        );
        assert!(
            g.check(&Privilege::SecretRef("shared-ca".into())).is_err(),
            "a ConfigMap grant is no Secret grant"
        );
        let c = |name: &str| Privilege::Container {
            list: "initContainers",
            name: name.into(),
        };
        assert!(g.check(&c("installer")).is_ok());
        assert!(g.check(&c("miner")).is_err());
        assert!(g.check(&Privilege::Dns(String::new())).is_err());
        assert!(g.check(&Privilege::Token(String::new())).is_err());
        assert!(g.check(&Privilege::Field(String::new())).is_err());
    }
}
