package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
// It is 100 on every Linux architecture Go supports without cgo.
const clockTicks = 100

// proc is a child process the harness started: a redis-server, a gateway,
// the controller. Every proc is registered so that killAll can end it, and
// the kernel kills it too if the harness dies (Pdeathsig).
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	err     error // exit status, valid once done is closed
}

var registry = struct {
	sync.Mutex
	procs  map[*proc]bool
	others map[killer]bool // processes started by package procs
	pids   []int           // every process ever started, for the test
}{procs: map[*proc]bool{}, others: map[killer]bool{}}

// killer is a process started by package procs (a redis-server).
type killer interface {
	Pid() int
	Kill()
}

// track registers a process started by package procs, so that killAll ends
// it; call it again after a restart, for the new process id.
func track(k killer) {
	registry.Lock()
	defer registry.Unlock()
	registry.others[k] = true
	if pid := k.Pid(); pid != 0 {
		registry.pids = append(registry.pids, pid)
	}
}

// startProc starts bin with args, its output going to logPath.
func startProc(name, logPath, bin string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a Ctrl-C in the terminal reaches only the
	// harness, which then stops everything in order; and SIGKILL if the
	// harness dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	registry.Lock()
	defer registry.Unlock()
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	registry.procs[p] = true
	registry.pids = append(registry.pids, cmd.Process.Pid)
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		registry.Lock()
		delete(registry.procs, p)
		registry.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (p *proc) Kill() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, waits up to grace, then kills.
func (p *proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// exitError describes an unexpected exit, with the end of the log.
func (p *proc) exitError() error {
	return fmt.Errorf("%s exited early (%v); last lines of %s:\n%s", p.name, p.err, p.logPath, tail(p.logPath, 15))
}

// killAll kills every process still running; it is safe to call more than
// once and from the signal handler's goroutine.
func killAll() {
	registry.Lock()
	var ps []killer
	for p := range registry.procs {
		ps = append(ps, p)
	}
	for k := range registry.others {
		ps = append(ps, k)
	}
	registry.others = map[killer]bool{}
	registry.Unlock()
	for _, p := range ps {
		p.Kill()
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// memStatus returns VmRSS and VmHWM (peak RSS) in bytes.
func memStatus(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 1 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm, nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
