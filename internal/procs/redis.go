// Package procs launches the processes that tollgate's tests, benchmark
// harness and demo run next to the code under test: redis-server (a single
// server, a Redis Cluster, or a Sentinel from its configuration file) and an
// echo upstream. internal/testutil/redistest wraps it for tests.
//
// Servers listen on free loopback ports and keep no data on disk:
// persistence is turned off, so a restarted server always starts empty.
// Each server runs in its own process group (a Ctrl-C in the terminal
// reaches only the parent, which stops it in order) and is killed by the
// kernel if the parent dies.
package procs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	readyTimeout        = 10 * time.Second // how long a new server may take to answer PING
	clusterReadyTimeout = 20 * time.Second // how long a new cluster may take to report ok
	stopTimeout         = 10 * time.Second // how long Stop waits before it falls back to SIGKILL
	portBusyTimeout     = 5 * time.Second  // how long a busy fixed port is retried
	logTailLines        = 40               // how many log lines a failure message shows
	installHint         = "redis-server was not found on PATH; run hack/install-deps.sh to install Redis"
)

// RedisConfig says how StartRedis runs a server. Dir is required.
type RedisConfig struct {
	// Dir is the server's working directory; its log goes to Dir/Log.
	Dir string
	// Log is the log file's name in Dir; empty means "redis.log".
	Log string
	// Port is the port to listen on; zero means a free port. A busy fixed
	// port is retried for a few seconds.
	Port int
	// Args are extra command-line arguments, for example "--maxmemory",
	// "10mb". They come after the launcher's own, so they can override them.
	Args []string
	// Conf is a configuration file, passed first: a Sentinel's, say, which
	// the server may rewrite.
	Conf string
	// Cluster adds the cluster-mode flags and keeps the cluster bus port
	// (port+10000) free.
	Cluster bool
}

// Redis is one redis-server process started by StartRedis. Its methods are
// safe to call from several goroutines and in any order.
type Redis struct {
	bin     string
	dir     string
	logPath string
	cfg     RedisConfig

	mu   sync.Mutex
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed once the current process has been reaped
}

// StartRedis runs redis-server on 127.0.0.1 with persistence turned off and
// waits until it answers PING. It fails if redis-server is missing or does
// not come up. The caller ends the process with Kill or Stop.
func StartRedis(cfg RedisConfig) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%s (%w)", installHint, err)
	}
	if cfg.Log == "" {
		cfg.Log = "redis.log"
	}
	s := &Redis{bin: bin, dir: cfg.Dir, logPath: filepath.Join(cfg.Dir, cfg.Log), cfg: cfg}
	if err := s.run(cfg.Port); err != nil {
		return nil, err
	}
	return s, nil
}

// LogPath is the path of the server's log file.
func (s *Redis) LogPath() string { return s.logPath }

// Addr returns the server's address as "127.0.0.1:port".
func (s *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port())) }

// Port returns the TCP port the server listens on.
func (s *Redis) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Pid returns the process ID of the current redis-server process, or 0 if
// none was ever started.
func (s *Redis) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Running reports whether the server process is still alive. A paused
// process counts as running.
func (s *Redis) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

// Client returns a go-redis client connected to the server; the caller
// closes it. Unlike go-redis's default, the client honours context
// deadlines, so a call made with a short context timeout fails quickly.
func (s *Redis) Client() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     s.Addr(),
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Kill sends SIGKILL to the server and waits for it to exit. It works on a
// paused server too, and does nothing if the server is not running.
func (s *Redis) Kill() {
	s.ifRunning(func() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT) // leave nothing stopped behind
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	})
}

// Stop asks the server to shut down with SIGTERM and waits for it to exit.
// A paused server is resumed so it can handle the signal. If it has not
// exited after 10 seconds it is killed. Stop does nothing if the server is
// not running.
func (s *Redis) Stop() {
	s.ifRunning(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		timer := time.NewTimer(stopTimeout)
		defer timer.Stop()
		select {
		case <-s.done:
		case <-timer.C:
			_ = s.cmd.Process.Signal(syscall.SIGKILL)
			<-s.done
		}
	})
}

// Pause freezes the server with SIGSTOP: it keeps its connections and data
// but answers nothing until Resume. Pause returns once the process is
// stopped. It does nothing if the server is not running.
func (s *Redis) Pause() {
	s.ifRunning(func() {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
		s.waitState(true)
	})
}

