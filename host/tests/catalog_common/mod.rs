//! Helpers of the `ClusterTrainerPlugin` controller's tests: conditions,
//! and polling a CR until its status for the current generation says
//! something.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use kube::api::Api;
use trainforge_api::trainforge::v1alpha1::ClusterTrainerPlugin;

/// How long a CR may take to say what a test waits for.
pub const WAIT: Duration = Duration::from_secs(120);

/// `(status, reason, message)` of condition `t`, if the CR has it.
pub fn condition<'a>(p: &'a ClusterTrainerPlugin, t: &str) -> Option<(&'a str, &'a str, &'a str)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// The CR's status, for failure messages.
pub fn status_of(p: &ClusterTrainerPlugin) -> String {
    serde_json::to_string_pretty(&p.status).unwrap()
}

/// Poll the CR until `pred` holds for the current generation.
pub async fn wait_cr(
    api: &Api<ClusterTrainerPlugin>,
    name: &str,
    what: &str,
    pred: impl Fn(&ClusterTrainerPlugin) -> bool,
) -> ClusterTrainerPlugin {
    let deadline = Instant::now() + WAIT;
    loop {
        let p = api.get(name).await.unwrap();
        let current =
            p.status.as_ref().and_then(|s| s.observed_generation) == p.metadata.generation;
        if current && pred(&p) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {name}: {what}; status: {}",
            status_of(&p)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
