//! `spec.podGroupPolicy` of a runtime: gang scheduling with scheduler-plugins
//! coscheduling, Volcano, or a backend owned by an out-of-tree plugin (kept
//! verbatim in [`PodGroupPolicy::other`], e.g. `kai: {queue: team-a}`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cel;

/// PodGroupPolicy selects and configures the gang-scheduling backend.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    transform = crate::schema::preserve_unknown_fields,
    extend("x-kubernetes-validations" = [cel::ONE_POD_GROUP_POLICY])
)]
pub struct PodGroupPolicy {
    /// scheduler-plugins coscheduling (`scheduling.x-k8s.io` PodGroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coscheduling: Option<CoschedulingPodGroupPolicySource>,

    /// Volcano (`scheduling.volcano.sh` PodGroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volcano: Option<VolcanoPodGroupPolicySource>,

    /// Policies no builtin plugin knows, kept verbatim for out-of-tree plugins.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: BTreeMap<String, Value>,
}

/// CoschedulingPodGroupPolicySource configures the coscheduling PodGroup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingPodGroupPolicySource {
    /// How long, in seconds, the gang may wait to be scheduled (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 60))]
    pub schedule_timeout_seconds: Option<i32>,
}

/// VolcanoPodGroupPolicySource configures the Volcano PodGroup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPodGroupPolicySource {
    /// Network topology constraints of the gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopologySpec>,
}

/// NetworkTopologySpec accepts Volcano's form (`mode`, `highestTierAllowed`)
/// and a portable form (`topologyKey`, `networkPolicy`); when
/// `networkPolicy` is set it decides the mode (`Best-effort` → `soft`,
/// `Strict` → `hard`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopologySpec {
    /// `hard` (must fit the tier) or `soft` (best effort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "hard", "enum" = ["hard", "soft"]))]
    pub mode: Option<String>,

    /// Highest network tier the gang may span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub highest_tier_allowed: Option<i32>,

    /// Node label whose value identifies a topology domain (a portable
    /// alternative to Volcano's network tiers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 316))]
    pub topology_key: Option<String>,

    /// `Best-effort` or `Strict`: a portable form of `mode`; when set it
    /// decides the mode (`Best-effort` → `soft`, `Strict` → `hard`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Best-effort", "Strict"]))]
    pub network_policy: Option<String>,
}
