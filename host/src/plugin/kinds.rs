//! Which kinds a plugin may emit or read, whatever it declares.
//!
//! A plugin may emit an object only if its kind is
//! 1. declared in the plugin's `emits`,
//! 2. allowed by the administrator (`allowedKinds`, when set),
//! 3. on the default allow-list ([`DEFAULT_EMITS`]: what the builtins and
//!    the gang backends need: ConfigMaps, Secrets, JobSets, PodGroups), or
//!    listed explicitly by the administrator: a kind the API grows is not
//!    emitted by default (an `autoscaling/v2` HorizontalPodAutoscaler can
//!    scale anyone's Deployment);
//! 4. not on the host-wide deny set ([`emit_rule`]): never RBAC, admission,
//!    CRDs, API services, certificates, authentication/authorization,
//!    leases (`coordination.k8s.io`), flow control, storage and node
//!    classes, scheduling priorities, Events, or anything of
//!    `trainer.kubeflow.org` and `trainforge.dev`; Pods, ServiceAccounts,
//!    Services, Endpoints, workload controllers, quotas and network
//!    policies only when the administrator lists them explicitly;
//! 5. namespaced. The operator decides scope by API discovery when it
//!    admits a plugin; [`KNOWN_CLUSTER_SCOPED`] is only the fallback of
//!    contexts without a cluster (`trainforge render`, `plugin run`).
//!
//! Reads (`host.get-object`) follow the same allow-list idea: declared, then
//! narrowed by `allowedReads`; Secrets and cluster-scoped kinds only when
//! `allowedReads` lists them explicitly ([`read_needs_explicit_grant`]), and
//! namespaced reads only inside the TrainJob's namespace.

use kube::api::GroupVersionKind;
use trainforge_api::plugin::KindRef;

/// The decision of the host-wide rules for one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindRule {
    /// Allowed when declared (and not narrowed away by the administrator).
    Allowed,
    /// Allowed only when the administrator lists the kind explicitly.
    Explicit(&'static str),
    /// Never, whatever anyone declares or allows.
    Never(&'static str),
}

/// API groups whose kinds a plugin may never emit.
const NEVER_GROUPS: &[(&str, &str)] = &[
    ("rbac.authorization.k8s.io", "RBAC"),
    ("admissionregistration.k8s.io", "admission control"),
    ("apiextensions.k8s.io", "API extensions"),
    ("apiregistration.k8s.io", "API registration"),
    ("certificates.k8s.io", "certificates"),
    ("authentication.k8s.io", "authentication"),
    ("authorization.k8s.io", "authorization"),
    ("coordination.k8s.io", "leases (leader election)"),
    ("flowcontrol.apiserver.k8s.io", "API priority and fairness"),
    ("internal.apiserver.k8s.io", "API server internals"),
    ("storage.k8s.io", "storage classes and attachments"),
    ("node.k8s.io", "runtime classes"),
    ("scheduling.k8s.io", "priority classes"),
    ("events.k8s.io", "Events"),
    ("trainer.kubeflow.org", "TrainJobs and runtimes"),
    ("trainforge.dev", "plugin configuration"),
];

/// Core (`v1`) kinds a plugin may never emit.
const NEVER_CORE: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ComponentStatus",
    "Binding",
    "Event",
];

/// Kinds allowed only when the administrator lists them: they run code,
/// change identity or network exposure, or govern the whole namespace.
const EXPLICIT: &[(&str, &str, &str)] = &[
    ("", "Pod", "runs containers outside the TrainJob's JobSet"),
    ("", "PodTemplate", "pod templates"),
    ("", "ReplicationController", "runs pods"),
    ("", "ServiceAccount", "identities"),
    ("", "Service", "network exposure"),
    ("", "Endpoints", "network routing"),
    ("", "ResourceQuota", "namespace quotas"),
    ("", "LimitRange", "namespace limits"),
    ("", "PersistentVolumeClaim", "storage"),
    ("apps", "*", "runs pods"),
    ("batch", "*", "runs pods"),
    ("discovery.k8s.io", "*", "network routing"),
    ("networking.k8s.io", "*", "network exposure"),
    ("policy", "*", "disruption budgets"),
    ("resource.k8s.io", "*", "device claims"),
];

