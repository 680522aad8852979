// Package lua holds tollgate's Redis scripts, embedded in the binary.
package lua

import _ "embed"

// TokenBucket is the token bucket script; see token_bucket.lua for its keys,
// arguments and reply.
//
//go:embed token_bucket.lua
var TokenBucket string

// Concurrency is the concurrency slot script (acquire, renew, release); see
// concurrency.lua for its keys, arguments and reply.
//
//go:embed concurrency.lua
var Concurrency string