// Resume continues a server frozen by Pause with SIGCONT. It does nothing if
// the server is not running.
func (s *Redis) Resume() {
	s.ifRunning(func() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.waitState(false)
	})
}

// ifRunning calls f with s.mu held if the server is running.
func (s *Redis) ifRunning(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runningLocked() {
		f()
	}
}

// Restart starts a fresh redis-server on the same port and with the same
// arguments, and waits until it answers PING. A server that is still running
// is killed first. The new server starts empty. Restart fails if the server
// does not come back.
func (s *Redis) Restart() error {
	s.Kill()
	return s.run(s.Port())
}

// run starts the server process and fails if it does not come up.
// With fixed == 0 every try uses a fresh free port, since another process may
// grab a chosen port before redis binds it. A busy fixed port is retried for
// a few seconds, as a server that has just exited may still hold it.
func (s *Redis) run(fixed int) error {
	deadline := time.Now().Add(portBusyTimeout)
	for try := 1; ; try++ {
		port := fixed
		if port == 0 {
			var err error
			if port, err = freePort(s.cfg.Cluster); err != nil {
				return fmt.Errorf("pick a free port: %w", err)
			}
		}
		busy, err := s.launch(port)
		switch {
		case err == nil:
			return nil
		case !busy:
			return err
		case fixed == 0 && try < 20:
		case fixed != 0 && time.Now().Before(deadline):
			time.Sleep(250 * time.Millisecond)
		default:
			return fmt.Errorf("port %d still in use after %d tries: %w", port, try, err)
		}
	}
}

func (s *Redis) runningLocked() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// launch starts one redis-server process on port and waits until it answers
// PING. On failure the process is gone; busy reports whether it failed because
// the port was already taken.
func (s *Redis) launch(port int) (busy bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	args := s.args(port)

	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return false, err
	}
	offset, _ := logFile.Seek(0, io.SeekEnd)
	fmt.Fprintf(logFile, "=== procs: starting redis-server %s\n", strings.Join(quoteArgs(args), " "))

	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	logFile.Close() // the child holds its own copy of the descriptor
	if err != nil {
		return false, fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done, s.port = cmd, done, port

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(readyTimeout)
	for {
		// Wait a little before each PING, so a server that cannot bind its
		// port has exited before we talk to whatever holds that port.
		select {
		case <-done:
			out := s.logSince(offset)
			busy = strings.Contains(out, "Address already in use")
			return busy, fmt.Errorf("redis-server on port %d exited before it answered PING (%v); log %s:\n%s",
				port, cmd.ProcessState, s.logPath, tail(out, logTailLines))
		case <-time.After(20 * time.Millisecond):
		}
		if ping(addr, cmd.Process.Pid) == nil {
			return false, nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
			return false, fmt.Errorf("redis-server on port %d did not answer PING within %v; log %s:\n%s",
				port, readyTimeout, s.logPath, tail(s.logSince(offset), logTailLines))
		}
	}
}

// args are redis-server's arguments for port: the configuration file
// first, then the launcher's own, then the caller's, which can override them.
func (s *Redis) args(port int) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
	}
	if s.cfg.Cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, fmt.Sprintf("nodes-%d.conf", port)),
			"--cluster-node-timeout", "2000",
		)
	}
	args = append(args, s.cfg.Args...)
	if s.cfg.Conf != "" {
		args = append([]string{s.cfg.Conf}, args...)
	}
	return args
}

// waitState waits (briefly) until the process is or is no longer in the
// stopped state, as shown by /proc. Without /proc it returns at once.
func (s *Redis) waitState(stopped bool) {
	path := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		// The state follows the command name, which is wrapped in parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return
		}
		st := b[i+2]
		if st == 'Z' || st == 'X' || (st == 'T' || st == 't') == stopped {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *Redis) logSince(offset int64) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if offset > int64(len(b)) {
		offset = 0
	}
	return string(b[offset:])
}

// Cluster is a set of redis-server processes joined into a Redis Cluster by
// StartCluster. Every node is a master and there are no replicas.
type Cluster struct {
	nodes []*Redis
}