/// Kinds a plugin may emit without the administrator listing them
/// (`group`, `kind`; any version): the objects the builtins build (the
/// TrainJob's JobSet, MPI's ConfigMap and Secret) and the PodGroups of the
/// gang schedulers the builtins serve (coscheduling, Volcano). Everything
/// else needs `allowedKinds` (or a tenant ceiling's) to list it.
pub const DEFAULT_EMITS: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("jobset.x-k8s.io", "JobSet"),
    ("scheduling.x-k8s.io", "PodGroup"),
    ("scheduling.volcano.sh", "PodGroup"),
];

/// Cluster-scoped kinds known without asking the API server.
pub const KNOWN_CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "APIService",
    "StorageClass",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "PriorityClass",
    "RuntimeClass",
    "IngressClass",
    "ComponentStatus",
    "CertificateSigningRequest",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "ClusterTrainingRuntime",
    "ClusterTrainerPlugin",
    "ClusterQueue",
    "ResourceFlavor",
    "Queue",
    "DeviceClass",
    "ResourceSlice",
];

/// The group/version/kind of a kind reference (`v1` is the core group).
pub fn gvk(kind: &KindRef) -> GroupVersionKind {
    let (group, version) = kind
        .api_version
        .split_once('/')
        .unwrap_or(("", kind.api_version.as_str()));
    GroupVersionKind::gvk(group, version, &kind.kind)
}

/// The host-wide rule for emitting `kind`.
pub fn emit_rule(kind: &KindRef) -> KindRule {
    let group = kind.group();
    if let Some((_, what)) = NEVER_GROUPS.iter().find(|(g, _)| *g == group) {
        return KindRule::Never(what);
    }
    if group.is_empty() && NEVER_CORE.contains(&kind.kind.as_str()) {
        return KindRule::Never("cluster objects and Events");
    }
    if let Some((_, _, why)) = EXPLICIT
        .iter()
        .find(|(g, k, _)| *g == group && (*k == "*" || *k == kind.kind))
    {
        return KindRule::Explicit(why);
    }
    if DEFAULT_EMITS
        .iter()
        .any(|(g, k)| *g == group && *k == kind.kind)
    {
        return KindRule::Allowed;
    }
    KindRule::Explicit("not among the kinds plugins emit by default")
}

/// Whether `kind` is cluster-scoped by the fallback list.
pub fn known_cluster_scoped(kind: &KindRef) -> bool {
    KNOWN_CLUSTER_SCOPED.contains(&kind.kind.as_str())
}

/// Why reading `kind` needs `allowedReads` to list it, if it does.
pub fn read_needs_explicit_grant(kind: &KindRef, namespaced: bool) -> Option<&'static str> {
    if !namespaced {
        return Some("it is cluster-scoped");
    }
    (kind.group().is_empty() && kind.kind == "Secret").then_some("Secrets hold credentials")
}

/// The declared kinds an administrator's list keeps (all of them when
/// `explicit` is `None`), each with whether that list names it.
fn narrowed<'a>(
    declared: &'a [KindRef],
    explicit: Option<&'a [KindRef]>,
) -> impl Iterator<Item = (&'a KindRef, bool)> {
    declared.iter().filter_map(move |k| match explicit {
        None => Some((k, false)),
        Some(list) => list.contains(k).then_some((k, true)),
    })
}

/// The kinds a plugin may emit: those it declared, narrowed by the
/// administrator's list (`explicit`: `Some` when the administrator set one),
/// each checked against the host-wide rules. `Err` names the first declared
/// (and not narrowed-away) kind the rules refuse, and why.
pub fn effective_emits(
    declared: &[KindRef],
    explicit: Option<&[KindRef]>,
) -> Result<Vec<KindRef>, String> {
    narrowed(declared, explicit)
        .map(|(k, listed)| {
            match emit_rule(k) {
                KindRule::Never(what) => {
                    return Err(format!("declares emits {k}: plugins may never emit {what}"));
                }
                KindRule::Explicit(why) if !listed => {
                    return Err(format!(
                        "declares emits {k} ({why}): allowed only when spec.allowedKinds lists it"
                    ));
                }
                _ => {}
            }
            if known_cluster_scoped(k) {
                return Err(format!(
                    "declares emits {k}, which is cluster-scoped: plugins emit namespaced objects only"
                ));
            }
            Ok(k.clone())
        })
        .collect()
}

