//! The shape of a CEL validation rule (`x-kubernetes-validations` entry) as
//! attached to generated CRD schemas.

use serde::Serialize;

/// One `x-kubernetes-validations` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CelRule {
    /// The CEL expression; `self` is the value the rule is attached to.
    pub rule: &'static str,
    /// The message the API server returns when the rule evaluates to false.
    pub message: &'static str,
}
