// Package redisconf turns command-line flags into a go-redis client for a
// single node, a Sentinel-managed primary or a Redis Cluster.
package redisconf

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/spf13/pflag"

	"github.com/tollgate-dev/tollgate/internal/lib/certpool"
)

// Modes of Options.Mode.
const (
	ModeStandalone = "standalone"
	ModeSentinel   = "sentinel"
	ModeCluster    = "cluster"
)

// PasswordEnv is the environment variable read for the password when no
// password file is given.
const PasswordEnv = "TOLLGATE_REDIS_PASSWORD"

// SentinelPasswordEnv is the environment variable read for the Sentinels'
// own password when no Sentinel password file is given.
const SentinelPasswordEnv = "TOLLGATE_REDIS_SENTINEL_PASSWORD"

// Options say how to reach Redis.
type Options struct {
	// Addrs: one host:port in standalone mode, the Sentinels in sentinel
	// mode, some cluster nodes (seeds) in cluster mode.
	Addrs []string
	// Mode is standalone, sentinel or cluster.
	Mode string
	// MasterName is the Sentinel master name (sentinel mode).
	MasterName string
	// DB is the database number (standalone and sentinel).
	DB int
	// Username for Redis ACLs; empty for the default user.
	Username string
	// PasswordFile holds the password (a mounted Secret). When empty, the
	// TOLLGATE_REDIS_PASSWORD environment variable is used.
	PasswordFile string
	// SentinelUsername and SentinelPasswordFile authenticate to Sentinels
	// that require a password of their own (sentinel mode). When the file is
	// empty, the TOLLGATE_REDIS_SENTINEL_PASSWORD environment variable is
	// used.
	SentinelUsername     string
	SentinelPasswordFile string
	// TLS enables TLS; TLSCAFile, TLSServerName and TLSInsecureSkipVerify
	// tune it.
	TLS                   bool
	TLSCAFile             string
	TLSServerName         string
	TLSInsecureSkipVerify bool
	// PoolSize is the connection pool size per node.
	PoolSize int
	// DialTimeout bounds connecting. Decision calls have their own, much
	// shorter, deadline (the gateway's --redis-timeout).
	DialTimeout time.Duration
}

// AddFlags registers the options as flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.Addrs, "redis-addr", []string{"127.0.0.1:6379"},
		"Redis address (host:port). Sentinel mode: the Sentinels; cluster mode: one or more cluster nodes. Comma-separated.")
	fs.StringVar(&o.Mode, "redis-mode", ModeStandalone, "Redis deployment: standalone, sentinel or cluster.")
	fs.StringVar(&o.MasterName, "redis-master-name", "", "Sentinel master name (sentinel mode).")
	fs.IntVar(&o.DB, "redis-db", 0, "Redis database number (standalone and sentinel modes).")
	fs.StringVar(&o.Username, "redis-username", "", "Redis ACL user name.")
	fs.StringVar(&o.PasswordFile, "redis-password-file", "",
		"File holding the Redis password (e.g. a mounted Secret). Default: the "+PasswordEnv+" environment variable.")
	fs.StringVar(&o.SentinelUsername, "redis-sentinel-username", "", "Sentinel mode: ACL user name for the Sentinels themselves.")
	fs.StringVar(&o.SentinelPasswordFile, "redis-sentinel-password-file", "",
		"Sentinel mode: file holding the password of the Sentinels themselves (their requirepass; e.g. a mounted Secret). "+
			"Default: the "+SentinelPasswordEnv+" environment variable. The Redis password is separate (--redis-password-file).")
	fs.BoolVar(&o.TLS, "redis-tls", false, "Connect to Redis over TLS.")
	fs.StringVar(&o.TLSCAFile, "redis-tls-ca-file", "", "PEM file of CA certificates that sign the Redis server certificate. Default: system roots.")
	fs.StringVar(&o.TLSServerName, "redis-tls-server-name", "", "Server name to verify in the Redis certificate. Default: the host of the address.")
	fs.BoolVar(&o.TLSInsecureSkipVerify, "redis-tls-insecure-skip-verify", false, "Do not verify the Redis certificate (testing only).")
	fs.IntVar(&o.PoolSize, "redis-pool-size", 64, "Connections per Redis node in the client's pool. With a single server and --redis-own-connections the pipeline workers hold one connection each besides it (--redis-pipelines; 64 with --redis-batching=false).")
	fs.DurationVar(&o.DialTimeout, "redis-dial-timeout", time.Second, "Timeout for opening a Redis connection.")
}

