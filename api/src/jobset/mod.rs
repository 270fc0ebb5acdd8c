//! JobSet (`jobset.x-k8s.io`), the workload object a TrainJob becomes.

pub mod v1alpha2;
