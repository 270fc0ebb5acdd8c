//! The operator's Prometheus metrics (`prometheus-client`, OpenMetrics text).
//!
//! One [`Metrics`] per process, shared as `Arc<Metrics>` by the controllers,
//! the plugin runtime (through [`crate::plugin::CallObserver`]) and the
//! `/metrics` endpoint ([`super::health`]). Families (counters are encoded
//! with their `_total` suffix):
//!
//! | family | labels | what |
//! |---|---|---|
//! | `trainforge_reconcile_total` | `controller` | finished reconciles |
//! | `trainforge_reconcile_errors_total` | `controller`, `reason` | failed reconciles |
//! | `trainforge_reconcile_duration_seconds` | `controller` | reconcile latency (histogram) |
//! | `trainforge_apply_errors_total` | `kind` | server-side-apply errors |
//! | `trainforge_api_writes_total` | `verb`, `kind` | every write the operator makes |
//! | `trainforge_noop_resyncs_total` | – | reconciles that wrote nothing |
//! | `trainforge_renders_reused_total` | – | reconciles that reused the TrainJob's last render (no plugin reconcile phase or build called) |
//! | `trainforge_plugin_swap_trainjobs_total` | – | unfinished TrainJobs queued for a re-render by a change of the plugin set in service |
//! | `trainforge_plugin_swap_rerendered_trainjobs_total` | – | of those, TrainJobs rendered again with the new set |
//! | `trainforge_plugin_swap_remaining_trainjobs` | – | TrainJobs the latest change of the plugin set has still to re-render (gauge) |
//! | `trainforge_plugins_not_serving` | – | configured `ClusterTrainerPlugin`s with no version in service (gauge; `/readyz?verbose` and their status say why) |
//! | `trainforge_trainjob_create_to_jobset_ready_seconds` | – | TrainJob creation → JobSet ready (histogram) |
//! | `trainforge_plugin_calls_total` | `plugin`, `phase` | plugin calls |
//! | `trainforge_plugin_call_duration_seconds` | `plugin`, `phase` | plugin call latency, 1 µs – 4 s buckets |
//! | `trainforge_plugin_failures_total` | `plugin`, `phase`, `reason` | failed plugin calls |
//! | `trainforge_plugin_memory_high_water_bytes` | `plugin` | largest guest memory seen (gauge) |
//! | `trainforge_plugin_loads_total` | `plugin`, `outcome`, `reason` | plugin loads: where the code came from (`compiled`, `memory`, `disk`, `shipped`) or `failed` with the reason (`reason` empty otherwise) |
//! | `trainforge_plugin_load_duration_seconds` | `outcome` | plugin load latency (compile or cache hit, checks, `describe`), 1 ms – 65 s buckets |
//! | `trainforge_tenant_plugin_calls_total` | `namespace`, `plugin`, `phase` | calls of tenant plugins (`TrainerPlugin`s; the families above name them `<namespace>/<plugin>`) |
//! | `trainforge_tenant_plugin_failures_total` | `namespace`, `plugin`, `phase`, `reason` | failed calls of tenant plugins |
//! | `trainforge_admission_requests_total` | `webhook`, `operation`, `result` | admission reviews answered (`allowed`, `denied`, `error`) |
//! | `trainforge_admission_duration_seconds` | `webhook` | admission review latency (histogram) |
//! | `trainforge_admission_plugin_calls_total` | `plugin`, `result` | plugin `validate` calls at admission (`ok`, `denied`, `failed`, `ignored`) |
//! | `trainforge_admission_plugin_failures_total` | `plugin`, `reason` | failed admission calls, by the plugin error's reason (`Timeout`, `Trap`, `MemoryLimit`, `InvalidOutput`, ...) |
//! | `trainforge_admission_plugin_duration_seconds` | `plugin` | plugin `validate` latency at admission (histogram) |

use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Content type of [`Metrics::encode`]'s output.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Labels `{controller}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