// String describes the options without the password.
func (o *Options) String() string {
	return fmt.Sprintf("redis mode=%s addrs=%s master=%q db=%d user=%q tls=%v", o.Mode, strings.Join(o.Addrs, ","),
		o.MasterName, o.DB, o.Username, o.TLS)
}

// Validate checks the options.
func (o *Options) Validate() error {
	if len(o.Addrs) == 0 {
		return fmt.Errorf("--redis-addr: at least one address is needed")
	}
	switch o.Mode {
	case ModeStandalone:
		if len(o.Addrs) != 1 {
			return fmt.Errorf("--redis-addr: standalone mode takes one address, got %d", len(o.Addrs))
		}
	case ModeSentinel:
		if o.MasterName == "" {
			return fmt.Errorf("--redis-master-name is required in sentinel mode")
		}
	case ModeCluster:
		if o.DB != 0 {
			return fmt.Errorf("--redis-db must be 0 in cluster mode")
		}
	default:
		return fmt.Errorf("--redis-mode %q: want standalone, sentinel or cluster", o.Mode)
	}
	if o.Mode != ModeSentinel && (o.SentinelUsername != "" || o.SentinelPasswordFile != "") {
		return fmt.Errorf("--redis-sentinel-username and --redis-sentinel-password-file need --redis-mode=sentinel")
	}
	if o.PoolSize < 1 {
		return fmt.Errorf("--redis-pool-size must be at least 1")
	}
	return nil
}

// secret reads a password from file (trailing newlines dropped), or from the
// environment variable env when file is empty.
func secret(file, env, flag string) (string, error) {
	if file == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", flag, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// NewClient builds the client. Commands fail fast: no client-side retries
// (the gateway's breaker and fallback handle failures) and context deadlines
// are honoured.
func (o *Options) NewClient() (redis.UniversalClient, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	password, err := secret(o.PasswordFile, PasswordEnv, "--redis-password-file")
	if err != nil {
		return nil, err
	}
	sentinelPassword, err := secret(o.SentinelPasswordFile, SentinelPasswordEnv, "--redis-sentinel-password-file")
	if err != nil {
		return nil, err
	}
	tlsConfig, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	common := func(u *redis.UniversalOptions) {
		u.Username, u.Password = o.Username, password
		u.TLSConfig = tlsConfig
		u.PoolSize = o.PoolSize
		u.MinIdleConns = min(8, o.PoolSize)
		u.DialTimeout = o.DialTimeout
		u.ContextTimeoutEnabled = true
		u.MaxRetries = -1
		// Waiting for a pooled connection is bounded by each call's own
		// deadline (--redis-timeout for decisions); the pool's own, shorter
		// default would fail calls that still had time.
		u.PoolTimeout = 30 * time.Second
		// A refused connection fails at once instead of after five dial
		// attempts 100ms apart: the breaker, not the pool, decides when to
		// try again.
		u.DialerRetries = 1
		u.DialerRetryTimeout = 10 * time.Millisecond
		u.DisableIdentity = true
		u.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		// RESP2: tollgate uses nothing of RESP3 (push notifications, client
		// side caching), and with RESP3 the client looks for a pending push
		// notification before reading every reply (1.8 % of the rate limit
		// service's CPU in the rls benchmark's profile).
		u.Protocol = 2
	}
	u := &redis.UniversalOptions{Addrs: o.Addrs}
	common(u)
	switch o.Mode {
	case ModeStandalone:
		u.DB = o.DB
		return redis.NewClient(u.Simple()), nil
	case ModeSentinel:
		u.DB, u.MasterName = o.DB, o.MasterName
		u.SentinelUsername, u.SentinelPassword = o.SentinelUsername, sentinelPassword
		return redis.NewFailoverClient(u.Failover()), nil
	default:
		return redis.NewClusterClient(u.Cluster()), nil
	}
}

// tlsConfig is the client's TLS configuration, nil without --redis-tls.
func (o *Options) tlsConfig() (*tls.Config, error) {
	if !o.TLS {
		return nil, nil
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.TLSServerName, InsecureSkipVerify: o.TLSInsecureSkipVerify} //nolint:gosec // opt-in flag
	if o.TLSCAFile != "" {
		pool, err := certpool.Load("--redis-tls-ca-file", o.TLSCAFile)
		if err != nil {
			return nil, err
		}
		tlsConfig.RootCAs = pool
	}
	return tlsConfig, nil
}
