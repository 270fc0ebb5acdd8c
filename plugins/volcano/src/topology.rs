//! `podGroupPolicy.volcano.networkTopology` → the Volcano PodGroup's
//! `networkTopology`.
//!
//! Two input forms are accepted (see the API type):
//! - Volcano's own: `mode` (`hard`|`soft`, default `hard`) and
//!   `highestTierAllowed` (default 1);
//! - a portable one: `topologyKey` + `networkPolicy`
//!   (`Best-effort` → `soft`, `Strict` → `hard`). When `networkPolicy` is
//!   set it decides the mode.
//!
//! `topologyKey` (a node label such as `topology.kubernetes.io/zone`) has no
//! field on the Volcano PodGroup: Volcano expresses topology as HyperNode
//! tiers, configured cluster-side. It is kept on the runtime but not copied.
//! The defaults are written out so `render` (no API server defaulting) and
//! the cluster produce the same PodGroup.

use trainforge_sdk::PluginError;
use trainforge_sdk::api::scheduling::volcano::{
    MODE_HARD, MODE_SOFT, NetworkTopologySpec as VolcanoTopology,
};
use trainforge_sdk::api::trainer::v1alpha1::NetworkTopologySpec;
use trainforge_sdk::api::trainer::v1alpha1::constants::{
    NETWORK_POLICY_BEST_EFFORT, NETWORK_POLICY_STRICT,
};

/// Field path of the policy, for error messages.
const FIELD: &str = "podGroupPolicy.volcano.networkTopology";

/// Translate the runtime's network topology to Volcano's form.
pub fn to_volcano(nt: &NetworkTopologySpec) -> Result<VolcanoTopology, PluginError> {
    let mode = match (&nt.network_policy, &nt.mode) {
        (Some(p), _) if p.eq_ignore_ascii_case(NETWORK_POLICY_BEST_EFFORT) => MODE_SOFT,
        (Some(p), _) if p.eq_ignore_ascii_case(NETWORK_POLICY_STRICT) => MODE_HARD,
        (Some(p), _) => {
            return Err(PluginError::InvalidInput(format!(
                "{FIELD}.networkPolicy: unsupported value {p:?}: must be {NETWORK_POLICY_BEST_EFFORT:?} or {NETWORK_POLICY_STRICT:?}"
            )));
        }
        (None, Some(m)) if m == MODE_HARD => MODE_HARD,
        (None, Some(m)) if m == MODE_SOFT => MODE_SOFT,
        (None, Some(m)) => {
            return Err(PluginError::InvalidInput(format!(
                "{FIELD}.mode: unsupported value {m:?}: must be {MODE_HARD:?} or {MODE_SOFT:?}"
            )));
        }
        (None, None) => MODE_HARD,
    };
    Ok(VolcanoTopology {
        mode: Some(mode.to_owned()),
        highest_tier_allowed: Some(nt.highest_tier_allowed.unwrap_or(1)),
        highest_tier_name: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nt(
        mode: Option<&str>,
        tier: Option<i32>,
        key: Option<&str>,
        policy: Option<&str>,
    ) -> NetworkTopologySpec {
        NetworkTopologySpec {
            mode: mode.map(Into::into),
            highest_tier_allowed: tier,
            topology_key: key.map(Into::into),
            network_policy: policy.map(Into::into),
        }
    }

    fn mode_of(n: NetworkTopologySpec) -> String {
        to_volcano(&n).expect("valid").mode.unwrap_or_default()
    }

    #[test]
    fn brief_form_is_translated() {
        let v = to_volcano(&nt(
            None,
            None,
            Some("topology.kubernetes.io/zone"),
            Some("Best-effort"),
        ))
        .expect("valid");
        assert_eq!(
            v,
            VolcanoTopology {
                mode: Some("soft".into()),
                highest_tier_allowed: Some(1),
                highest_tier_name: None
            }
        );
        assert_eq!(mode_of(nt(None, None, Some("k"), Some("Strict"))), "hard");
        assert_eq!(mode_of(nt(None, None, None, Some("best-effort"))), "soft");
        // networkPolicy decides over mode.
        assert_eq!(
            mode_of(nt(Some("hard"), None, None, Some("Best-effort"))),
            "soft"
        );
    }

    #[test]
    fn volcano_form_is_copied_with_defaults() {
        let v = to_volcano(&nt(Some("soft"), Some(2), None, None)).expect("valid");
        assert_eq!(v.mode.as_deref(), Some("soft"));
        assert_eq!(v.highest_tier_allowed, Some(2));
        assert_eq!(mode_of(nt(None, None, None, None)), "hard");
    }

    #[test]
    fn unknown_values_are_errors_naming_the_field() {
        let e = to_volcano(&nt(None, None, None, Some("Loose"))).expect_err("invalid");
        assert!(
            matches!(&e, PluginError::InvalidInput(m) if m.contains("networkTopology.networkPolicy") && m.contains("Loose")),
            "{e}"
        );
        let e = to_volcano(&nt(Some("medium"), None, None, None)).expect_err("invalid");
        assert!(
            matches!(&e, PluginError::InvalidInput(m) if m.contains("networkTopology.mode")),
            "{e}"
        );
    }
}
