package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// summaryWidth bounds the summary's lines, so that it fits a terminal.
const summaryWidth = 132

// summary is the one-screen end of a run: every target, its threshold, the
// figure this run measured and met / MISSED / n/a, then where the report
// and the plots are. report.md has the details.
func summary(checks []TargetCheck, report string, plots []string) string {
	var b strings.Builder
	count := map[string]int{}
	for _, c := range checks {
		count[c.Status]++
	}
	fmt.Fprintf(&b, "\ntargets: %d met, %d missed, %d not measured (n/a)\n", count["met"], count["missed"], count["n/a"])
	for _, c := range checks {
		status := c.Status
		if status == "missed" {
			status = "MISSED"
		}
		line := fmt.Sprintf("  %-6s  %s  %s  %s", status, pad(c.What, 50), pad(c.Target, 20), c.Measured)
		b.WriteString(clip(line, summaryWidth) + "\n")
	}
	fmt.Fprintf(&b, "report: %s\n", report)
	if len(plots) > 0 {
		fmt.Fprintf(&b, "plots:  %s (BENCHMARKS.md shows the last full run's, in docs/bench/)\n", strings.Join(plots, ", "))
	}
	return b.String()
}

// pad cuts or pads s to n runes.
func pad(s string, n int) string {
	s = clip(s, n)
	return s + strings.Repeat(" ", n-utf8.RuneCountInString(s))
}

// clip cuts s to n runes, marking the cut with an ellipsis.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
