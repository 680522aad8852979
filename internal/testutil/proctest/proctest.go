// Package proctest runs the processes of a process test (tollgate, an
// exporter, Prometheus) with the output of each in a log file of its own,
// and polls them: one way to start, stop and wait for them, for every
// suite that starts processes.
package proctest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Proc is one process of a test: Bin with Args, its output appended to Log.
type Proc struct {
	Name string
	Bin  string
	Args []string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// New is a process not started yet, logging to dir/name.log.
func New(dir, name, bin string, args ...string) *Proc {
	return &Proc{Name: name, Bin: bin, Args: args, Log: filepath.Join(dir, name+".log")}
}

// Start starts the process (again, after Stop), its output appended to Log.
func (p *Proc) Start() error {
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	return nil
}

// Stop interrupts the process and waits for it to exit, killing it after
// grace; nothing when it is not running.
func (p *Proc) Stop(grace time.Duration) {
	if p.cmd == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill kills the process and waits for it to exit; nothing when it is not
// running.
func (p *Proc) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Done is closed when the process started last has exited (nil before
// Start).
func (p *Proc) Done() <-chan struct{} { return p.done }

// Tail is the end of the process's log, at most n bytes.
func (p *Proc) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Eventually polls cond every interval until it holds, for at most within;
// then it fails t with what and the tails of the logs' processes.
func Eventually(t testing.TB, within, interval time.Duration, what string, cond func() bool, logs ...*Proc) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			var tails []string
			for _, p := range logs {
				tails = append(tails, p.Name+":\n"+p.Tail(4000))
			}
			t.Fatalf("timed out waiting: %s\n%s", what, strings.Join(tails, "\n"))
		}
		time.Sleep(interval)
	}
}

// Status is the status code of a GET of url, 0 when the request fails.
func Status(url string) int {
	res, err := http.Get(url)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// FreeAddr is "127.0.0.1:<port>" with a port free when it returns.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
