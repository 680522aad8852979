package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMain fails the run if any redis-server child process or any goroutine
// from this package or go-redis outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := checkLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "leak check:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func checkLeaks() error {
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = leaks(); err == nil {
			return nil
		}
	}
	return err
}

func leaks() error {
	me := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		if f := strings.Fields(string(b[i+1:])); len(f) > 1 && f[1] == me {
			return fmt.Errorf("child process still alive: %s", b)
		}
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	stacks := strings.Split(string(buf), "\n\n")
	for _, g := range stacks[1:] { // stacks[0] is this goroutine
		if strings.Contains(g, "github.com/redis/go-redis") || strings.Contains(g, "internal/testutil/redistest.") || strings.Contains(g, "internal/procs.") {
			return fmt.Errorf("goroutine still running:\n%s", g)
		}
	}
	return nil
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually retries f until it returns nil or 10 seconds pass.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("%s: still failing after 10s: %v", what, err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func TestStartSetGet(t *testing.T) {
	s := Start(t)
	if !s.Running() || s.Pid() <= 0 || s.Port() <= 0 {
		t.Fatalf("Running=%v Pid=%d Port=%d", s.Running(), s.Pid(), s.Port())
	}
	if want := "127.0.0.1:" + strconv.Itoa(s.Port()); s.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", s.Addr(), want)
	}
	c := s.Client(t)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v", got, err)
	}
	// Persistence is off.
	if got := c.ConfigGet(ctx, "appendonly").Val()["appendonly"]; got != "no" {
		t.Fatalf("appendonly = %q", got)
	}
	if got, ok := c.ConfigGet(ctx, "save").Val()["save"]; !ok || got != "" {
		t.Fatalf("save = %q (present %v)", got, ok)
	}
}

func TestOptions(t *testing.T) {
	s := Start(t, WithArgs("--maxmemory", "10mb"))
	ctx := ctxTimeout(t, 10*time.Second)
	if got := s.Client(t).ConfigGet(ctx, "maxmemory").Val()["maxmemory"]; got != strconv.Itoa(10<<20) {
		t.Fatalf("maxmemory = %q", got)
	}
	port := s.Port()
	s.Kill()
	s2 := Start(t, WithPort(port))
	if s2.Port() != port {
		t.Fatalf("WithPort(%d) gave port %d", port, s2.Port())
	}
	if err := s2.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestPauseResume(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	if err := c.Set(ctxTimeout(t, 10*time.Second), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.Pause()
	if !s.Running() {
		t.Fatal("paused server should count as running")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	err := c.Get(ctx, "k").Err()
	cancel()
	if !isTimeout(err) {
		t.Fatalf("GET on paused server: got %v, want a timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("GET with a 200ms timeout took %v", d)
	}

	s.Resume()
	eventually(t, "GET after Resume", func() error {
		got, err := c.Get(ctxTimeout(t, 5*time.Second), "k").Result()
		if err == nil && got != "v" {
			err = fmt.Errorf("got %q", got)
		}
		return err
	})
}

func TestKillRestart(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	port, pid := s.Port(), s.Pid()

	s.Kill()
	s.Kill() // idempotent
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	// A pooled connection may first report that the old server went away;
	// a fresh dial must then be refused.
	eventually(t, "connection refused after Kill", func() error {
		err := c.Ping(ctx).Err()
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("got %v, want connection refused", err)
		}
		return nil
	})

	s.Restart(t)
	if !s.Running() || s.Port() != port || s.Pid() == pid {
		t.Fatalf("after Restart: Running=%v Port=%d (was %d) Pid=%d (was %d)", s.Running(), s.Port(), port, s.Pid(), pid)
	}
	eventually(t, "PING after Restart", func() error { return c.Ping(ctx).Err() })
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: got %v, want redis.Nil (data must be gone)", err)
	}
}

func TestStopRestart(t *testing.T) {
	s := Start(t)
	s.Pause()
	s.Stop() // must not hang on a paused server
	if s.Running() {
		t.Fatal("Running after Stop")
	}
	s.Stop()
	s.Pause() // Pause and Resume do nothing on a dead server
	s.Resume()
	s.Restart(t)
	if err := s.Client(t).Ping(ctxTimeout(t, 10*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestKillPausedAndCleanup(t *testing.T) {
	var pids []int
	t.Run("leave", func(t *testing.T) {
		a, b := Start(t), Start(t)
		a.Pause()
		b.Pause()
		b.Kill() // Kill works on a paused server
		if b.Running() {
			t.Fatal("Running after Kill of a paused server")
		}
		pids = append(pids, a.Pid(), b.Pid()) // a is left paused for cleanup
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after cleanup (kill 0: %v)", pid, err)
		}
	}
}

// fatalRecorder captures Fatalf instead of failing the real test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec)
	}()
	<-done
	if !strings.Contains(rec.msg, "hack/install-deps.sh") {
		t.Fatalf("Fatalf message %q does not mention hack/install-deps.sh", rec.msg)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Addrs()) != 3 || len(c.Nodes()) != 3 {
		t.Fatalf("Addrs=%v Nodes=%d", c.Addrs(), len(c.Nodes()))
	}
	ctx := ctxTimeout(t, 60*time.Second)
	node := c.Nodes()[0].Client(t)
	sx, err1 := node.ClusterKeySlot(ctx, "{a}x").Result()
	sy, err2 := node.ClusterKeySlot(ctx, "{a}y").Result()
	if err := errors.Join(err1, err2); err != nil || sx != sy {
		t.Fatalf("CLUSTER KEYSLOT {a}x=%d {a}y=%d err=%v", sx, sy, err)
	}

	cc := c.Client(t)
	for i := range 100 {
		if err := cc.Set(ctx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key-%d: %v", i, err)
		}
	}
	for i := range 100 {
		if got, err := cc.Get(ctx, fmt.Sprintf("key-%d", i)).Int(); err != nil || got != i {
			t.Fatalf("GET key-%d = %d, %v", i, got, err)
		}
	}

	// Map each key to its owner via CLUSTER KEYSLOT and CLUSTER SLOTS.
	slots, err := node.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner := map[int64]string{}
	for _, r := range slots {
		for s := r.Start; s <= r.End; s++ {
			owner[int64(s)] = r.Nodes[0].Addr
		}
	}
	if len(owner) != 16384 {
		t.Fatalf("CLUSTER SLOTS covers %d slots, want 16384", len(owner))
	}
	holders := map[string]int{}
	for i := range 100 {
		slot, err := node.ClusterKeySlot(ctx, fmt.Sprintf("key-%d", i)).Result()
		if err != nil {
			t.Fatal(err)
		}
		holders[owner[slot]]++
	}
	if len(holders) < 2 {
		t.Fatalf("keys landed on %d node(s): %v", len(holders), holders)
	}
	// Each node really stores the keys CLUSTER SLOTS says it owns.
	for _, n := range c.Nodes() {
		size, err := n.Client(t).DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if int(size) != holders[n.Addr()] {
			t.Fatalf("node %s holds %d keys, want %d (%v)", n.Addr(), size, holders[n.Addr()], holders)
		}
	}
	t.Logf("keys per node: %v", holders)
}
