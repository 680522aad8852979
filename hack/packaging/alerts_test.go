package packaging_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The alerting rules: config/prometheus/alerts.yaml for Prometheus without
// the operator, the chart's PrometheusRule (metrics.prometheusRule), their
// promtool unit tests (config/prometheus/alerts_test.yaml) and
// docs/runbook.md.

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRuleFile(t *testing.T) (ruleFile, []byte) {
	t.Helper()
	data, err := os.ReadFile(repoPath("config", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		t.Fatalf("config/prometheus/alerts.yaml: %v", err)
	}
	return f, data
}

// promtool returns the promtool binary (Debian's prometheus package,
// installed by hack/install-deps.sh). Without it the test is skipped, unless
// CI is set: CI must run these tests.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found and CI is set: run hack/install-deps.sh (installs the prometheus package)")
		}
		t.Skip("promtool not found (hack/install-deps.sh installs the prometheus package); skipping the alert rule tests")
	}
	return p
}

// TestAlertRules: the rules pass `promtool check rules` and their unit tests
// (`promtool test rules`); every alert has a summary, a description and a
// runbook section, and its unit tests both expect it to fire and expect it
// silent.
func TestAlertRules(t *testing.T) {
	pt := promtool(t)
	dir := repoPath("config", "prometheus")
	if out, err := run(dir, nil, nil, pt, "check", "rules", "alerts.yaml"); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := run(dir, nil, nil, pt, "test", "rules", "alerts_test.yaml"); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}

	f, _ := readRuleFile(t)
	runbook, err := os.ReadFile(repoPath("docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			Name        string `json:"name"`
			InputSeries []struct {
				Series string `json:"series"`
			} `json:"input_series"`
			AlertRuleTest []struct {
				AlertName string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			} else {
				silent[a.AlertName] = true
			}
		}
	}
	alerts := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s has no %s annotation", r.Alert, a)
				}
			}
			if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
			}
			anchor := strings.ToLower(r.Alert)
			if want := "https://github.com/tollgate-dev/tollgate/blob/main/docs/runbook.md#" + anchor; r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !regexp.MustCompile(`(?m)^## ` + r.Alert + `$`).Match(runbook) {
				t.Errorf("docs/runbook.md has no section \"## %s\"", r.Alert)
			}
			if !fires[r.Alert] {
				t.Errorf("alerts_test.yaml never expects %s to fire", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("alerts_test.yaml never expects %s to stay silent", r.Alert)
			}
		}
	}
	if alerts < 14 {
		t.Errorf("found %d alerts, want at least 14", alerts)
	}
}

// TestChartPrometheusRuleMatchesConfig: the chart's PrometheusRule carries
// the rules of config/prometheus/alerts.yaml when the thresholds keep their
// defaults, and other thresholds reach the expressions, the "for" and the
// descriptions; it is not rendered unless enabled.
func TestChartPrometheusRuleMatchesConfig(t *testing.T) {
	want, _ := readRuleFile(t)
	ruleOf := func(objs []object, name string) ruleFile {
		t.Helper()
		pr := find(objs, "PrometheusRule", name)
		if pr == nil {
			t.Fatalf("no PrometheusRule %s", name)
		}
		spec, err := yaml.Marshal(pr["spec"])
		if err != nil {
			t.Fatal(err)
		}
		var got ruleFile
		if err := yaml.UnmarshalStrict(spec, &got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	objs := decode(t, mustTemplate(t, valueSets[1]))
	if got := ruleOf(objs, "edge-tollgate"); !reflect.DeepEqual(got, want) {
		gy, _ := yaml.Marshal(got)
		wy, _ := yaml.Marshal(want)
		t.Errorf("the chart's PrometheusRule differs from config/prometheus/alerts.yaml:\n%s", firstDiff(string(wy), string(gy)))
	}
	if pr := find(objs, "PrometheusRule", "edge-tollgate"); str(pr, "metadata", "labels", "release") != "kube-prometheus-stack" {
		t.Error("metrics.prometheusRule.labels not on the PrometheusRule")
	}
	if find(decode(t, mustTemplate(t, valueSets[0])), "PrometheusRule", "tollgate") != nil {
		t.Error("the PrometheusRule is rendered by default")
	}

	changed := ruleOf(decode(t, mustTemplate(t, valueSets[1],
		"--set-json", "metrics.prometheusRule.thresholds.redisErrorRatio=0.25",
		"--set", "metrics.prometheusRule.thresholds.breakerOpenFor=7m",
		"--set", "metrics.prometheusRule.runbookURL=https://wiki.example/tollgate")), "edge-tollgate")
	seen := 0
	for _, r := range changed.Groups[0].Rules {
		if !strings.HasPrefix(r.Annotations["runbook_url"], "https://wiki.example/tollgate#") {
			t.Errorf("%s: runbook_url %q ignores metrics.prometheusRule.runbookURL", r.Alert, r.Annotations["runbook_url"])
		}
		switch r.Alert {
		case "TollgateRedisErrorRatioHigh":
			seen++
			if !strings.HasSuffix(r.Expr, "> 0.25") || !strings.Contains(r.Annotations["description"], "threshold 0.25") {
				t.Errorf("redisErrorRatio=0.25 not in %s: %q / %q", r.Alert, r.Expr, r.Annotations["description"])
			}
		case "TollgateRedisBreakerOpen":
			seen++
			if r.For != "7m" || !strings.Contains(r.Annotations["description"], "open for 7m") {
				t.Errorf("breakerOpenFor=7m not in %s: for %q / %q", r.Alert, r.For, r.Annotations["description"])
			}
		}
	}
	if seen != 2 {
		t.Errorf("found %d of the 2 changed alerts", seen)
	}
	// The changed rules still parse.
	if pt, err := exec.LookPath("promtool"); err == nil {
		data, _ := yaml.Marshal(changed)
		path := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run(root, nil, nil, pt, "check", "rules", path); err != nil {
			t.Errorf("promtool check rules on the chart's rules with other thresholds: %v\n%s", err, out)
		}
	}
}
