//! The flags of `trainforge operator`. Rule: every flag is listed under a
//! heading of `--help` (the subject it configures), none in the bare
//! "Options" list.

use std::path::PathBuf;

use clap::Args;

/// Flags of `trainforge operator`.
#[derive(Debug, Clone, Args)]
pub struct OperatorArgs {
    /// Run only while holding the `trainforge-operator` Lease (for more than one replica).
    #[arg(long, help_heading = "Leader election")]
    pub leader_elect: bool,
    /// Namespace of the Lease (default: `$POD_NAMESPACE`, else `trainforge-system`).
    #[arg(long, help_heading = "Leader election")]
    pub lease_namespace: Option<String>,
    /// Where `/metrics` is served (`0` disables).
    #[arg(long, default_value = ":8080", help_heading = "Metrics and health")]
    pub metrics_bind_address: String,
    /// Serve `/metrics` over HTTPS, with the serving certificate of the
    /// webhooks, on the metrics address alone (the probe address then
    /// answers `/healthz` and `/readyz` only).
    #[arg(long, help_heading = "Metrics and health")]
    pub metrics_secure: bool,
    /// Serve `/metrics` only to callers whose bearer token the API server
    /// authenticates (`TokenReview`) and who may `get` the non-resource URL
    /// `/metrics` (`SubjectAccessReview`): 401, 403 otherwise.
    #[arg(long, requires = "metrics_secure", help_heading = "Metrics and health")]
    pub metrics_auth: bool,
    /// Seconds the drain after SIGTERM may take before the process exits
    /// anyway (`0`: no deadline); keep it below the pod's
    /// `terminationGracePeriodSeconds` (30 in the manifests).
    #[arg(long, default_value_t = 25, help_heading = "Shutdown")]
    pub shutdown_timeout_seconds: u64,
    /// Where `/healthz` and `/readyz` are served (`0` disables).
    #[arg(long, default_value = ":8081", help_heading = "Metrics and health")]
    pub health_probe_bind_address: String,
    /// Directory for precompiled plugin artifacts (none: compile in memory).
    #[arg(long, help_heading = "Plugins")]
    pub plugin_cache_dir: Option<PathBuf>,
    /// Precompiled builtin plugins shipped with the binary
    /// (`trainforge plugin precompile --out DIR`), read before compiling
    /// anything; default `trainforge-artifacts` next to the executable when
    /// that directory exists.
    #[arg(long, conflicts_with = "no_plugin_artifacts", help_heading = "Plugins")]
    pub plugin_artifacts_dir: Option<PathBuf>,
    /// Compile every plugin, ignoring shipped artifacts.
    #[arg(long, help_heading = "Plugins")]
    pub no_plugin_artifacts: bool,
    /// Serve the builtin plugin set and ignore `ClusterTrainerPlugin`s.
    #[arg(long, help_heading = "Plugins")]
    pub builtin_plugins: bool,
    /// Reconcile every TrainJob at least this often (seconds).
    #[arg(long, default_value_t = 600, help_heading = "Reconciling")]
    pub resync_seconds: u64,
    /// TrainJobs reconciled at once (turns go round-robin across
    /// namespaces).
    #[arg(long, default_value_t = 5, help_heading = "Reconciling")]
    pub concurrency: u16,
    /// MiB of objects the TrainJobs of one namespace may write a minute
    /// (0: unlimited); a TrainJob over it is `Blocked`
    /// (`WriteRateLimited`) until its namespace's budget allows.
    #[arg(long, default_value_t = 32, help_heading = "Reconciling")]
    pub namespace_write_mib_per_minute: u64,
    /// Changes of a TrainJob's child objects (its JobSet's status, …)
    /// within this many milliseconds trigger one reconcile, so one status
    /// write (0: one per change); the change that makes a JobSet's jobs all
    /// ready is passed on at once.
    #[arg(long, default_value_t = 1000, help_heading = "Reconciling")]
    pub child_batch_ms: u64,
    /// Watch TrainJobs of this namespace only.
    #[arg(long, help_heading = "Reconciling")]
    pub namespace: Option<String>,
    /// Deadline of compiling one plugin component (seconds; the compiler
    /// runs in a child process that is killed when it passes).
    #[arg(long, default_value_t = 60, help_heading = "Plugins")]
    pub plugin_compile_timeout_seconds: u64,
    /// Memory the compiler of one plugin component may use (MiB).
    #[arg(long, default_value_t = 1024, help_heading = "Plugins")]
    pub plugin_compile_memory_mib: u64,
    /// A network (CIDR) `https://` plugin sources may reach although it is
    /// loopback, link-local, private or otherwise special (repeatable; e.g.
    /// an in-cluster file server's Service network). Public addresses are
    /// always allowed.
    #[arg(
        long = "plugin-fetch-allow-cidr",
        value_name = "CIDR",
        help_heading = "Plugin sources (https://, oci://)"
    )]
    pub plugin_fetch_allow_cidrs: Vec<ipnet::IpNet>,
    /// CA certificates (PEM) trusted for `https://` plugin sources and
    /// `oci://` registries besides the system's.
    #[arg(long, help_heading = "Plugin sources (https://, oci://)")]
    pub plugin_fetch_ca_file: Option<PathBuf>,
    /// A registry (`host[:port]`) `oci://` plugin sources are pulled from
    /// over plain HTTP instead of HTTPS (repeatable; development and
    /// in-cluster registries). Its address must still be allowed.
    #[arg(
        long = "plugin-registry-plain-http",
        value_name = "HOST[:PORT]",
        help_heading = "Plugin sources (https://, oci://)"
    )]
    pub plugin_registry_plain_http: Vec<String>,
    /// Refuse every plugin that is not builtin unless a key of its
    /// `spec.verification` signed it (a spec without one is refused with
    /// `SignatureRequired`).
    #[arg(long, help_heading = "Plugin sources (https://, oci://)")]
    pub require_plugin_signatures: bool,
    /// TrainJobs of one namespace reconciled at once when tenant plugins
    /// (`TrainerPlugin`s) apply to them: a namespace with slow plugins
    /// never holds more reconcile workers than this.
    #[arg(
        long,
        default_value_t = 1,
        help_heading = "Tenant plugins (TrainerPlugin)"
    )]
    pub tenant_concurrency: u16,
    /// Upstream's feature gates, `Name=true,…` (each off by default, as
    /// upstream's): `TrainJobFailurePolicy`.
    #[arg(long, default_value = "", help_heading = "Reconciling")]
    pub feature_gates: crate::pipeline::features::Features,
    /// The admission webhooks.
    #[command(flatten, next_help_heading = "Admission webhooks")]
    pub admission: crate::admission::serve::AdmissionArgs,
    /// The TrainJob status server.
    #[command(flatten, next_help_heading = "TrainJob status server (progress)")]
    pub status_server: crate::statusserver::StatusServerArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module rule: `--help` shows every flag under a heading.
    #[test]
    fn every_flag_has_a_help_heading() {
        let cmd = OperatorArgs::augment_args(clap::Command::new("operator"));
        let bare: Vec<String> = cmd
            .get_arguments()
            .filter(|a| a.get_long().is_some() && a.get_help_heading().is_none())
            .filter_map(|a| a.get_long().map(str::to_owned))
            .collect();
        assert!(bare.is_empty(), "flags without a heading: {bare:?}");
        assert!(
            cmd.get_arguments()
                .any(|a| a.get_long() == Some("webhook-bind-address")
                    && a.get_help_heading() == Some("Admission webhooks")),
            "the flattened admission flags have their heading"
        );
    }

    /// `--metrics-auth` needs `--metrics-secure`; secure metrics need an
    /// address of their own, refused before anything starts.
    #[test]
    fn secure_metrics_flags_are_checked() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: OperatorArgs,
        }
        let parse = |flags: &[&str]| {
            <Cli as clap::Parser>::try_parse_from(
                std::iter::once("operator").chain(flags.iter().copied()),
            )
            .map(|c| c.args)
        };
        let e = parse(&["--metrics-auth"]).err().unwrap();
        assert!(e.to_string().contains("--metrics-secure"), "{e}");
        let same = parse(&[
            "--metrics-secure",
            "--metrics-bind-address=:9443",
            "--health-probe-bind-address=:9443",
        ])
        .unwrap();
        let e = super::super::stages::endpoints(&same).unwrap_err();
        assert!(
            e.to_string().contains("must differ (both 0.0.0.0:9443)"),
            "{e}"
        );
        // Plain metrics may share the probe address.
        let plain = parse(&[
            "--metrics-bind-address=:9443",
            "--health-probe-bind-address=:9443",
        ])
        .unwrap();
        assert!(super::super::stages::endpoints(&plain).is_ok());
        let apart = parse(&[
            "--metrics-secure",
            "--metrics-auth",
            "--metrics-bind-address=:8443",
        ])
        .unwrap();
        let (probes, metrics) = super::super::stages::endpoints(&apart).unwrap();
        assert_eq!(
            (probes.unwrap().port(), metrics.unwrap().port()),
            (8081, 8443)
        );
    }
}
