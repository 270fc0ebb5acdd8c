//! The older generation's `mlPolicy.torch.elasticPolicy` (declared by
//! Kubeflow Trainer v2.0/v2.1, never implemented upstream), as Trainforge
//! implements it.
//!
//! **Bounds.** `min = minNodes` (default 1), `max = maxNodes` (default
//! `max(min, initial nodes)`); `1 ≤ min ≤ max`. The initial node count (the
//! trainer pod set's count, i.e. the Job's parallelism) is `trainer.numNodes`
//! when set — it must lie within the bounds — else the runtime's count
//! clamped into them (the CRD forbids `mlPolicy.numNodes` together with an
//! elastic policy, so that is normally `min`).
//!
//! **torchrun.** The settings go through torchrun's own environment
//! variables (torchrun reads every option from `PET_<OPTION>`), so they work
//! whatever the container's command line is, and explicit arguments still
//! win:
//! * `PET_NNODES` = `TRAINER_NNODES` = `min:max` (→ `--nnodes=1:4`; runtimes
//!   written with `--nnodes=$(TRAINER_NNODES)` get the same argument);
//! * `PET_MAX_RESTARTS` = `maxRestarts` (→ `--max-restarts=3`), when set;
//! * `PET_RDZV_BACKEND=c10d`, `PET_RDZV_ENDPOINT=<job>-node-0-0.<job>:29500`,
//!   `PET_RDZV_ID=<job>`: a `min:max` node range needs a dynamic rendezvous
//!   (torchrun's default static rendezvous waits for `max` nodes).
//!
//! The JobSet's own `failurePolicy` is left as the runtime wrote it.
//!
//! **Autoscaling.** With `metrics`, `build` emits an `autoscaling/v2`
//! HorizontalPodAutoscaler `<job>` with `minReplicas = min`,
//! `maxReplicas = max` and the metrics verbatim, owned by the TrainJob. Its
//! `scaleTargetRef` is the **TrainJob** (`trainer.kubeflow.org/v1alpha1`):
//! an HPA can only drive an object with a `/scale` subresource; JobSet has
//! none upstream (and its replicated jobs are immutable once created), a
//! batch/v1 Job has none either, while the TrainJob is the user-facing
//! object whose `spec.trainer.numNodes` *is* the node count. Scaling
//! therefore needs a `/scale` subresource on the TrainJob CRD
//! (`specReplicasPath: .spec.trainer.numNodes`, plus status replicas and
//! selector paths) and the controller propagating a changed `numNodes` to
//! the running trainer Job (elastic indexed Jobs allow changing
//! `parallelism` together with `completions`); until then the HPA reports
//! `AbleToScale=False` and the job simply runs elastically between the
//! bounds. Without `metrics` no autoscaler is created.

use crate::env::ElasticEnv;
use trainforge_sdk::api::trainer::v1alpha1::TorchElasticPolicy;
use trainforge_sdk::api::trainer::v1alpha1::constants::{API_VERSION, TRAINJOB_KIND};
use trainforge_sdk::serde_json::{self, Value, json};

/// The CRD's message when `mlPolicy.numNodes` is set with an elastic policy.
pub const NUM_NODES_WITH_ELASTIC: &str =
    "numNodes should not be set if torch.elasticPolicy is configured";

/// An elastic policy with its bounds resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Elastic {
    /// Lower bound of nodes.
    pub min: i32,
    /// Upper bound of nodes.
    pub max: i32,
    /// torchrun `--max-restarts`.
    pub max_restarts: Option<i32>,
    /// HPA metrics (autoscaling/v2 MetricSpec JSON), verbatim.
    pub metrics: Vec<Value>,
}

