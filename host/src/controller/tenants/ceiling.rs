//! The ceiling on tenant plugins, from the `TrainerPluginPolicy` named
//! `default`, and the two checks every `TrainerPlugin` passes before it
//! serves (pure; no I/O):
//!
//! 1. [`Ceiling::options`], on the spec: the namespace may have tenant
//!    plugins; the source kind is allowed (never `file://`) and a ConfigMap
//!    is in the plugin's own namespace; listed phases, kinds, limits and
//!    grants are within the ceiling. It returns the options the plugin is
//!    loaded with: explicit emit and read lists, limits capped, the pod
//!    policy held to the ceiling's level, phases narrowed to the ceiling's.
//! 2. [`Ceiling::check_plugin`], on the loaded plugin: what it would emit
//!    and read (its declaration, when the spec does not narrow it) is within
//!    the ceiling.
//!
//! A refusal names what exceeds the ceiling. Without a policy no namespace
//! may have tenant plugins.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::core::{Selector, SelectorExt};
use trainforge_api::plugin::{KindRef, Phase};
use trainforge_api::trainforge::v1alpha1::{
    ClusterTrainerPluginSpec, PluginGrants, PodSecurityLevel, TenantSourceKind,
    TrainerPluginPolicySpec, reason,
};

use crate::controller::catalog::spec::{
    PluginOptions, SpecError, options, parse_memory, parse_timeout,
};
use crate::oci::cosign::TrustedKey;
use crate::plugin::{Grants, Limits, LoadedPlugin, PodGrants};

/// Why a `TrainerPlugin` cannot serve under the ceiling: a condition reason
/// and a message naming what was refused.
pub type Refusal = (&'static str, String);

/// What the ceiling allows every tenant plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct Ceiling {
    /// Namespaces that may have tenant plugins (`None`: none).
    namespaces: Option<Selector>,
    /// Why no namespace may (no policy, or an unusable one).
    closed: String,
    /// The policy exists but cannot be used (a bad limit or selector):
    /// nothing may serve, not even offline.
    unusable: bool,
    sources: BTreeSet<TenantSourceKind>,
    phases: BTreeSet<Phase>,
    emits: BTreeSet<KindRef>,
    reads: BTreeSet<KindRef>,
    max: Limits,
    grants: Grants,
    restricted: bool,
    max_per_namespace: usize,
    /// The keys tenants may trust (`None`: the policy lists none).
    trusted_keys: Option<Vec<TrustedKey>>,
}

/// `TrainerPlugin`s a namespace may have in service when the policy does
/// not say: each one costs compile time and memory.
pub const DEFAULT_MAX_PER_NAMESPACE: usize = 8;

/// The kinds tenant plugins may emit when the policy does not say.
fn default_emits() -> BTreeSet<KindRef> {
    [
        KindRef::new("v1", "ConfigMap"),
        KindRef::new("v1", "Secret"),
    ]
    .into()
}

impl Ceiling {
    /// The ceiling of `policy` (`None`: no policy, so no tenant plugins);
    /// `defaults` are the operator's call limits (the largest allowed when
    /// the policy sets none). A policy with an unusable limit or selector
    /// closes every namespace and says why.
    pub fn new(policy: Option<&TrainerPluginPolicySpec>, defaults: &Limits) -> Ceiling {
        let mut c = Ceiling {
            namespaces: None,
            closed: "no TrainerPluginPolicy named default exists".to_owned(),
            unusable: false,
            sources: [TenantSourceKind::ConfigMap].into(),
            phases: Phase::ALL
                .into_iter()
                .filter(|p| *p != Phase::Status)
                .collect(),
            emits: default_emits(),
            reads: [KindRef::new("v1", "ConfigMap")].into(),
            max: *defaults,
            grants: Grants::default(),
            restricted: true,
            max_per_namespace: DEFAULT_MAX_PER_NAMESPACE,
            trusted_keys: None,
        };
        let Some(p) = policy else { return c };
        match c.apply(p) {
            Ok(()) => {}
            Err(why) => {
                c.namespaces = None;
                c.unusable = true;
                c.closed = format!("the TrainerPluginPolicy cannot be used: {why}");
            }
        }
        c
    }

