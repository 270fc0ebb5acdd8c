//go:build tools

// Package deps only pins the API modules whose CRDs controller-gen (run from
// here by testenv/build.sh) generates from their types: the Volcano PodGroup,
// and the Prometheus Operator's ServiceMonitor and PrometheusRule (applied
// by the tests to check manifests/monitoring against them). It is never
// built.
package deps

import (
	_ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	_ "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)
