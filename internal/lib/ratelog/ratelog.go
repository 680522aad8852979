// Package ratelog rate-limits log lines on hot paths: per message key, at
// most one line per interval, carrying the number of lines suppressed since
// the last one. Use it wherever a log line could otherwise be written once per
// request.
package ratelog

import (
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Logger writes at most one line per key per interval.
type Logger struct {
	log   logr.Logger
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*state
}

type state struct {
	last       time.Time
	suppressed int
}

// New returns a Logger writing to log at most once per every per key.
func New(log logr.Logger, every time.Duration) *Logger {
	return &Logger{log: log, every: every, now: time.Now, keys: map[string]*state{}}
}

// Info logs msg unless a line with the same msg was logged less than the
// interval ago.
func (l *Logger) Info(msg string, kv ...any) {
	if n, ok := l.allow(msg); ok {
		l.log.Info(msg, append(kv, "suppressed", n)...)
	}
}

// Error is Info at error level.
func (l *Logger) Error(err error, msg string, kv ...any) {
	if n, ok := l.allow(msg); ok {
		l.log.Error(err, msg, append(kv, "suppressed", n)...)
	}
}

func (l *Logger) allow(key string) (int, bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[key]
	if s == nil {
		s = &state{}
		l.keys[key] = s
	} else if now.Sub(s.last) < l.every {
		s.suppressed++
		return 0, false
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	return n, true
}
