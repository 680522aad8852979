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

//go:embed token_bucket_stack.lua
var tokenBucketStack string

// TokenBucketStack decides several token buckets together, all or nothing
// (a request's stacked limits in one slot): token_bucket.lua's text as the
// function take(KEYS, ARGV), then token_bucket_stack.lua, which calls it
// per bucket. See token_bucket_stack.lua for its keys, arguments and
// reply.
var TokenBucketStack = "local function take(KEYS, ARGV)\n" + TokenBucket + "\nend\n" + tokenBucketStack