/// Labels `{controller, reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerReasonLabels {
    controller: String,
    reason: String,
}

/// Labels `{kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

/// Labels `{verb, kind}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    verb: String,
    kind: String,
}

/// Labels `{plugin, phase}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginPhaseLabels {
    plugin: String,
    phase: String,
}

/// Labels `{plugin, phase, reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginFailureLabels {
    plugin: String,
    phase: String,
    reason: String,
}

/// Labels `{plugin, outcome, reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLoadLabels {
    plugin: String,
    outcome: String,
    reason: String,
}

/// Labels `{outcome}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

/// Labels `{namespace, plugin, phase}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantPhaseLabels {
    namespace: String,
    plugin: String,
    phase: String,
}

/// Labels `{namespace, plugin, phase, reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantFailureLabels {
    namespace: String,
    plugin: String,
    phase: String,
    reason: String,
}

/// Labels `{plugin}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

/// Labels `{webhook, operation, result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    webhook: String,
    operation: String,
    result: String,
}

/// Labels `{code}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

/// Labels `{webhook}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: String,
}

/// Labels `{plugin, result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginResultLabels {
    plugin: String,
    result: String,
}

/// Labels `{plugin, reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginReasonLabels {
    plugin: String,
    reason: String,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

/// Reconcile latency buckets: 1 ms … ~16 s.
fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Plugin call latency buckets: 1 µs … ~4.2 s (×4).
fn plugin_call_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-6, 4.0, 12))
}

/// Plugin load latency buckets: 1 ms … ~65 s (×2): a cached artifact in
/// milliseconds, a compile in seconds up to the compile deadline.
fn plugin_load_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-3, 2.0, 17))
}