/// An invalid elastic setup: the TrainJob/runtime field and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElasticError {
    /// `spec.trainer.numNodes` or `spec.runtimeRef` (the runtime's policy).
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl Elastic {
    /// Resolve the bounds. `runtime_num_nodes` is `mlPolicy.numNodes`,
    /// `trainer_num_nodes` the TrainJob's, `count` the runtime's initial count.
    pub fn resolve(
        policy: &TorchElasticPolicy,
        runtime_num_nodes: Option<i32>,
        trainer_num_nodes: Option<i32>,
        count: i32,
    ) -> Result<Elastic, ElasticError> {
        let runtime_err = |reason: String| ElasticError {
            field: "spec.runtimeRef",
            reason,
        };
        if runtime_num_nodes.is_some() {
            return Err(runtime_err(NUM_NODES_WITH_ELASTIC.to_owned()));
        }
        let min = policy.min_nodes.unwrap_or(1);
        if min < 1 {
            return Err(runtime_err(format!(
                "torch.elasticPolicy.minNodes must be at least 1, got {min}"
            )));
        }
        let max = policy
            .max_nodes
            .unwrap_or(min.max(trainer_num_nodes.unwrap_or(count)));
        if max < min {
            return Err(runtime_err(format!(
                "torch.elasticPolicy.minNodes ({min}) must not be greater than maxNodes ({max})"
            )));
        }
        if let Some(r) = policy.max_restarts
            && r < 0
        {
            return Err(runtime_err(format!(
                "torch.elasticPolicy.maxRestarts must not be negative, got {r}"
            )));
        }
        if let Some(n) = trainer_num_nodes
            && !(min..=max).contains(&n)
        {
            return Err(ElasticError {
                field: "spec.trainer.numNodes",
                reason: format!(
                    "must be between minNodes ({min}) and maxNodes ({max}) of the runtime's torch elasticPolicy"
                ),
            });
        }
        let metrics = policy
            .metrics
            .iter()
            .flatten()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| runtime_err(format!("torch.elasticPolicy.metrics: {e}")))?;
        Ok(Elastic {
            min,
            max,
            max_restarts: policy.max_restarts,
            metrics,
        })
    }

    /// The initial node count: `trainer.numNodes`, else `count` clamped.
    pub fn initial_nodes(&self, trainer_num_nodes: Option<i32>, count: i32) -> i32 {
        trainer_num_nodes.unwrap_or_else(|| count.clamp(self.min, self.max))
    }

    /// `min:max`, torchrun's elastic `--nnodes`.
    pub fn nnodes(&self) -> String {
        format!("{}:{}", self.min, self.max)
    }

    /// The env settings.
    pub fn env(&self) -> ElasticEnv {
        ElasticEnv {
            max_restarts: self.max_restarts,
        }
    }

    /// The HorizontalPodAutoscaler, or `None` without metrics.
    pub fn hpa(&self, job: &str, namespace: &str, owner: Value) -> Option<Value> {
        if self.metrics.is_empty() {
            return None;
        }
        Some(json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": job, "namespace": namespace, "ownerReferences": [owner]},
            "spec": {
                "scaleTargetRef": {"apiVersion": API_VERSION, "kind": TRAINJOB_KIND, "name": job},
                "minReplicas": self.min,
                "maxReplicas": self.max,
                "metrics": self.metrics,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn policy(min: Option<i32>, max: Option<i32>) -> TorchElasticPolicy {
        TorchElasticPolicy {
            min_nodes: min,
            max_nodes: max,
            max_restarts: Some(3),
            metrics: None,
        }
    }

    #[test]
    fn bounds_and_defaults() {
        let e = Elastic::resolve(&policy(Some(1), Some(4)), None, None, 1).expect("valid");
        assert_eq!((e.min, e.max, e.nnodes()), (1, 4, "1:4".to_owned()));
        assert_eq!(e.initial_nodes(None, 1), 1);
        let e = Elastic::resolve(&policy(Some(2), Some(4)), None, None, 1).expect("valid");
        assert_eq!(e.initial_nodes(None, 1), 2, "clamped up to min");
        let e = Elastic::resolve(&policy(None, None), None, Some(3), 1).expect("valid");
        assert_eq!(
            (e.min, e.max),
            (1, 3),
            "min defaults to 1, max to the node count"
        );
        assert_eq!(e.initial_nodes(Some(3), 1), 3);
    }

    #[test]
    fn invalid_setups_name_the_field() {
        let err =
            Elastic::resolve(&policy(Some(1), Some(4)), Some(2), None, 2).expect_err("CEL rule");
        assert_eq!(
            err,
            ElasticError {
                field: "spec.runtimeRef",
                reason: NUM_NODES_WITH_ELASTIC.into()
            }
        );
        let err =
            Elastic::resolve(&policy(Some(5), Some(4)), None, None, 1).expect_err("min > max");
        assert_eq!(
            err.reason,
            "torch.elasticPolicy.minNodes (5) must not be greater than maxNodes (4)"
        );
        let err = Elastic::resolve(&policy(Some(0), Some(4)), None, None, 1).expect_err("min 0");
        assert_eq!(err.field, "spec.runtimeRef");
        let err = Elastic::resolve(&policy(Some(2), Some(4)), None, Some(8), 1)
            .expect_err("out of bounds");
        assert_eq!(err, ElasticError {
            field: "spec.trainer.numNodes",
            reason: "must be between minNodes (2) and maxNodes (4) of the runtime's torch elasticPolicy".into()
        });
    }

    #[test]
    fn hpa_targets_the_trainjob_with_bounds_and_metrics() {
        let metric = json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}});
        let mut p = policy(Some(1), Some(4));
        p.metrics = Some(vec![
            serde_json::from_value(metric.clone()).expect("metric"),
        ]);
        let e = Elastic::resolve(&p, None, None, 1).expect("valid");
        let hpa = e.hpa("job", "ns", json!({"uid": "u"})).expect("hpa");
        assert_eq!(
            hpa,
            json!({
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "job", "namespace": "ns", "ownerReferences": [{"uid": "u"}]},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job"},
                    "minReplicas": 1, "maxReplicas": 4, "metrics": [metric]
                }
            })
        );
        assert_eq!(
            Elastic::resolve(&policy(Some(1), Some(4)), None, None, 1)
                .expect("valid")
                .hpa("j", "n", json!({})),
            None
        );
    }
}