/// The kinds a plugin may read: declared, narrowed by `allowedReads` when
/// set. Secrets and (known) cluster-scoped kinds must be listed there
/// explicitly; without a list they are refused with the reason.
pub fn effective_reads(
    declared: &[KindRef],
    explicit: Option<&[KindRef]>,
) -> Result<Vec<KindRef>, String> {
    narrowed(declared, explicit)
        .map(|(k, listed)| {
            if !listed && let Some(why) = read_needs_explicit_grant(k, !known_cluster_scoped(k)) {
                return Err(format!(
                    "declares reads {k} ({why}): allowed only when spec.allowedReads lists it"
                ));
            }
            Ok(k.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(a: &str, b: &str) -> KindRef {
        KindRef::new(a, b)
    }

    #[test]
    fn rules() {
        for never in [
            k("rbac.authorization.k8s.io/v1", "Role"),
            k("coordination.k8s.io/v1", "Lease"),
            k("trainer.kubeflow.org/v1alpha1", "TrainJob"),
            k("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"),
            k("trainforge.dev/v1alpha1", "ClusterTrainerPlugin"),
            k("v1", "Namespace"),
            k("v1", "Event"),
            k("events.k8s.io/v1", "Event"),
        ] {
            assert!(matches!(emit_rule(&never), KindRule::Never(_)), "{never}");
        }
        for explicit in [
            k("v1", "Pod"),
            k("v1", "ServiceAccount"),
            k("apps/v1", "Deployment"),
            k("batch/v1", "Job"),
            k("v1", "Service"),
            // Not on the default allow-list: listed by the administrator.
            k("autoscaling/v2", "HorizontalPodAutoscaler"),
            k("example.com/v1", "Widget"),
            k("monitoring.coreos.com/v1", "ServiceMonitor"),
        ] {
            assert!(
                matches!(emit_rule(&explicit), KindRule::Explicit(_)),
                "{explicit}"
            );
        }
        for ok in [
            k("v1", "ConfigMap"),
            k("v1", "Secret"),
            k("jobset.x-k8s.io/v1alpha2", "JobSet"),
            k("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
            k("scheduling.volcano.sh/v1beta1", "PodGroup"),
        ] {
            assert_eq!(emit_rule(&ok), KindRule::Allowed, "{ok}");
        }
    }

    #[test]
    fn effective_emits_narrow_and_refuse() {
        let declared = [k("v1", "ConfigMap"), k("v1", "Pod")];
        let e = effective_emits(&declared, None).unwrap_err();
        assert!(e.contains("v1/Pod") && e.contains("allowedKinds"), "{e}");
        let only_cm = [k("v1", "ConfigMap")];
        assert_eq!(
            effective_emits(&declared, Some(&only_cm)).unwrap(),
            only_cm.to_vec()
        );
        assert_eq!(
            effective_emits(&declared, Some(&declared)).unwrap().len(),
            2
        );
        let lease = [k("coordination.k8s.io/v1", "Lease")];
        assert!(effective_emits(&lease, Some(&lease)).is_err(), "never");
        let cluster = [k("example.com/v1", "ClusterQueue")];
        assert!(
            effective_emits(&cluster, Some(&cluster))
                .unwrap_err()
                .contains("cluster-scoped")
        );
        // A kind off the default allow-list needs the administrator's list.
        let hpa = [k("autoscaling/v2", "HorizontalPodAutoscaler")];
        let e = effective_emits(&hpa, None).unwrap_err();
        assert!(
            e.contains("by default") && e.contains("allowedKinds"),
            "{e}"
        );
        assert_eq!(effective_emits(&hpa, Some(&hpa)).unwrap(), hpa.to_vec());
    }

    #[test]
    fn effective_reads_need_explicit_secrets_and_cluster_kinds() {
        let secret = [k("v1", "Secret")];
        assert!(effective_reads(&secret, None).is_err());
        assert_eq!(effective_reads(&secret, Some(&secret)).unwrap().len(), 1);
        let pc = [k("scheduling.k8s.io/v1", "PriorityClass")];
        assert!(
            effective_reads(&pc, None)
                .unwrap_err()
                .contains("cluster-scoped")
        );
        assert!(effective_reads(&pc, Some(&pc)).is_ok());
        let cm = [k("v1", "ConfigMap")];
        assert_eq!(effective_reads(&cm, None).unwrap(), cm.to_vec());
        assert!(effective_reads(&cm, Some(&[])).unwrap().is_empty());
    }
}
