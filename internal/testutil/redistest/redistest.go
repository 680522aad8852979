// Package redistest runs real redis-server processes for tests.
//
// Start launches a single server on a free loopback port and StartCluster
// launches several servers joined into a Redis Cluster. Every process is
// killed when the test that started it ends. Servers keep no data on disk:
// persistence is turned off, so a restarted server always starts empty.
package redistest

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
	"testing"
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

// Option changes how Start runs a server.
type Option func(*config)

type config struct {
	port    int
	args    []string
	conf    string // config file, passed first
	cluster bool   // add cluster flags and keep the cluster bus port (port+10000) usable
}

// WithArgs passes extra command-line arguments to redis-server, for example
// WithArgs("--maxmemory", "10mb"). They come after the helper's own arguments,
// so they can override them.
func WithArgs(extra ...string) Option {
	return func(c *config) { c.args = append(c.args, extra...) }
}

// WithConfig starts the server with a configuration file (the first
// argument), for example a Sentinel's, which it may rewrite.
func WithConfig(path string) Option {
	return func(c *config) { c.conf = path }
}

// WithPort makes the server listen on port p instead of a free port chosen by
// the helper. Start fails the test if the port stays busy.
func WithPort(p int) Option {
	return func(c *config) { c.port = p }
}

// Server is one redis-server process started by Start. Its methods are safe
// to call from several goroutines and in any order.
type Server struct {
	bin     string
	dir     string
	logPath string
	cfg     config

	mu   sync.Mutex
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed once the current process has been reaped
}

// Start runs redis-server on a free 127.0.0.1 port with persistence turned off
// and waits until it answers PING. The process is killed when the test ends.
// Start fails the test if redis-server is missing or does not come up.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: %s (%v)", installHint, err)
	}
	dir := t.TempDir()
	s := &Server{bin: bin, dir: dir, logPath: filepath.Join(dir, "redis.log"), cfg: cfg}
	t.Cleanup(s.Kill)

	s.run(t, cfg.port)
	return s
}

// Addr returns the server's address as "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port())) }

// Port returns the TCP port the server listens on.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Pid returns the process ID of the current redis-server process, or 0 if
// none was ever started.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Running reports whether the server process is still alive. A paused
// process counts as running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

// Client returns a go-redis client connected to the server. Unlike go-redis's
// default, the client honours context deadlines, so a call made with a short
// context timeout fails quickly. The client is closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                     s.Addr(),
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill sends SIGKILL to the server and waits for it to exit. It works on a
// paused server too, and does nothing if the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // leave nothing stopped behind
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Stop asks the server to shut down with SIGTERM and waits for it to exit.
// A paused server is resumed so it can handle the signal. If it has not
// exited after 10 seconds it is killed. Stop does nothing if the server is
// not running.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return
	}
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
}

// Pause freezes the server with SIGSTOP: it keeps its connections and data
// but answers nothing until Resume. Pause returns once the process is
// stopped. It does nothing if the server is not running.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGSTOP)
	s.waitState(true)
}

// Resume continues a server frozen by Pause with SIGCONT. It does nothing if
// the server is not running.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	s.waitState(false)
}

// Restart starts a fresh redis-server on the same port and with the same
// arguments, and waits until it answers PING. A server that is still running
// is killed first. The new server starts empty. Restart fails the test if the
// server does not come back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	s.run(t, s.Port())
}

// run starts the server process and fails the test if it does not come up.
// With fixed == 0 every try uses a fresh free port, since another process may
// grab a chosen port before redis binds it. A busy fixed port is retried for
// a few seconds, as a server that has just exited may still hold it.
func (s *Server) run(t testing.TB, fixed int) {
	t.Helper()
	deadline := time.Now().Add(portBusyTimeout)
	for try := 1; ; try++ {
		port := fixed
		if port == 0 {
			var err error
			if port, err = freePort(s.cfg.cluster); err != nil {
				t.Fatalf("redistest: pick a free port: %v", err)
			}
		}
		busy, err := s.launch(port)
		switch {
		case err == nil:
			return
		case !busy:
			t.Fatalf("redistest: %v", err)
		case fixed == 0 && try < 20:
		case fixed != 0 && time.Now().Before(deadline):
			time.Sleep(250 * time.Millisecond)
		default:
			t.Fatalf("redistest: port %d still in use after %d tries: %v", port, try, err)
		}
	}
}

func (s *Server) runningLocked() bool {
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
func (s *Server) launch(port int) (busy bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
	}
	if s.cfg.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, fmt.Sprintf("nodes-%d.conf", port)),
			"--cluster-node-timeout", "2000",
		)
	}
	args = append(args, s.cfg.args...)
	if s.cfg.conf != "" {
		args = append([]string{s.cfg.conf}, args...)
	}

	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return false, err
	}
	offset, _ := logFile.Seek(0, io.SeekEnd)
	fmt.Fprintf(logFile, "=== redistest: starting redis-server %s\n", strings.Join(quoteArgs(args), " "))

	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
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

// waitState waits (briefly) until the process is or is no longer in the
// stopped state, as shown by /proc. Without /proc it returns at once.
func (s *Server) waitState(stopped bool) {
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

func (s *Server) logSince(offset int64) string {
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
	nodes []*Server
}

// StartCluster starts masters redis-server processes in cluster mode, joins
// them with "redis-cli --cluster create", and waits until every node reports
// cluster_state:ok with all 16384 slots assigned. All nodes are killed when
// the test ends. StartCluster fails the test if the cluster does not form.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("redistest: StartCluster needs at least 1 master, got %d", masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: redis-cli was not found on PATH; run hack/install-deps.sh to install Redis (%v)", err)
	}
	c := &Cluster{}
	for i := 0; i < masters; i++ {
		c.nodes = append(c.nodes, Start(t, func(cfg *config) { cfg.cluster = true }))
	}

	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	// A background context: this only bounds a hung redis-cli, it is not tied to the test.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s%s", strings.Join(args, " "), err, tail(string(out), logTailLines), c.logs())
	}

	if err := c.waitReady(); err != nil {
		t.Fatalf("redistest: %v%s", err, c.logs())
	}
	return c
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
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Client returns a go-redis cluster client that knows every node. Like
// Server.Client, it honours context deadlines. The client is closed when the
// test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    c.Addrs(),
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
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

// quietClientLog drops go-redis's own log lines in tests: they kill and pause
// servers on purpose, and the client's dial errors would otherwise bury the
// test output (hundreds of lines per outage test). Failures still surface as
// errors returned to the code under test.
type quietClientLog struct{}

func (quietClientLog) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietClientLog{}) }