// StartCluster starts masters redis-server processes in cluster mode, joins
// them with "redis-cli --cluster create", and waits until every node reports
// cluster_state:ok with all 16384 slots assigned; their logs go to dir.
// StartCluster fails, leaving no node running, if the cluster does not form.
// The caller ends the nodes with Kill.
func StartCluster(dir string, masters int) (_ *Cluster, err error) {
	if masters < 1 {
		return nil, fmt.Errorf("StartCluster needs at least 1 master, got %d", masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli was not found on PATH; run hack/install-deps.sh to install Redis (%w)", err)
	}
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Kill()
		}
	}()
	for i := 0; i < masters; i++ {
		n, err := StartRedis(RedisConfig{Dir: dir, Log: fmt.Sprintf("redis-%d.log", i), Cluster: true})
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}

	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	// A background context: this only bounds a hung redis-cli, it is not tied to the test.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli %s: %w\n%s%s", strings.Join(args, " "), err, tail(string(out), logTailLines), c.logs())
	}

	if err := c.waitReady(); err != nil {
		return nil, fmt.Errorf("%w%s", err, c.logs())
	}
	return c, nil
}

// Kill kills every node.
func (c *Cluster) Kill() {
	for _, n := range c.nodes {
		n.Kill()
	}
}

// Addrs returns the "127.0.0.1:port" address of every node.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the servers that make up the cluster, so a test can pause,
// kill or restart single nodes. A restarted node reads its nodes-<port>.conf
// again, so it rejoins with the same identity and slots but without data.
func (c *Cluster) Nodes() []*Redis {
	return append([]*Redis(nil), c.nodes...)
}

// Client returns a go-redis cluster client that knows every node; the
// caller closes it. Like Redis.Client, it honours context deadlines.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    c.Addrs(),
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// waitReady polls CLUSTER INFO on every node until each one reports a healthy
// cluster that it fully knows.
func (c *Cluster) waitReady() error {
	deadline := time.Now().Add(clusterReadyTimeout)
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
	}
	var last string
	for {
		ok := true
		for _, n := range c.nodes {
			info, err := clusterInfo(n.Addr())
			if err != nil {
				ok, last = false, fmt.Sprintf("%s: %v", n.Addr(), err)
				break
			}
			for k, v := range want {
				if info[k] != v {
					ok, last = false, fmt.Sprintf("%s: %s is %q, want %q", n.Addr(), k, info[k], v)
					break
				}
			}
			if !ok {
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after %v: %s", clusterReadyTimeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "\n--- log of %s (%s):\n%s", n.Addr(), n.logPath, tail(n.logSince(0), logTailLines))
	}
	return b.String()
}

// freePort asks the kernel for a free loopback port. For cluster nodes the
// port must leave room for the cluster bus port, port+10000, which must be
// free as well.
func freePort(cluster bool) (int, error) {
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !cluster {
			l.Close()
			return port, nil
		}
		if port+10000 <= 65535 {
			if bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err == nil {
				bus.Close()
				l.Close()
				return port, nil
			}
		}
		l.Close()
	}
	return 0, errors.New("no free port pair for a cluster node found")
}

// ping reports an error unless the server at addr answers PING with PONG and
// is the process pid, not some other server that holds the port.
func ping(addr string, pid int) error {
	reply, err := query(addr, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("PING: unexpected reply %q", reply)
	}
	info, err := query(addr, "INFO server")
	if err != nil {
		return err
	}
	if !strings.Contains(info, "\r\nprocess_id:"+strconv.Itoa(pid)+"\r\n") {
		return fmt.Errorf("%s is answered by another process, not pid %d", addr, pid)
	}
	return nil
}

// clusterInfo runs CLUSTER INFO and returns its fields.
func clusterInfo(addr string) (map[string]string, error) {
	body, err := query(addr, "CLUSTER INFO")
	if err != nil {
		return nil, err
	}
	info := map[string]string{}
	for _, line := range strings.Split(body, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			info[k] = v
		}
	}
	return info, nil
}

// query sends one inline command on a new connection and returns the reply,
// which must be a simple string or a bulk string. It needs no client library,
// so it keeps readiness polling quiet and cheap. Its timeouts are short
// because callers poll it in a loop until a longer deadline.
func query(addr, command string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte(command + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	head = strings.TrimRight(head, "\r\n")
	switch {
	case strings.HasPrefix(head, "+"):
		return head[1:], nil
	case strings.HasPrefix(head, "$"):
		n, err := strconv.Atoi(head[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("%s: unexpected reply %q", command, head)
		}
		body := make([]byte, n)
		_, err = io.ReadFull(r, body)
		return string(body), err
	default:
		return "", fmt.Errorf("%s: reply %q", command, head)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d earlier lines)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func quoteArgs(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return q
}
