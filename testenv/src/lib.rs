//! A real Kubernetes control plane for tests, CI and the demo.
