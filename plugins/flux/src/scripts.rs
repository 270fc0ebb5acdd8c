//! The two scripts of ConfigMap `<job>-flux-entrypoint`, rendered from our
//! templates (`templates/init.sh`, `templates/entrypoint.sh`; they do what
//! upstream's do — see each file's header), and the host naming they use.
//!
//! Every pod of the trainer job `node` is a Flux broker; replicated job
//! `node` has one replica whose pods are `<job>-node-0-<i>`, so the brokers
//! are the hostlist `<job>-node-0-[0-<N-1>]` and the lead broker (the one
//! that runs the command) is `<job>-node-0-0`.

use std::collections::BTreeMap;

use trainforge_sdk::api::trainer::v1alpha1::constants::NODE;

const INIT_TEMPLATE: &str = include_str!("templates/init.sh");
const ENTRYPOINT_TEMPLATE: &str = include_str!("templates/entrypoint.sh");

/// Where the init container's image holds the Flux view.
pub const FLUX_ROOT: &str = "/opt/view";
/// Port the brokers bind and connect to.
pub const BROKER_PORT: u16 = 8050;

/// `start` alone when `size` is 1, else `start-<start+size-1>` (upstream's
/// `generateRange`, kept as it is for sizes below 1: `0--1` for 0).
pub fn range(size: i64, start: i64) -> String {
    if size == 1 {
        start.to_string()
    } else {
        format!("{start}-{}", start + size - 1)
    }
}

/// The brokers' hostlist: `<prefix>-node-0-[<range(size)>]`.
pub fn hostlist(prefix: &str, size: i64) -> String {
    format!("{prefix}-{NODE}-0-[{}]", range(size, 0))
}

/// The lead broker's host name: `<job>-node-0-0`.
pub fn lead_host(job: &str) -> String {
    format!("{job}-{NODE}-0-0")
}

/// What a rendering needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params<'a> {
    /// TrainJob name (the pods' subdomain too).
    pub job: &'a str,
    /// TrainJob namespace.
    pub namespace: &'a str,
    /// Nodes (`trainer.numNodes`).
    pub nodes: i64,
    /// Tasks per node (`trainer.numProcPerNode`, else the policy's).
    pub tasks: i64,
    /// GPUs per node (0: none).
    pub gpus: i64,
    /// `FLUX_NETWORK_DEVICE`.
    pub network_device: &'a str,
    /// `FLUX_QUEUE_POLICY`.
    pub queue_policy: &'a str,
}

impl Params<'_> {
    /// The `flux run` flags: `-N <nodes> -n <tasks × nodes>`, plus
    /// `-g <gpus>` (GPUs per task) with GPUs.
    pub fn flags(&self) -> String {
        let mut flags = format!(
            "-N {} -n {}",
            self.nodes,
            self.tasks.saturating_mul(self.nodes)
        );
        if self.gpus > 0 {
            flags.push_str(&format!(" -g {}", self.gpus));
        }
        flags
    }

    /// The resources of one broker for `flux R encode`:
    /// `--cores=<range(tasks)>`, plus `--gpu=<range(gpus)>` with GPUs.
    pub fn resources(&self) -> String {
        let mut spec = format!("--cores={}", range(self.tasks, 0));
        if self.gpus > 0 {
            spec.push_str(&format!(" --gpu={}", range(self.gpus, 0)));
        }
        spec
    }

    /// The broker configuration (`broker.toml`): bind
    /// `tcp://<device>:%p`, connect
    /// `tcp://%h.<job>.<namespace>.svc.cluster.local:%p`, the hostlist, the
    /// queue policy.
    pub fn broker_config(&self) -> String {
        let bind = format!("tcp://{}:%p", self.network_device);
        let connect = format!(
            "tcp://%h.{}.{}.svc.cluster.local:%p",
            self.job, self.namespace
        );
        let hosts = hostlist(self.job, self.nodes);
        format!(
            "[access]\n\
             allow-guest-user = true\n\
             allow-root-owner = true\n\
             \n\
             # Resources of every broker, written by flux-R(1) in the entrypoint.\n\
             [resource]\n\
             path = \"/mnt/flux/config/etc/flux/system/R\"\n\
             \n\
             [bootstrap]\n\
             curve_cert = \"/mnt/flux/config/etc/curve/curve.cert\"\n\
             default_port = {BROKER_PORT}\n\
             default_bind = \"{}\"\n\
             default_connect = \"{}\"\n\
             hosts = [\n\
             {{ host=\"{}\"}},\n\
             ]\n\
             \n\
             [archive]\n\
             dbpath = \"/mnt/flux/config/var/lib/flux/job-archive.sqlite\"\n\
             period = \"1m\"\n\
             busytimeout = \"50s\"\n\
             \n\
             [sched-fluxion-qmanager]\n\
             queue-policy = \"{}\"\n",
            toml_escape(&bind),
            toml_escape(&connect),
            toml_escape(&hosts),
            toml_escape(self.queue_policy),
        )
    }

    /// `init.sh`, run by the init container `flux-installer`.
    pub fn init_script(&self) -> String {
        let hosts = hostlist(self.job, self.nodes);
        let broker = self.broker_config();
        render(
            INIT_TEMPLATE,
            &BTreeMap::from([
                ("hosts", hosts.as_str()),
                ("broker_config", broker.trim_end()),
            ]),
        )
    }

    /// `entrypoint.sh`, the command of the trainer container `node`.
    pub fn entrypoint_script(&self) -> String {
        let (resources, lead, flags) = (self.resources(), lead_host(self.job), self.flags());
        render(
            ENTRYPOINT_TEMPLATE,
            &BTreeMap::from([
                ("resources", resources.as_str()),
                ("lead_host", lead.as_str()),
                ("flags", flags.as_str()),
            ]),
        )
    }
}

/// The body of a TOML basic string: `\` and `"` escaped, control
/// characters as `\uXXXX`, so that a setting from the TrainJob's env
/// cannot break out of its string.
fn toml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// `template` with each `{{name}}` of `values` replaced by its value, in
/// one pass (a value is never scanned again); any other `{{…}}` stays.
fn render(template: &str, values: &BTreeMap<&str, &str>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        match after
            .find("}}")
            .and_then(|close| values.get(&after[..close]).map(|v| (close, v)))
        {
            Some((close, value)) => {
                out.push_str(value);
                rest = &after[close + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}
