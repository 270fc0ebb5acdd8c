//! Admission webhooks served by `trainforge operator`, as Kubeflow Trainer
//! has them, plus one for `ClusterTrainerPlugin`.
//!
//! | path | reviews | module |
//! |---|---|---|
//! | `/mutate-trainer-kubeflow-org-v1alpha1-trainjob` | TrainJob CREATE, UPDATE (sets `spec.runtimePatches[*].time`) | [`defaulting`] |
//! | `/validate-trainer-kubeflow-org-v1alpha1-trainjob` | TrainJob CREATE, UPDATE | [`trainjob`] |
//! | `/validate-trainer-kubeflow-org-v1alpha1-trainingruntime` | TrainingRuntime CREATE | [`runtimes`] |
//! | `/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime` | ClusterTrainingRuntime CREATE, UPDATE | [`runtimes`] |
//! | `/validate-trainforge-dev-v1alpha1-clustertrainerplugin` | ClusterTrainerPlugin CREATE, UPDATE | [`plugins`] |
//!
//! Interface for the operator:
//!
//! ```text
//! pub struct AdmissionState { .. }
//! impl AdmissionState {
//!     pub fn new(plugins: Arc<dyn PluginsNow>, runtimes: Arc<dyn RuntimeLookup>,
//!                metrics: Arc<Metrics>, budget: Duration) -> Self
//! }
//! pub trait PluginsNow: Send + Sync { fn current(&self) -> Arc<PluginSet>; }
//! pub trait RuntimeLookup: Send + Sync {
//!     fn training_runtime(&self, ns: &str, name: &str) -> Result<Option<TrainingRuntime>, String>;
//!     fn cluster_training_runtime(&self, name: &str) -> Result<Option<ClusterTrainingRuntime>, String>;
//! }
//! pub fn router(state: Arc<AdmissionState>) -> axum::Router;
//! ```
//!
//! The router serves plain HTTP; TLS is put in front of it by the caller.
//! Denials of invalid objects are 403 `Forbidden` with the field errors as
//! Kubernetes prints them ([`fielderr`]); plugin calls share a per-request
//! budget ([`DEFAULT_BUDGET`]), each call getting the smaller of its own
//! time limit and what remains.
//!
//! - [`certs`]: the webhook CA and serving certificate (self-managed in a
//!   Secret, or read from files), and the webhooks' `caBundle`; they are
//!   served by [`crate::ops::tls`].
//! - [`review`]: AdmissionReview decoding, [`Verdict`], the answer.
//! - [`serve`]: the operator's admission listener: certificates, TLS, the
//!   router over the operator's plugins and runtimes.
//! - [`router`](mod@router): [`AdmissionState`], the handlers, deadlines, spans and
//!   metrics.

pub mod certs;
pub mod defaulting;
pub mod fielderr;
pub mod gates;
pub mod plugins;
pub mod review;
pub mod router;
pub mod runtimes;
pub mod serve;
pub mod trainjob;

#[cfg(test)]
pub(crate) mod test_support;

pub use review::Verdict;
pub use router::{AdmissionState, Clock, DEFAULT_BUDGET, PluginsNow, router};
pub use trainjob::RuntimeLookup;
