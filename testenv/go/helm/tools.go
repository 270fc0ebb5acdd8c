//go:build tools

// The Helm CLI (v4) for the chart tests (host/tests/cluster/helm_chart.rs):
// built by testenv/build.sh from this module, as a platform team's helm.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
