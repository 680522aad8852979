package cmd

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/version"
)

func TestVersionCommand(t *testing.T) {
	version.SetRelease("9.8.7\n")
	run := func(args ...string) (string, error) {
		root := newRoot("tollgate")
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}
	out, err := run("version")
	if err != nil || !strings.HasPrefix(out, "tollgate 9.8.7\n") || !strings.Contains(out, "snapshot formats:") {
		t.Fatalf("version: %v\n%s", err, out)
	}
	out, err = run("version", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var info version.Info
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Version != "9.8.7" || info.GoVersion == "" || info.Commit == "" {
		t.Fatalf("version --output json: %v %+v\n%s", err, info, out)
	}
	if _, err := run("version", "--output", "yaml"); err == nil || !strings.Contains(err.Error(), "--output") {
		t.Errorf("--output yaml: %v, want an error naming --output", err)
	}
}
