//! The Kubeflow Trainer API (`trainer.kubeflow.org`).

pub mod v1alpha1;