/// The operator's metrics registry and typed families.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ControllerReasonLabels, Counter>,
    reconcile_duration: HistogramFamily<ControllerLabels>,
    apply_errors: Family<KindLabels, Counter>,
    api_writes: Family<WriteLabels, Counter>,
    noop_resyncs: Counter,
    renders_reused: Counter,
    swap_trainjobs: Counter,
    swap_rerendered: Counter,
    swap_remaining: Gauge,
    plugins_not_serving: Gauge,
    reconciles_waiting: Gauge,
    jobset_ready: Histogram,
    plugin_calls: Family<PluginPhaseLabels, Counter>,
    plugin_call_duration: HistogramFamily<PluginPhaseLabels>,
    plugin_failures: Family<PluginFailureLabels, Counter>,
    plugin_memory: Family<PluginLabels, Gauge>,
    plugin_loads: Family<PluginLoadLabels, Counter>,
    plugin_load_duration: HistogramFamily<OutcomeLabels>,
    tenant_calls: Family<TenantPhaseLabels, Counter>,
    tenant_failures: Family<TenantFailureLabels, Counter>,
    remembered: Gauge,
    admission_requests: Family<AdmissionLabels, Counter>,
    admission_duration: HistogramFamily<WebhookLabels>,
    admission_plugin_calls: Family<PluginResultLabels, Counter>,
    admission_plugin_failures: Family<PluginReasonLabels, Counter>,
    admission_plugin_duration: HistogramFamily<PluginLabels>,
    status_server_requests: Family<CodeLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every family registered (and no samples yet).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconciles = Family::<ControllerLabels, Counter>::default();
        registry.register(
            "trainforge_reconcile",
            "Reconciles finished, by controller",
            reconciles.clone(),
        );
        let reconcile_errors = Family::<ControllerReasonLabels, Counter>::default();
        registry.register(
            "trainforge_reconcile_errors",
            "Reconciles that failed, by controller and reason",
            reconcile_errors.clone(),
        );
        let reconcile_duration: HistogramFamily<ControllerLabels> =
            Family::new_with_constructor(reconcile_histogram);
        registry.register(
            "trainforge_reconcile_duration_seconds",
            "Reconcile latency in seconds, by controller",
            reconcile_duration.clone(),
        );
        let apply_errors = Family::<KindLabels, Counter>::default();
        registry.register(
            "trainforge_apply_errors",
            "Server-side-apply errors, by object kind",
            apply_errors.clone(),
        );
        let api_writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "trainforge_api_writes",
            "Writes the operator made to the API server, by verb and kind",
            api_writes.clone(),
        );
        let noop_resyncs = Counter::default();
        registry.register(
            "trainforge_noop_resyncs",
            "Reconciles that found nothing to change and wrote nothing",
            noop_resyncs.clone(),
        );
        let renders_reused = Counter::default();
        registry.register(
            "trainforge_renders_reused",
            "Reconciles that reused the TrainJob's last render: nothing it depends on changed",
            renders_reused.clone(),
        );
        let swap_trainjobs = Counter::default();
        registry.register(
            "trainforge_plugin_swap_trainjobs",
            "Unfinished TrainJobs queued for a re-render by a change of the plugin set in service",
            swap_trainjobs.clone(),
        );
        let swap_rerendered = Counter::default();
        registry.register(
            "trainforge_plugin_swap_rerendered_trainjobs",
            "TrainJobs a change of the plugin set queued that were rendered again with the new set",
            swap_rerendered.clone(),
        );
        let swap_remaining = Gauge::default();
        registry.register(
            "trainforge_plugin_swap_remaining_trainjobs",
            "TrainJobs the latest change of the plugin set in service has still to re-render",
            swap_remaining.clone(),
        );
        let plugins_not_serving = Gauge::default();
        registry.register(
            "trainforge_plugins_not_serving",
            "Configured ClusterTrainerPlugins with no version in service",
            plugins_not_serving.clone(),
        );
        let reconciles_waiting = Gauge::default();
        registry.register(
            "trainforge_trainjob_reconciles_waiting",
            "TrainJob reconciles queued for a turn (turns go round-robin across namespaces)",
            reconciles_waiting.clone(),
        );
        let jobset_ready = Histogram::new(exponential_buckets(0.05, 2.0, 14));
        registry.register(
            "trainforge_trainjob_create_to_jobset_ready_seconds",
            "Seconds from TrainJob creation to its JobSet being ready",
            jobset_ready.clone(),
        );
        let plugin_calls = Family::<PluginPhaseLabels, Counter>::default();
        registry.register(
            "trainforge_plugin_calls",
            "Plugin calls, by plugin and phase",
            plugin_calls.clone(),
        );
        let plugin_call_duration: HistogramFamily<PluginPhaseLabels> =
            Family::new_with_constructor(plugin_call_histogram);
        registry.register(
            "trainforge_plugin_call_duration_seconds",
            "Plugin call latency in seconds, by plugin and phase",
            plugin_call_duration.clone(),
        );
        let plugin_failures = Family::<PluginFailureLabels, Counter>::default();
        registry.register(
            "trainforge_plugin_failures",
            "Failed plugin calls, by plugin, phase and reason",
            plugin_failures.clone(),
        );
        let plugin_memory = Family::<PluginLabels, Gauge>::default();
        registry.register(
            "trainforge_plugin_memory_high_water_bytes",
            "Largest guest linear memory seen in one call, by plugin",
            plugin_memory.clone(),
        );
        let plugin_loads = Family::<PluginLoadLabels, Counter>::default();
        registry.register(
            "trainforge_plugin_loads",
            "Plugin loads, by plugin, where the code came from (compiled, memory, disk, shipped) or failed, and why",
            plugin_loads.clone(),
        );
        let plugin_load_duration: HistogramFamily<OutcomeLabels> =
            Family::new_with_constructor(plugin_load_histogram);
        registry.register(
            "trainforge_plugin_load_duration_seconds",
            "Plugin load latency in seconds (compile or cache hit, checks, describe), by outcome",
            plugin_load_duration.clone(),
        );
        let tenant_calls = Family::<TenantPhaseLabels, Counter>::default();
        registry.register(
            "trainforge_tenant_plugin_calls",
            "Calls of tenant plugins (TrainerPlugin), by namespace, plugin and phase",
            tenant_calls.clone(),
        );
        let tenant_failures = Family::<TenantFailureLabels, Counter>::default();
        registry.register(
            "trainforge_tenant_plugin_failures",
            "Failed calls of tenant plugins (TrainerPlugin), by namespace, plugin, phase and reason",
            tenant_failures.clone(),
        );
        let remembered = Gauge::default();
        registry.register(
            "trainforge_applied_objects_remembered",
            "Objects whose last applied state the operator remembers (pruned every resync)",
            remembered.clone(),
        );
        let admission_requests = Family::<AdmissionLabels, Counter>::default();
        registry.register(
            "trainforge_admission_requests",
            "Admission reviews answered, by webhook, operation and result",
            admission_requests.clone(),
        );
        let admission_duration: HistogramFamily<WebhookLabels> =
            Family::new_with_constructor(reconcile_histogram);
        registry.register(
            "trainforge_admission_duration_seconds",
            "Admission review latency in seconds, by webhook",
            admission_duration.clone(),
        );
        let admission_plugin_calls = Family::<PluginResultLabels, Counter>::default();
        registry.register(
            "trainforge_admission_plugin_calls",
            "Plugin validate calls made at admission, by plugin and result",
            admission_plugin_calls.clone(),
        );
        let admission_plugin_failures = Family::<PluginReasonLabels, Counter>::default();
        registry.register(
            "trainforge_admission_plugin_failures",
            "Plugin validate calls at admission that failed, by plugin and reason",
            admission_plugin_failures.clone(),
        );
        let admission_plugin_duration: HistogramFamily<PluginLabels> =
            Family::new_with_constructor(plugin_call_histogram);
        registry.register(
            "trainforge_admission_plugin_duration_seconds",
            "Plugin validate latency at admission in seconds, by plugin",
            admission_plugin_duration.clone(),
        );
        let status_server_requests = Family::<CodeLabels, Counter>::default();
        registry.register(
            "trainforge_status_server_requests",
            "Progress reports the TrainJob status server answered, by HTTP status code",
            status_server_requests.clone(),
        );
        Self {
            registry,
            status_server_requests,
            admission_requests,
            admission_duration,
            admission_plugin_calls,
            admission_plugin_failures,
            admission_plugin_duration,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            apply_errors,
            api_writes,
            noop_resyncs,
            renders_reused,
            swap_trainjobs,
            swap_rerendered,
            swap_remaining,
            plugins_not_serving,
            reconciles_waiting,
            jobset_ready,
            plugin_calls,
            plugin_call_duration,
            plugin_failures,
            plugin_memory,
            plugin_loads,
            plugin_load_duration,
            tenant_calls,
            tenant_failures,
            remembered,
        }
    }

    /// Set how many applied objects are remembered for no-op detection.
    pub fn set_remembered(&self, n: usize) {
        self.remembered.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Record one finished reconcile of `controller`: count it, observe its
    /// latency, and on `Err(reason)` count the error under `reason`.
    pub fn reconcile_done(&self, controller: &str, elapsed: Duration, outcome: Result<(), &str>) {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if let Err(reason) = outcome {
            self.reconcile_errors
                .get_or_create(&ControllerReasonLabels {
                    controller: controller.to_owned(),
                    reason: reason.to_owned(),
                })
                .inc();
        }
    }

    /// Count one write (`verb` e.g. `apply`, `create`, `delete`, `patch-status`)
    /// of an object of `kind` to the API server.
    pub fn api_write(&self, verb: &str, kind: &str) {
        self.api_writes
            .get_or_create(&WriteLabels {
                verb: verb.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Count one answer of the TrainJob status server.
    pub fn status_server_answered(&self, code: u16) {
        self.status_server_requests
            .get_or_create(&CodeLabels {
                code: code.to_string(),
            })
            .inc();
    }

    /// Count one server-side-apply error for an object of `kind`.
    pub fn apply_error(&self, kind: &str) {
        self.apply_errors
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Count one reconcile that found nothing to change and wrote nothing.
    pub fn noop_resync(&self) {
        self.noop_resyncs.inc();
    }

    /// Count a reconcile that reused the last render.
    pub fn render_reused(&self) {
        self.renders_reused.inc();
    }

    /// Count TrainJobs a change of the plugin set queued for a re-render.
    pub fn swap_trainjobs(&self, n: usize) {
        self.swap_trainjobs.inc_by(n as u64);
    }

    /// Count a TrainJob rendered again after a change of the plugin set.
    pub fn swap_rerendered(&self) {
        self.swap_rerendered.inc();
    }

    /// Set the TrainJobs the latest change of the plugin set has still to
    /// re-render.
    pub fn swap_remaining(&self, n: usize) {
        self.swap_remaining
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Set the configured plugins with no version in service.
    pub fn plugins_not_serving(&self, n: usize) {
        self.plugins_not_serving
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Set the TrainJob reconciles waiting for a turn.
    pub fn reconciles_waiting(&self, n: usize) {
        self.reconciles_waiting
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Observe the time from a TrainJob's creation to its JobSet being ready.
    pub fn jobset_ready(&self, elapsed: Duration) {
        self.jobset_ready.observe(elapsed.as_secs_f64());
    }

    /// Record one plugin call (what [`crate::plugin::CallObserver::on_call`]
    /// reports): count and time it, count a failure under its reason, and
    /// raise the plugin's memory high-water mark if `memory_high_water_bytes`
    /// exceeds it.
    pub fn plugin_call(
        &self,
        plugin: &str,
        phase: &str,
        elapsed: Duration,
        failure: Option<&str>,
        memory_high_water_bytes: usize,
    ) {
        let labels = PluginPhaseLabels {
            plugin: plugin.to_owned(),
            phase: phase.to_owned(),
        };
        self.plugin_calls.get_or_create(&labels).inc();
        self.plugin_call_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if let Some(reason) = failure {
            self.plugin_failures
                .get_or_create(&PluginFailureLabels {
                    plugin: plugin.to_owned(),
                    phase: phase.to_owned(),
                    reason: reason.to_owned(),
                })
                .inc();
        }
        // A tenant plugin is observed as `<namespace>/<plugin>` (a
        // Kubernetes name has no `/`).
        if let Some((namespace, name)) = plugin.split_once('/') {
            self.tenant_calls
                .get_or_create(&TenantPhaseLabels {
                    namespace: namespace.to_owned(),
                    plugin: name.to_owned(),
                    phase: phase.to_owned(),
                })
                .inc();
            if let Some(reason) = failure {
                self.tenant_failures
                    .get_or_create(&TenantFailureLabels {
                        namespace: namespace.to_owned(),
                        plugin: name.to_owned(),
                        phase: phase.to_owned(),
                        reason: reason.to_owned(),
                    })
                    .inc();
            }
        }
        let bytes = i64::try_from(memory_high_water_bytes).unwrap_or(i64::MAX);
        self.plugin_memory
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inner()
            .fetch_max(bytes, Ordering::Relaxed);
    }

    /// Record one answered admission review of `webhook` (`trainjob`,
    /// `trainjob-defaulter`, ...) for `operation` (`CREATE`, ...) with
    /// `result` `allowed`, `denied` or `error`, and its latency.
    pub fn admission_done(&self, webhook: &str, operation: &str, result: &str, elapsed: Duration) {
        self.admission_requests
            .get_or_create(&AdmissionLabels {
                webhook: webhook.to_owned(),
                operation: operation.to_owned(),
                result: result.to_owned(),
            })
            .inc();
        self.admission_duration
            .get_or_create(&WebhookLabels {
                webhook: webhook.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Record one plugin `validate` call made at admission: `result` `ok`,
    /// `denied`, `failed` or `ignored`; `failure` the plugin error's reason
    /// when it failed (failed or ignored).
    pub fn admission_plugin_call(
        &self,
        plugin: &str,
        result: &str,
        failure: Option<&str>,
        elapsed: Duration,
    ) {
        self.admission_plugin_calls
            .get_or_create(&PluginResultLabels {
                plugin: plugin.to_owned(),
                result: result.to_owned(),
            })
            .inc();
        if let Some(reason) = failure {
            self.admission_plugin_failures
                .get_or_create(&PluginReasonLabels {
                    plugin: plugin.to_owned(),
                    reason: reason.to_owned(),
                })
                .inc();
        }
        self.admission_plugin_duration
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The registry as OpenMetrics text (content type
    /// [`OPENMETRICS_CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            // Writing to a String cannot fail; an encoder bug can. Serve what we have.
            tracing::error!(error = %e, "encoding metrics failed");
        }
        out
    }
}

/// Plugin calls feed the per-plugin, per-phase families.
impl crate::plugin::CallObserver for Metrics {
    fn on_call(
        &self,
        plugin: &str,
        phase: &str,
        elapsed: Duration,
        failure: Option<&'static str>,
        memory_high_water_bytes: usize,
    ) {
        self.plugin_call(plugin, phase, elapsed, failure, memory_high_water_bytes);
    }

    fn on_load(
        &self,
        plugin: &str,
        outcome: &'static str,
        failure: Option<&'static str>,
        elapsed: Duration,
    ) {
        self.plugin_loads
            .get_or_create(&PluginLoadLabels {
                plugin: plugin.to_owned(),
                outcome: outcome.to_owned(),
                reason: failure.unwrap_or_default().to_owned(),
            })
            .inc();
        self.plugin_load_duration
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn encode_lists_every_family() {
        let m = Metrics::new();
        // prometheus-client leaves out families without samples: one each.
        m.reconcile_done("trainjob", Duration::from_millis(1), Err("x"));
        m.apply_error("JobSet");
        m.api_write("apply", "JobSet");
        m.plugin_call("torch", "build", Duration::from_micros(1), Some("trap"), 1);
        m.plugin_call(
            "team-a/env",
            "build",
            Duration::from_micros(1),
            Some("Timeout"),
            1,
        );
        let text = m.encode();
        assert!(
            text.contains(r#"trainforge_tenant_plugin_failures_total{namespace="team-a",plugin="env",phase="build",reason="Timeout"} 1"#),
            "{text}"
        );
        for family in [
            "trainforge_reconcile_total",
            "trainforge_reconcile_errors_total",
            "trainforge_reconcile_duration_seconds",
            "trainforge_apply_errors_total",
            "trainforge_api_writes_total",
            "trainforge_noop_resyncs_total",
            "trainforge_renders_reused_total",
            "trainforge_plugin_swap_trainjobs_total",
            "trainforge_plugin_swap_rerendered_trainjobs_total",
            "trainforge_plugin_swap_remaining_trainjobs",
            "trainforge_plugins_not_serving",
            "trainforge_trainjob_create_to_jobset_ready_seconds",
            "trainforge_plugin_calls_total",
            "trainforge_plugin_call_duration_seconds",
            "trainforge_plugin_failures_total",
            "trainforge_plugin_memory_high_water_bytes",
            "trainforge_tenant_plugin_calls_total",
            "trainforge_tenant_plugin_failures_total",
        ] {
            // counters are declared without `_total` in `# TYPE` lines
            let declared = family.trim_end_matches("_total");
            assert!(
                text.contains(&format!("# TYPE {declared} ")),
                "{declared} missing in:\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"), "not OpenMetrics:\n{text}");
    }

    #[test]
    fn admission_families_are_scraped() {
        let m = Metrics::new();
        m.admission_done("trainjob", "CREATE", "denied", Duration::from_millis(2));
        m.admission_done("trainjob", "CREATE", "denied", Duration::from_millis(3));
        m.admission_done("trainjob", "UPDATE", "allowed", Duration::from_millis(1));
        m.admission_plugin_call("torch", "ok", None, Duration::from_micros(30));
        m.admission_plugin_call("slow", "failed", Some("Timeout"), Duration::from_millis(50));
        m.admission_plugin_call(
            "slow",
            "ignored",
            Some("Timeout"),
            Duration::from_millis(50),
        );
        let text = m.encode();
        let at = |series: &str| sample(&text, series);
        assert_eq!(
            at(
                r#"trainforge_admission_requests_total{webhook="trainjob",operation="CREATE",result="denied"}"#
            ),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            at(
                r#"trainforge_admission_requests_total{webhook="trainjob",operation="UPDATE",result="allowed"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            at(r#"trainforge_admission_duration_seconds_count{webhook="trainjob"}"#),
            Some(3.0)
        );
        assert_eq!(
            at(r#"trainforge_admission_plugin_calls_total{plugin="torch",result="ok"}"#),
            Some(1.0)
        );
        assert_eq!(
            at(r#"trainforge_admission_plugin_failures_total{plugin="slow",reason="Timeout"}"#),
            Some(2.0)
        );
        assert_eq!(
            at(r#"trainforge_admission_plugin_duration_seconds_count{plugin="slow"}"#),
            Some(2.0)
        );
    }

    /// The value of the sample `series` (name and labels as encoded).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn reconcile_counters_move_and_are_encoded() {
        let m = Metrics::new();
        m.reconcile_done("trainjob", Duration::from_millis(3), Ok(()));
        m.reconcile_done("trainjob", Duration::from_millis(5), Err("Apply"));
        m.reconcile_done("plugins", Duration::from_millis(1), Ok(()));
        let text = m.encode();
        let at = |series: &str| sample(&text, series);
        assert_eq!(
            at(r#"trainforge_reconcile_total{controller="trainjob"}"#),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            at(r#"trainforge_reconcile_total{controller="plugins"}"#),
            Some(1.0)
        );
        assert_eq!(
            at(r#"trainforge_reconcile_errors_total{controller="trainjob",reason="Apply"}"#),
            Some(1.0)
        );
        assert_eq!(
            at(r#"trainforge_reconcile_errors_total{controller="plugins",reason="Apply"}"#),
            None
        );
        assert_eq!(
            at(r#"trainforge_reconcile_duration_seconds_count{controller="trainjob"}"#),
            Some(2.0)
        );
    }

    #[test]
    fn writes_and_noop_resyncs_are_counted() {
        let m = Metrics::new();
        m.api_write("apply", "JobSet");
        m.api_write("apply", "JobSet");
        m.api_write("patch-status", "TrainJob");
        m.apply_error("JobSet");
        m.noop_resync();
        m.jobset_ready(Duration::from_millis(800));
        m.set_remembered(7);
        let text = m.encode();
        let at = |series: &str| sample(&text, series);
        assert_eq!(
            at(r#"trainforge_api_writes_total{verb="apply",kind="JobSet"}"#),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            at(r#"trainforge_api_writes_total{verb="patch-status",kind="TrainJob"}"#),
            Some(1.0)
        );
        assert_eq!(
            at(r#"trainforge_api_writes_total{verb="apply",kind="Secret"}"#),
            None
        );
        assert_eq!(
            at(r#"trainforge_apply_errors_total{kind="JobSet"}"#),
            Some(1.0)
        );
        assert_eq!(at("trainforge_noop_resyncs_total"), Some(1.0));
        assert_eq!(
            at("trainforge_trainjob_create_to_jobset_ready_seconds_count"),
            Some(1.0)
        );
        assert_eq!(at("trainforge_applied_objects_remembered"), Some(7.0));
    }

    #[test]
    fn plugin_loads_by_outcome_and_failure_reason() {
        use crate::plugin::CallObserver;
        let m = Metrics::new();
        let observer: &dyn CallObserver = &m;
        observer.on_load("torch", "shipped", None, Duration::from_millis(3));
        observer.on_load("torch", "shipped", None, Duration::from_millis(2));
        observer.on_load("vendor", "compiled", None, Duration::from_secs(7));
        observer.on_load(
            "vendor",
            "failed",
            Some("CompileTimeout"),
            Duration::from_secs(60),
        );
        let text = m.encode();
        let at = |series: &str| sample(&text, series);
        assert_eq!(
            at(r#"trainforge_plugin_loads_total{plugin="torch",outcome="shipped",reason=""}"#),
            Some(2.0)
        );
        assert_eq!(
            at(
                r#"trainforge_plugin_loads_total{plugin="vendor",outcome="failed",reason="CompileTimeout"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            at(r#"trainforge_plugin_load_duration_seconds_count{outcome="compiled"}"#),
            Some(1.0)
        );
        // A 7 s compile falls in the 8.192 s bucket, not the 4.096 s one.
        assert_eq!(
            at(r#"trainforge_plugin_load_duration_seconds_bucket{le="4.096",outcome="compiled"}"#),
            Some(0.0)
        );
        assert_eq!(
            at(r#"trainforge_plugin_load_duration_seconds_bucket{le="8.192",outcome="compiled"}"#),
            Some(1.0)
        );
    }

    #[test]
    fn plugin_calls_failures_latency_and_memory_high_water() {
        use crate::plugin::CallObserver;
        let m = Metrics::new();
        let observer: &dyn CallObserver = &m;
        observer.on_call(
            "mpi",
            "build",
            Duration::from_micros(5),
            Some("Timeout"),
            4096,
        );
        m.plugin_call(
            "torch",
            "enforce-ml-policy",
            Duration::from_micros(40),
            None,
            2 << 20,
        );
        m.plugin_call(
            "torch",
            "enforce-ml-policy",
            Duration::from_micros(60),
            Some("timeout"),
            1 << 20,
        );
        m.plugin_call("torch", "build", Duration::from_micros(10), None, 3 << 20);
        let text = m.encode();
        let at = |series: &str| sample(&text, series);
        assert_eq!(
            at(r#"trainforge_plugin_calls_total{plugin="mpi",phase="build"}"#),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            at(r#"trainforge_plugin_failures_total{plugin="mpi",phase="build",reason="Timeout"}"#),
            Some(1.0)
        );
        assert_eq!(
            at(r#"trainforge_plugin_memory_high_water_bytes{plugin="mpi"}"#),
            Some(4096.0)
        );
        assert_eq!(
            at(r#"trainforge_plugin_calls_total{plugin="torch",phase="enforce-ml-policy"}"#),
            Some(2.0)
        );
        assert_eq!(
            at(r#"trainforge_plugin_calls_total{plugin="torch",phase="build"}"#),
            Some(1.0)
        );
        assert_eq!(
            at(
                r#"trainforge_plugin_failures_total{plugin="torch",phase="enforce-ml-policy",reason="timeout"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            at(
                r#"trainforge_plugin_failures_total{plugin="torch",phase="build",reason="timeout"}"#
            ),
            None
        );
        // the gauge keeps the maximum, never goes down
        assert_eq!(
            at(r#"trainforge_plugin_memory_high_water_bytes{plugin="torch"}"#),
            Some(f64::from(3u32 << 20))
        );
        assert_eq!(
            at(r#"trainforge_plugin_memory_high_water_bytes{plugin="jax"}"#),
            None
        );
        // 40 µs and 60 µs both land in the 64 µs bucket, not in the 16 µs one
        assert_eq!(
            at(
                r#"trainforge_plugin_call_duration_seconds_bucket{le="0.000064",plugin="torch",phase="enforce-ml-policy"}"#
            ),
            Some(2.0)
        );
        assert_eq!(
            at(
                r#"trainforge_plugin_call_duration_seconds_bucket{le="0.000016",plugin="torch",phase="enforce-ml-policy"}"#
            ),
            Some(0.0)
        );
    }
}
