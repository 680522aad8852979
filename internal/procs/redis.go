// Package procs launches the processes that tollgate's tests, benchmark
// harness and demo run next to the code under test: redis-server (a single
// server, a cluster node, or a Sentinel from its configuration file; the
// cluster itself is internal/procs/cluster) and an
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
	readyTimeout    = 10 * time.Second // how long a new server may take to answer PING
	stopTimeout     = 10 * time.Second // how long Stop waits before it falls back to SIGKILL
	portBusyTimeout = 5 * time.Second  // how long a busy fixed port is retried
	logTailLines    = 40               // how many log lines a failure message shows
	installHint     = "redis-server was not found on PATH; run hack/install-deps.sh to install Redis"
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

// Query sends one inline command to the server on a new connection and
// returns its reply, a simple or bulk string (readiness polling, CLUSTER
// INFO): no client library, short timeouts, for callers that poll.
func (s *Redis) Query(command string) (string, error) { return query(s.Addr(), command) }

// LogTail returns the last lines of the server's log, for failure messages.
func (s *Redis) LogTail() string { return tail(s.logSince(0), logTailLines) }

// Tail returns the last lines of a command's output, as LogTail does of a
// log.
func Tail(out string) string { return tail(out, logTailLines) }

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
