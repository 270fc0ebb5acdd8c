//! What a plugin's configuration grants it beyond the sandbox's defaults.

use super::pod_policy::PodGrants;

/// Capability grants from a plugin's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// `random`: serve `host.random-bytes`.
    pub random: bool,
    /// `clock`: expose the real WASI wall and monotonic clocks (otherwise
    /// both are frozen at zero).
    pub clock: bool,
    /// `trainJobStatusServer`: the status server's address and CA in the
    /// configuration (see [`super::facts`]).
    pub status_server: bool,
    /// Pod privileges beyond the baseline level the plugin may add.
    pub pod: PodGrants,
}

impl Grants {
    /// Parse grant names as the CLI takes them: capabilities (`random`,
    /// `clock`, `trainJobStatusServer`) and pod privileges (`privileged`, `hostNamespaces`,
    /// `hostPorts`, `hostPath=<prefix>`, `capability=<CAP>`,
    /// `serviceAccount=<name>`, `image=<prefix>`, `schedulerName=<name>`,
    /// `priorityClass=<name>`, `nodePlacement=<key>`, `secret=<name>`, `configMap=<name>`,
    /// `serviceAccountTokens`, `dns`, `resources`, `container=<name>`). Unknown names
    /// are returned.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> (Grants, Vec<String>) {
        let mut g = Grants::default();
        let mut unknown = Vec::new();
        for n in names {
            match n.split_once('=') {
                None => match n {
                    "random" => g.random = true,
                    "clock" => g.clock = true,
                    "trainJobStatusServer" => g.status_server = true,
                    "privileged" => g.pod.privileged = true,
                    "hostNamespaces" => g.pod.host_namespaces = true,
                    "hostPorts" => g.pod.host_ports = true,
                    "serviceAccountTokens" => g.pod.service_account_tokens = true,
                    "dns" => g.pod.dns = true,
                    "resources" => g.pod.resources = true,
                    other => unknown.push(other.to_owned()),
                },
                Some(("hostPath", v)) => g.pod.host_paths.push(v.to_owned()),
                Some(("capability", v)) => g.pod.capabilities.push(v.to_owned()),
                Some(("serviceAccount", v)) => g.pod.service_accounts.push(v.to_owned()),
                Some(("image", v)) => g.pod.images.push(v.to_owned()),
                Some(("schedulerName", v)) => g.pod.scheduler_names.push(v.to_owned()),
                Some(("priorityClass", v)) => g.pod.priority_classes.push(v.to_owned()),
                Some(("nodePlacement", v)) => g.pod.node_placement.push(v.to_owned()),
                Some(("secret", v)) => g.pod.secret_names.push(v.to_owned()),
                Some(("configMap", v)) => g.pod.config_map_names.push(v.to_owned()),
                Some(("container", v)) => g.pod.containers.push(v.to_owned()),
                Some(_) => unknown.push(n.to_owned()),
            }
        }
        (g, unknown)
    }
}
