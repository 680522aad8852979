package limiter

import "github.com/redis/go-redis/v9"

// isTryAgain reports whether Redis refused a call with TRYAGAIN: in a
// Redis Cluster, a call of several keys in a slot being migrated, where not
// all of them exist yet on the node asked (the bucket's hash and its 0.1
// key, a quota's counters). Redis refuses it before the script runs, so
// the call took nothing: the Batcher sends it again for as long as its
// callers wait (worker.retryTryAgain), and one still refused then is
// decided as a call that was never sent (the local bucket continues from
// Redis's last answer; the breaker does not count it: the node answers).
func isTryAgain(err error) bool { return err != nil && redis.IsTryAgainError(err) }

// noRetry is a script call go-redis must never send again on its own. A
// pipeline whose first reply is an error go-redis deems retryable
// (TRYAGAIN, LOADING, a connection error) would otherwise be sent again
// whole, calls that ran included, and their tokens taken twice; the
// Batcher resends only the calls that did not run (NOSCRIPT, TRYAGAIN).
type noRetry struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (noRetry) NoRetry() bool { return true }
