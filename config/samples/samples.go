// Package samples embeds the sample RateLimitRule manifests of this
// directory, so "tollgate demo" can run them from anywhere. kubectl ignores
// this file: `kubectl apply -f config/samples/` reads only the YAML.
package samples

import "embed"

// Files holds the sample manifests.
//
//go:embed *.yaml
var Files embed.FS
