//! The `ClusterTrainerPlugin` controller and the plugin catalog.
