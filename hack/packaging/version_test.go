package packaging_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// releaseVersion is the VERSION file: the one source of the release version.
func releaseVersion(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(repoPath("VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(data))
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION %q is not a semantic version", v)
	}
	return v
}

// TestVersionsAgree: the chart's appVersion (and so the default image tag),
// the kustomize image tag, the Makefile's image and the binary all follow
// the VERSION file.
func TestVersionsAgree(t *testing.T) {
	want := releaseVersion(t)
	data, err := os.ReadFile(repoPath("charts", "tollgate", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != want {
		t.Errorf("charts/tollgate/Chart.yaml appVersion %q, VERSION %q: change both together", chart.AppVersion, want)
	}
	// The chart's image tag defaults to appVersion.
	values, err := os.ReadFile(repoPath("charts", "tollgate", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^  tag: ""$`).Match(values) {
		t.Error(`values.yaml image.tag must default to "" (the chart's appVersion)`)
	}
	mk, err := os.ReadFile(repoPath("Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`(?m)^VERSION := \$\(shell cat VERSION\)$`, `(?m)^IMG \?= \S+:\$\(VERSION\)$`} {
		if !regexp.MustCompile(re).Match(mk) {
			t.Errorf("the Makefile has no line matching %s", re)
		}
	}
	kust, err := os.ReadFile(repoPath("config", "default", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^  newTag: ` + regexp.QuoteMeta(want) + `$`).Match(kust) {
		t.Errorf("config/default/kustomization.yaml: the image's newTag must be VERSION %s", want)
	}
	// The rendered Deployments run the image of that tag.
	out := mustTemplate(t, valueSets[0])
	if !strings.Contains(out, "image: ghcr.io/tollgate-dev/tollgate:"+want+"\n") {
		t.Errorf("the default render does not run image tag %s", want)
	}
}

// TestImageBinaryVersion: the binary built as the image builds it reports
// the VERSION file and the commit and date given as build arguments.
func TestImageBinaryVersion(t *testing.T) {
	bin := imageBinary(t)
	out, err := run(t.TempDir(), nil, nil, bin, "version", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Version, Commit, GoVersion, BuildDate string
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if info.Version != releaseVersion(t) || info.Commit != imageCommit || info.BuildDate != imageBuildDate || !strings.HasPrefix(info.GoVersion, "go") {
		t.Errorf("tollgate version: %+v", info)
	}
}
