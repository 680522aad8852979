package limiter

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// IsScriptError reports whether err is Redis's answer that a script failed
// while it ran: Lua raised an error, or a command the script called was
// refused (WRONGTYPE on a key of another type, an argument out of range).
// Sent again, the call fails again, on this bucket only: Redis is
// answering, not failing, so such an error never counts against the
// node's breaker, and the request follows its rule's failure mode as when
// Redis cannot decide (see Chain).
//
// Not script errors: NOSCRIPT (the Batcher sends the script's text), and
// the replies that describe the node rather than the call, even when a
// command inside the script got them (OOM, READONLY after a failover,
// LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, MOVED, ASK, TRYAGAIN, ACL and
// persistence errors): they fail every bucket of the node and count
// against its breaker, as connection errors and timeouts do.
func IsScriptError(err error) bool {
	if err == nil {
		return false // before re, which lives on the heap (errors.As)
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	// Redis 7 ends the message of an error raised in a script with
	// "script: <sha>, on @user_script:<line>." (or has "user_script:<line>:"
	// in a Lua error); Redis 6 writes "ERR Error running script (call to
	// f_<sha>): @user_script:<line>: <the command's error>".
	i := strings.Index(msg, "user_script:")
	if i < 0 || aboutTheNode(msg) {
		return false
	}
	// The command's own error inside a Redis 6 message.
	rest := msg[i+len("user_script:"):]
	rest = strings.TrimLeft(rest, "0123456789")
	if inner, ok := strings.CutPrefix(rest, ": "); ok && aboutTheNode(inner) {
		return false
	}
	return true
}

// aboutTheNode reports whether an error reply's code (its first word) says
// something about the node: it fails every call there, not one bucket's.
func aboutTheNode(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "NOSCRIPT", "LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "MOVED", "ASK", "TRYAGAIN",
		"READONLY", "OOM", "MISCONF", "NOREPLICAS", "NOAUTH", "WRONGPASS", "NOPERM", "EXECABORT", "UNBLOCKED":
		return true
	}
	return false
}
