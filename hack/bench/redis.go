package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tollgate-dev/tollgate/internal/procs"
)

// redisServer is a redis-server process on a loopback port, without
// persistence: a restart starts empty. killAll ends it too.
type redisServer struct {
	*procs.Redis
}

// startRedis starts a redis-server on a free port, its log in the log
// directory under name.
func (h *harness) startRedis(_ context.Context, name string) (*redisServer, error) {
	r, err := procs.StartRedis(procs.RedisConfig{Dir: h.logDir, Log: name + ".log", Args: []string{"--protected-mode", "no"}})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	rs := &redisServer{r}
	track(rs)
	return rs, nil
}

// Kill sends SIGKILL and waits for the process to end.
func (r *redisServer) Kill() {
	if r != nil && r.Redis != nil {
		r.Redis.Kill()
	}
}

// Restart starts a new, empty server on the same port.
func (r *redisServer) Restart(context.Context) error {
	err := r.Redis.Restart()
	track(r)
	return err
}

// client is a go-redis client for the harness's own use (not for limiter
// instances, which get their own).
func (r *redisServer) client() *redis.Client {
	return newRedisClient(r.Addr())
}

// newRedisClient returns a client that honours context deadlines, like the
// gateway's.
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		ContextTimeoutEnabled:    true,
		MaxRetries:               -1,
		DialTimeout:              time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// redisInfo returns the fields of an INFO section.
func redisInfo(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s: %w", section, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// scriptCalls returns the calls of EVALSHA and EVAL since the last
// CONFIG RESETSTAT, from INFO commandstats.
func scriptCalls(ctx context.Context, c *redis.Client) (int64, error) {
	m, err := redisInfo(ctx, c, "commandstats")
	if err != nil {
		return 0, err
	}
	var n int64
	for _, k := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
		// calls=123,usec=456,...
		for _, kv := range strings.Split(m[k], ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n, nil
}

// infoInt reads an integer field of an INFO section.
func infoInt(ctx context.Context, c *redis.Client, section, field string) (int64, error) {
	m, err := redisInfo(ctx, c, section)
	if err != nil {
		return 0, err
	}
	v, ok := m[field]
	if !ok {
		return 0, fmt.Errorf("INFO %s has no %s", section, field)
	}
	return strconv.ParseInt(v, 10, 64)
}

// quietRedisLog drops go-redis's own log lines (dial failures during the
// outage scenarios would flood the progress output).
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedisLog{}) }
