//go:build tools

// Package deps only pins volcano.sh/apis in this module so that controller-gen
// (run from here by testenv/build.sh) can load its types to generate the
// Volcano PodGroup CRD. It is never built.
package deps

import _ "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
