package cmd

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/lib/ratelog"
)

// redisLogger routes go-redis's own messages (dial failures and the like)
// into the structured log, at most one line per 10 seconds: during an outage
// go-redis would otherwise print one line per attempt.
type redisLogger struct{ log *ratelog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Info("redis client", "message", fmt.Sprintf(format, v...))
}

// useRedisLogger installs the process-wide go-redis logger.
func useRedisLogger(log logr.Logger) {
	redis.SetLogger(redisLogger{log: ratelog.New(log.WithName("go-redis"), 10*time.Second)})
}