    fn apply(&mut self, p: &TrainerPluginPolicySpec) -> Result<(), String> {
        if let Some(s) = &p.sources {
            self.sources = s.iter().copied().collect();
        }
        if let Some(ph) = &p.phases {
            self.phases = ph.iter().copied().collect();
        }
        if let Some(k) = &p.allowed_kinds {
            self.emits = k.iter().cloned().collect();
        }
        if let Some(k) = &p.allowed_reads {
            self.reads = k.iter().cloned().collect();
        }
        if let Some(l) = &p.max_limits {
            if let Some(t) = &l.timeout {
                self.max.timeout = parse_timeout(t).map_err(|e| format!("maxLimits: {e}"))?;
            }
            if let Some(m) = &l.memory {
                self.max.memory_bytes = parse_memory(m).map_err(|e| format!("maxLimits: {e}"))?;
            }
            if let Some(o) = l.output_bytes {
                self.max.max_output_bytes = usize::try_from(o)
                    .ok()
                    .filter(|o| *o > 0)
                    .ok_or_else(|| format!("maxLimits.outputBytes {o} is not a size"))?;
            }
        }
        if let Some(g) = &p.grants {
            self.grants = grants(g);
        }
        if let Some(n) = p.max_plugins_per_namespace {
            self.max_per_namespace = usize::try_from(n)
                .map_err(|_| format!("maxPluginsPerNamespace {n} is not a count"))?;
        }
        if let Some(keys) = &p.trusted_keys {
            let keys = keys
                .iter()
                .map(|k| TrustedKey::from_pem(&k.name, &k.public_key))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("trustedKeys: {e}"))?;
            self.trusted_keys = Some(keys);
        }
        self.restricted = p.pod_security.unwrap_or_default() == PodSecurityLevel::Restricted;
        self.closed = "the TrainerPluginPolicy's namespaceSelector is unset".to_owned();
        self.namespaces = match &p.namespace_selector {
            None => None,
            Some(sel) => Some(
                Selector::try_from(sel.clone()).map_err(|e| format!("namespaceSelector: {e}"))?,
            ),
        };
        Ok(())
    }

    /// The same ceiling with every namespace allowed (offline tools, which
    /// do not know the namespaces' labels), unless it cannot be used at all.
    #[must_use]
    pub fn every_namespace(mut self) -> Self {
        if !self.unusable {
            self.namespaces = Some(Selector::default());
        }
        self
    }

    /// Whether a namespace with `labels` may have tenant plugins; the
    /// refusal otherwise.
    pub fn admit_namespace(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), Refusal> {
        match &self.namespaces {
            None => Err((
                reason::NAMESPACE_NOT_ALLOWED,
                format!(
                    "namespace {namespace} may not have tenant plugins: {}",
                    self.closed
                ),
            )),
            Some(sel) if sel.matches(labels) => Ok(()),
            Some(sel) => Err((
                reason::NAMESPACE_NOT_ALLOWED,
                format!(
                    "namespace {namespace} may not have tenant plugins: its labels do not match the TrainerPluginPolicy's namespaceSelector ({sel})"
                ),
            )),
        }
    }

    /// Whether the `TrainerPlugin` with `rank` others of its namespace
    /// arriving before it (created earlier; by name within a second) may
    /// serve: only the first `maxPluginsPerNamespace` may, so a newcomer
    /// over the cap is refused and no serving plugin is displaced.
    pub fn admit_count(&self, namespace: &str, rank: usize) -> Result<(), Refusal> {
        if rank < self.max_per_namespace {
            return Ok(());
        }
        Err((
            reason::EXCEEDS_POLICY,
            format!(
                "namespace {namespace} already has the TrainerPluginPolicy's maxPluginsPerNamespace ({}) TrainerPlugins created before this one; only the first created serve",
                self.max_per_namespace
            ),
        ))
    }

    /// Check the keys `spec.verification` trusts. When the policy lists
    /// `trustedKeys`, each must be one of them (by key; a key that does not
    /// parse is left to verification, which refuses it). When it lists none
    /// and the operator requires signatures (`required`), a tenant may
    /// trust no key at all: one it generated itself would satisfy the
    /// requirement without meaning anything.
    pub fn admit_keys(
        &self,
        spec: &ClusterTrainerPluginSpec,
        required: bool,
    ) -> Result<(), Refusal> {
        let Some(v) = &spec.verification else {
            return Ok(());
        };
        let exceeds = |m: String| Err((reason::EXCEEDS_POLICY, m));
        match &self.trusted_keys {
            None if required => exceeds(
                "spec.verification: the operator requires plugin signatures and the TrainerPluginPolicy lists no trustedKeys, so tenants may trust no key".to_owned(),
            ),
            None => Ok(()),
            Some(trusted) => {
                for k in &v.keys {
                    let Ok(key) = TrustedKey::from_pem(&k.name, &k.public_key) else {
                        continue;
                    };
                    if !trusted.iter().any(|t| t.same_key(&key)) {
                        return exceeds(format!(
                            "spec.verification.keys[{}]: not one of the TrainerPluginPolicy's trustedKeys",
                            k.name
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// Check the spec of a `TrainerPlugin` in `namespace` (whose labels are
    /// `labels`) and return the options to load it with.
    pub fn options(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        spec: &ClusterTrainerPluginSpec,
    ) -> Result<PluginOptions, Refusal> {
        self.admit_namespace(namespace, labels)?;
        self.admit_source(namespace, spec)?;
        let exceeds = |what: String| (reason::EXCEEDS_POLICY, what);
        if let Some(phases) = &spec.phases {
            let over: Vec<&str> = phases
                .iter()
                .filter(|p| !self.phases.contains(p))
                .map(|p| p.as_str())
                .collect();
            if !over.is_empty() {
                return Err(exceeds(format!(
                    "spec.phases: {} not allowed by the TrainerPluginPolicy (allowed: {})",
                    over.join(", "),
                    join(self.phases.iter().map(|p| p.as_str()))
                )));
            }
        }
        for (field, listed, allowed) in [
            ("spec.allowedKinds", &spec.allowed_kinds, &self.emits),
            ("spec.allowedReads", &spec.allowed_reads, &self.reads),
        ] {
            if let Some(listed) = listed {
                kinds_within(field, listed.iter(), allowed).map_err(exceeds)?;
            }
        }
        let mut opts = options(spec, &self.max).map_err(|e| match e {
            SpecError::Config(_) => (reason::INVALID_SPEC, e.to_string()),
            other => exceeds(other.to_string()),
        })?;
        let limits = opts.limits.unwrap_or(self.max);
        if limits.timeout > self.max.timeout {
            return Err(exceeds(format!(
                "spec.limits.timeout {} exceeds the TrainerPluginPolicy's {}",
                millis(limits.timeout),
                millis(self.max.timeout)
            )));
        }
        if limits.memory_bytes > self.max.memory_bytes {
            return Err(exceeds(format!(
                "spec.limits.memory {} MiB exceeds the TrainerPluginPolicy's {} MiB",
                limits.memory_bytes >> 20,
                self.max.memory_bytes >> 20
            )));
        }
        opts.limits = Some(limits);
        grants_within(&opts.grants, &self.grants).map_err(exceeds)?;
        opts.grants.pod.restricted = self.restricted;
        opts.phases = Some(match opts.phases.take() {
            Some(p) => p,
            None => self.phases.iter().copied().collect(),
        });
        Ok(opts)
    }

    fn admit_source(
        &self,
        namespace: &str,
        spec: &ClusterTrainerPluginSpec,
    ) -> Result<(), Refusal> {
        let s = &spec.source;
        let kind = if s.builtin.is_some() {
            TenantSourceKind::Builtin
        } else if let Some(cm) = &s.config_map {
            if cm.namespace != namespace {
                return Err((
                    reason::FOREIGN_SOURCE,
                    format!(
                        "spec.source.configMap.namespace {:?}: a TrainerPlugin's ConfigMap must be in its own namespace {namespace:?}",
                        cm.namespace
                    ),
                ));
            }
            TenantSourceKind::ConfigMap
        } else if s.url.as_deref().is_some_and(|u| u.starts_with("https://")) {
            TenantSourceKind::Https
        } else if s.url.as_deref().is_some_and(|u| u.starts_with("oci://")) {
            if s.pull_secret.is_some() {
                return Err((
                    reason::FOREIGN_SOURCE,
                    "spec.source.pullSecret: tenant plugins cannot use the operator's registry credentials".to_owned(),
                ));
            }
            TenantSourceKind::Oci
        } else {
            return Err((
                reason::EXCEEDS_POLICY,
                "spec.source.url: tenant plugins cannot be read from the operator's file system (file://)".to_owned(),
            ));
        };
        if self.sources.contains(&kind) {
            Ok(())
        } else {
            Err((
                reason::EXCEEDS_POLICY,
                format!(
                    "spec.source: {} sources are not allowed by the TrainerPluginPolicy (allowed: {})",
                    kind.as_str(),
                    join(self.sources.iter().map(|s| s.as_str()))
                ),
            ))
        }
    }

    /// Check what a loaded tenant plugin emits and reads against the
    /// ceiling.
    pub fn check_plugin(&self, plugin: &LoadedPlugin) -> Result<(), Refusal> {
        let exceeds = |what: String| (reason::EXCEEDS_POLICY, what);
        kinds_within("emits", plugin.allowed_emits().iter(), &self.emits).map_err(exceeds)?;
        kinds_within("reads", plugin.allowed_reads().iter(), &self.reads).map_err(exceeds)?;
        kinds_within("watches", plugin.descriptor().watches.iter(), &self.reads)
            .map_err(exceeds)?;
        Ok(())
    }
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

fn join<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = items.collect();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

/// Every kind of `listed` is in `allowed`; otherwise which are not.
fn kinds_within<'a>(
    field: &str,
    listed: impl Iterator<Item = &'a KindRef>,
    allowed: &BTreeSet<KindRef>,
) -> Result<(), String> {
    let over: Vec<String> = listed
        .filter(|k| !allowed.contains(*k))
        .map(ToString::to_string)
        .collect();
    if over.is_empty() {
        return Ok(());
    }
    let allowed: Vec<String> = allowed.iter().map(ToString::to_string).collect();
    Err(format!(
        "{field}: {} not allowed by the TrainerPluginPolicy (allowed: {})",
        over.join(", "),
        join(allowed.iter().map(String::as_str))
    ))
}

/// The most a policy's `grants` allow.
fn grants(g: &PluginGrants) -> Grants {
    let spec = ClusterTrainerPluginSpec {
        grants: Some(g.clone()),
        ..Default::default()
    };
    // `options` only fails on limits and config, neither of which is set.
    options(&spec, &Limits::default())
        .map(|o| o.grants)
        .unwrap_or_default()
}

/// Every grant of `asked` is within `max`; otherwise which is not.
fn grants_within(asked: &Grants, max: &Grants) -> Result<(), String> {
    let mut over = Vec::new();
    if asked.random && !max.random {
        over.push("random".to_owned());
    }
    if asked.clock && !max.clock {
        over.push("clock".to_owned());
    }
    if asked.status_server && !max.status_server {
        over.push("trainJobStatusServer".to_owned());
    }
    let (a, m): (&PodGrants, &PodGrants) = (&asked.pod, &max.pod);
    for (name, on, allowed) in [
        ("pod.privileged", a.privileged, m.privileged),
        ("pod.hostNamespaces", a.host_namespaces, m.host_namespaces),
        ("pod.hostPorts", a.host_ports, m.host_ports),
        (
            "pod.serviceAccountTokens",
            a.service_account_tokens,
            m.service_account_tokens,
        ),
        ("pod.dns", a.dns, m.dns),
        ("pod.resources", a.resources, m.resources),
    ] {
        if on && !allowed {
            over.push(name.to_owned());
        }
    }
    let under = |v: &str, prefixes: &[String], by_prefix: bool| {
        prefixes
            .iter()
            .any(|p| p == "*" || p == v || (by_prefix && v.starts_with(p.trim_end_matches('*'))))
    };
    for (name, asked, allowed, by_prefix) in [
        ("pod.hostPaths", &a.host_paths, &m.host_paths, true),
        ("pod.capabilities", &a.capabilities, &m.capabilities, false),
        (
            "pod.serviceAccountNames",
            &a.service_accounts,
            &m.service_accounts,
            false,
        ),
        ("pod.images", &a.images, &m.images, true),
        (
            "pod.schedulerNames",
            &a.scheduler_names,
            &m.scheduler_names,
            false,
        ),
        (
            "pod.priorityClassNames",
            &a.priority_classes,
            &m.priority_classes,
            false,
        ),
        (
            "pod.nodePlacement",
            &a.node_placement,
            &m.node_placement,
            false,
        ),
        ("pod.secretNames", &a.secret_names, &m.secret_names, false),
        (
            "pod.configMapNames",
            &a.config_map_names,
            &m.config_map_names,
            false,
        ),
        ("pod.containers", &a.containers, &m.containers, false),
    ] {
        for v in asked {
            if !under(v, allowed, by_prefix) {
                over.push(format!("{name} {v:?}"));
            }
        }
    }
    if over.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "spec.grants: {} not allowed by the TrainerPluginPolicy",
            over.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn policy(v: serde_json::Value) -> TrainerPluginPolicySpec {
        serde_json::from_value(v).unwrap()
    }

    fn spec(v: serde_json::Value) -> ClusterTrainerPluginSpec {
        serde_json::from_value(v).unwrap()
    }

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn cm(ns: &str) -> serde_json::Value {
        serde_json::json!({"source": {"configMap": {"namespace": ns, "name": "p", "key": "k"}}, "sha256": "0".repeat(64)})
    }

    #[test]
    fn no_policy_closes_every_namespace() {
        let c = Ceiling::new(None, &Limits::default());
        let (r, m) = c.options("a", &labels(&[]), &spec(cm("a"))).unwrap_err();
        assert_eq!(r, reason::NAMESPACE_NOT_ALLOWED);
        assert!(m.contains("no TrainerPluginPolicy"), "{m}");
        let unset = Ceiling::new(Some(&policy(serde_json::json!({}))), &Limits::default());
        let (_, m) = unset
            .options("a", &labels(&[]), &spec(cm("a")))
            .unwrap_err();
        assert!(m.contains("namespaceSelector is unset"), "{m}");
    }

    #[test]
    fn namespaces_by_label() {
        let c = Ceiling::new(
            Some(&policy(
                serde_json::json!({"namespaceSelector": {"matchLabels": {"tenant": "yes"}}}),
            )),
            &Limits::default(),
        );
        assert!(
            c.options("a", &labels(&[("tenant", "yes")]), &spec(cm("a")))
                .is_ok()
        );
        let (r, m) = c
            .options("b", &labels(&[("tenant", "no")]), &spec(cm("b")))
            .unwrap_err();
        assert_eq!(r, reason::NAMESPACE_NOT_ALLOWED);
        assert!(m.contains("namespace b") && m.contains("tenant=yes"), "{m}");
    }

    #[test]
    fn defaults_are_tight_and_explicit() {
        let c = Ceiling::new(
            Some(&policy(serde_json::json!({"namespaceSelector": {}}))),
            &Limits::default(),
        );
        let o = c.options("a", &labels(&[]), &spec(cm("a"))).unwrap();
        assert!(o.grants.pod.restricted);
        assert_eq!(o.limits, Some(Limits::default()));
        let phases = o.phases.unwrap();
        assert!(!phases.contains(&Phase::Status) && phases.contains(&Phase::Build));
    }

    /// Every way of asking for more than the ceiling is refused, naming
    /// the field.
    #[test]
    fn asking_for_more_is_refused_by_name() {
        let c = Ceiling::new(
            Some(&policy(serde_json::json!({
                "namespaceSelector": {},
                "maxLimits": {"timeout": "500ms", "memory": "32Mi"},
                "grants": {"random": true, "pod": {"images": ["registry.example/"]}},
            }))),
            &Limits::default(),
        );
        let ok = |extra: serde_json::Value| {
            let mut s = cm("a");
            s.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            c.options("a", &labels(&[]), &spec(s))
        };
        let cases = [
            (
                serde_json::json!({"phases": ["status"]}),
                "spec.phases: status",
            ),
            (
                serde_json::json!({"allowedKinds": [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role"}]}),
                "spec.allowedKinds: rbac.authorization.k8s.io/v1/Role",
            ),
            (
                serde_json::json!({"allowedKinds": [{"apiVersion": "v1", "kind": "Pod"}]}),
                "spec.allowedKinds: v1/Pod",
            ),
            (
                serde_json::json!({"allowedReads": [{"apiVersion": "v1", "kind": "Secret"}]}),
                "spec.allowedReads: v1/Secret",
            ),
            (
                serde_json::json!({"limits": {"timeout": "2s"}}),
                "spec.limits.timeout 2000ms exceeds",
            ),
            (
                serde_json::json!({"limits": {"memory": 64}}),
                "spec.limits.memory 64 MiB exceeds",
            ),
            (
                serde_json::json!({"grants": {"clock": true}}),
                "spec.grants: clock",
            ),
            (
                serde_json::json!({"grants": {"pod": {"privileged": true}}}),
                "pod.privileged",
            ),
            (
                serde_json::json!({"grants": {"pod": {"hostPaths": ["/"]}}}),
                "pod.hostPaths \"/\"",
            ),
            (
                serde_json::json!({"grants": {"pod": {"serviceAccountNames": ["admin"]}}}),
                "pod.serviceAccountNames",
            ),
            (
                serde_json::json!({"grants": {"pod": {"images": ["evil.example/"]}}}),
                "pod.images \"evil.example/\"",
            ),
            (
                serde_json::json!({"source": {"builtin": "torch"}}),
                "Builtin sources are not allowed",
            ),
            (
                serde_json::json!({"source": {"url": "file:///etc/passwd"}}),
                "file://",
            ),
            (
                serde_json::json!({"source": {"url": "https://example.com/p.wasm"}}),
                "Https sources are not allowed",
            ),
            (
                serde_json::json!({"source": {"url": "oci://registry.example/p:v1"}}),
                "Oci sources are not allowed",
            ),
        ];
        for (extra, want) in cases {
            let (r, m) = ok(extra.clone()).unwrap_err();
            assert_eq!(r, reason::EXCEEDS_POLICY, "{extra}: {m}");
            assert!(m.contains(want), "{extra}: {m:?} lacks {want:?}");
        }
        // Within the ceiling: accepted, limits as asked.
        let o = ok(serde_json::json!({"limits": {"timeout": "200ms"}, "grants": {"random": true, "pod": {"images": ["registry.example/team/"]}}})).unwrap();
        assert_eq!(o.limits.unwrap().timeout, Duration::from_millis(200));
        // Unset limits get the ceiling's.
        let o = ok(serde_json::json!({})).unwrap();
        assert_eq!(o.limits.unwrap().memory_bytes, 32 << 20);
        // Another namespace's ConfigMap.
        let (r, m) = c.options("a", &labels(&[]), &spec(cm("b"))).unwrap_err();
        assert_eq!(r, reason::FOREIGN_SOURCE);
        assert!(m.contains("\"b\"") && m.contains("\"a\""), "{m}");
        // The operator's registry credentials, even where Oci is allowed.
        let oci = Ceiling::new(
            Some(&policy(
                serde_json::json!({"namespaceSelector": {}, "sources": ["Oci"]}),
            )),
            &Limits::default(),
        );
        let with_secret = |secret: bool| {
            let mut source = serde_json::json!({"url": "oci://registry.example/p:v1"});
            if secret {
                source["pullSecret"] = "regcred".into();
            }
            serde_json::from_value::<ClusterTrainerPluginSpec>(serde_json::json!({"source": source, "verification": {"keys": [{"name": "k", "publicKey": "x"}]}})).unwrap()
        };
        assert!(oci.options("a", &labels(&[]), &with_secret(false)).is_ok());
        let (r, m) = oci
            .options("a", &labels(&[]), &with_secret(true))
            .unwrap_err();
        assert_eq!(r, reason::FOREIGN_SOURCE);
        assert!(m.contains("pullSecret"), "{m}");
    }

    /// Tenants trust only the policy's keys (by key, whatever they call
    /// it); under required signatures a policy listing none leaves them no
    /// key to trust; an unparsable trusted key makes the policy unusable.
    #[test]
    fn tenants_trust_only_the_policys_keys() {
        let (_, vendor) = crate::oci::cosign::generate().unwrap();
        let (_, own) = crate::oci::cosign::generate().unwrap();
        let with_keys = |keys: serde_json::Value| {
            let mut s = cm("a");
            s["verification"] = serde_json::json!({ "keys": keys });
            spec(s)
        };
        let vendor_renamed = with_keys(serde_json::json!([{"name": "mine", "publicKey": vendor}]));
        let self_made = with_keys(serde_json::json!([{"name": "mine", "publicKey": own}]));
        let unsigned = spec(cm("a"));

        let listing = Ceiling::new(
            Some(&policy(serde_json::json!({"namespaceSelector": {},
                "trustedKeys": [{"name": "vendor", "publicKey": vendor}]}))),
            &Limits::default(),
        );
        for required in [false, true] {
            assert!(listing.admit_keys(&vendor_renamed, required).is_ok());
            assert!(
                listing.admit_keys(&unsigned, required).is_ok(),
                "left to verification"
            );
            let (r, m) = listing.admit_keys(&self_made, required).unwrap_err();
            assert_eq!(r, reason::EXCEEDS_POLICY);
            assert!(
                m.contains("spec.verification.keys[mine]") && m.contains("trustedKeys"),
                "{m}"
            );
        }

        let silent = Ceiling::new(
            Some(&policy(serde_json::json!({"namespaceSelector": {}}))),
            &Limits::default(),
        );
        assert!(
            silent.admit_keys(&self_made, false).is_ok(),
            "keys are the tenant's own business"
        );
        let (r, m) = silent.admit_keys(&self_made, true).unwrap_err();
        assert_eq!(r, reason::EXCEEDS_POLICY);
        assert!(m.contains("lists no trustedKeys"), "{m}");

        let broken = Ceiling::new(
            Some(&policy(serde_json::json!({"namespaceSelector": {},
                "trustedKeys": [{"name": "bad", "publicKey": "not a key"}]}))),
            &Limits::default(),
        );
        let (_, m) = broken.options("a", &labels(&[]), &unsigned).unwrap_err();
        assert!(m.contains("trustedKeys") && m.contains("bad"), "{m}");
    }

    #[test]
    fn plugins_per_namespace_are_capped() {
        let c = Ceiling::new(
            Some(&policy(
                serde_json::json!({"namespaceSelector": {}, "maxPluginsPerNamespace": 2}),
            )),
            &Limits::default(),
        );
        assert!(c.admit_count("a", 0).is_ok() && c.admit_count("a", 1).is_ok());
        let (r, m) = c.admit_count("a", 2).unwrap_err();
        assert_eq!(r, reason::EXCEEDS_POLICY);
        assert!(m.contains("maxPluginsPerNamespace (2)"), "{m}");
        let d = Ceiling::new(Some(&policy(serde_json::json!({}))), &Limits::default());
        assert!(d.admit_count("a", DEFAULT_MAX_PER_NAMESPACE - 1).is_ok());
        assert!(d.admit_count("a", DEFAULT_MAX_PER_NAMESPACE).is_err());
    }

    #[test]
    fn an_unusable_policy_closes_every_namespace() {
        let c = Ceiling::new(
            Some(&policy(serde_json::json!({
                "namespaceSelector": {},
                "maxLimits": {"timeout": "forever"},
            }))),
            &Limits::default(),
        );
        let (r, m) = c.options("a", &labels(&[]), &spec(cm("a"))).unwrap_err();
        assert_eq!(r, reason::NAMESPACE_NOT_ALLOWED);
        assert!(m.contains("cannot be used") && m.contains("forever"), "{m}");
    }
}
