package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisServer is a redis-server process on a loopback port, without
// persistence: a restart starts empty.
type redisServer struct {
	h    *harness
	name string
	port int
	proc *proc
}

// startRedis starts a redis-server on a free port.
func (h *harness) startRedis(ctx context.Context, name string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &redisServer{h: h, name: name, port: port}
	return r, r.start(ctx)
}

func (r *redisServer) start(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server is not installed (hack/install-deps.sh installs it): %w", err)
	}
	log := filepath.Join(r.h.logDir, r.name+".log")
	p, err := startProc(r.name, log, bin,
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.h.logDir, "--protected-mode", "no")
	if err != nil {
		return err
	}
	r.proc = p
	c := r.client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := c.Ping(ctx).Err(); err == nil {
			return nil
		}
		if p.Exited() {
			return p.exitError()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Kill()
			return fmt.Errorf("%s did not answer PING within 10s; log:\n%s", r.name, tail(log, 10))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Addr is host:port.
func (r *redisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// Kill sends SIGKILL and waits for the process to end.
func (r *redisServer) Kill() {
	if r != nil && r.proc != nil {
		r.proc.Kill()
	}
}

// Restart starts a new, empty server on the same port.
func (r *redisServer) Restart(ctx context.Context) error {
	r.Kill()
	return r.start(ctx)
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
