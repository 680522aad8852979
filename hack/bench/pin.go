package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pinning is how the latency scenario places processes on CPUs: the
// measured process (the gateway, the floors, nginx) alone on one CPU, and
// this harness (load generator, echo upstream) and Redis on the others, so
// that CPU per request does not depend on where the scheduler puts the
// load generator. It needs taskset and at least two CPUs this process may
// use; otherwise why says what was missing and nothing is pinned.
type pinning struct {
	measured string // the measured process's CPU, as taskset -c takes it
	rest     string // the other CPUs
	all      string // every CPU this process could use at the start
	why      string // set when pinning is not possible
}

// detectPinning finds taskset and this process's CPUs.
func detectPinning() pinning {
	if _, err := exec.LookPath("taskset"); err != nil {
		return pinning{why: "taskset is not installed (util-linux)"}
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return pinning{why: "reading the CPU affinity: " + err.Error()}
	}
	var cpus []string
	for i := 0; i < 1024; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, strconv.Itoa(i))
		}
	}
	if len(cpus) < 2 {
		return pinning{why: fmt.Sprintf("only %d CPU available", len(cpus))}
	}
	last := len(cpus) - 1
	return pinning{measured: cpus[last], rest: strings.Join(cpus[:last], ","), all: strings.Join(cpus, ",")}
}

// ok reports whether processes can be pinned.
func (p pinning) ok() bool { return p.why == "" }

// describe says how the measured processes ran, for the report.
func (p pinning) describe() string {
	if !p.ok() {
		return "not pinned: " + p.why
	}
	return fmt.Sprintf("pinned with taskset: the measured process on CPU %s; the load generator, the echo upstream and Redis on CPU %s", p.measured, p.rest)
}

// command returns bin and args to start a measured process: under
// `taskset -c <measured>` when pinning is possible (taskset execs bin, so
// the process id stays the one whose CPU the harness reads).
func (p pinning) command(bin string, args ...string) (string, []string) {
	if !p.ok() {
		return bin, args
	}
	return "taskset", append([]string{"-c", p.measured, bin}, args...)
}

// pinSelf moves every thread of this process (and what it starts from now
// on) to the other CPUs; the returned function moves them back to every
// CPU. A no-op when pinning is not possible.
func (p pinning) pinSelf() (restore func(), err error) {
	if !p.ok() {
		return func() {}, nil
	}
	if err := setAffinity(os.Getpid(), p.rest); err != nil {
		return nil, err
	}
	return func() { _ = setAffinity(os.Getpid(), p.all) }, nil
}

// setAffinity sets the CPUs of every thread of pid (taskset -a).
func setAffinity(pid int, cpus string) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset -a -p -c %s %d: %w: %s", cpus, pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}
