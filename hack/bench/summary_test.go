package main

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSummary: the end-of-run summary lists every target with its figure
// and met / MISSED / n/a on one line each, within the terminal width, with
// the counts and the report's path.
func TestSummary(t *testing.T) {
	h := &harness{res: &Results{
		Propagation: &PropagationResult{Changes: 3, P99: 1500, P50: 200},
		Outage:      &OutageResult{OpenAfterMs: 40, PollMs: 5, During: &loadResult{Sent: 10}, Before: &loadResult{Sent: 10}},
	}}
	checks := h.checkTargets()
	out := summary(checks, ".bench/report.md", []string{".bench/outage.png"})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(checks)+3 {
		t.Fatalf("%d lines for %d targets:\n%s", len(lines), len(checks), out)
	}
	if len(lines) > 40 {
		t.Errorf("%d lines: not one screen", len(lines))
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > summaryWidth {
			t.Errorf("line of %d runes: %q", n, l)
		}
	}
	if !strings.Contains(lines[0], "1 missed") || !strings.Contains(lines[0], "met") {
		t.Errorf("first line %q", lines[0])
	}
	for _, c := range checks {
		want := map[string]string{"met": "met", "missed": "MISSED", "n/a": "n/a"}[c.Status]
		found := false
		for _, l := range lines[1 : len(lines)-2] {
			if strings.Contains(l, clip(c.What, 50)) && strings.Contains(l, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s line for %q:\n%s", want, c.What, out)
		}
	}
	if !strings.Contains(out, "report: .bench/report.md") || !strings.Contains(out, ".bench/outage.png") {
		t.Errorf("no report or plot path:\n%s", out)
	}
}
