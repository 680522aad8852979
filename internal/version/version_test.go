package version

import (
	"bytes"
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

func TestGetFromLinkerAndRelease(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "ffffffffffffffffffffffffffffffffffffffff"}, {Key: "vcs.time", Value: "2020-01-01T00:00:00Z"},
	}}
	got := get(bi, "0.3.1", "0123456789abcdef0123456789abcdef01234567", "2026-12-01T12:00:00Z")
	if got.Version != "0.3.1" || got.Commit != "0123456789abcdef0123456789abcdef01234567" || got.BuildDate != "2026-12-01T12:00:00Z" || got.GoVersion != "go1.26.8" {
		t.Errorf("linker values must win over the build information: %+v", got)
	}
	if got.ShortCommit() != "0123456789ab" {
		t.Errorf("ShortCommit = %q", got.ShortCommit())
	}
	if got.SnapshotFormats.WritesDefault != snapshot.DefaultWriteFormat || got.SnapshotFormats.WritesNewest != snapshot.Format ||
		len(got.SnapshotFormats.Reads) != 2 {
		t.Errorf("snapshot formats %+v", got.SnapshotFormats)
	}
}

// Built without -ldflags (go build, go install): the build information.
func TestGetDefaults(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "ffffffffffffffffffffffffffffffffffffffff"}, {Key: "vcs.time", Value: "2020-01-01T00:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	got := get(bi, "0.3.1", "", "")
	if got.Commit != "ffffffffffffffffffffffffffffffffffffffff-dirty" || got.BuildDate != "2020-01-01T00:00:00Z" {
		t.Errorf("VCS stamp not used: %+v", got)
	}
	if got.ShortCommit() != "ffffffffffff-dirty" {
		t.Errorf("ShortCommit = %q", got.ShortCommit())
	}
	// go install module@version, no VERSION file given.
	got = get(&debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, "", "", "")
	if got.Version != "0.4.0" || got.Commit != Unknown || got.BuildDate != Unknown || got.GoVersion == "" {
		t.Errorf("module version: %+v", got)
	}
	// Nothing known.
	got = get(nil, "", "", "")
	if got.Version != "devel" || got.Commit != Unknown || got.BuildDate != Unknown {
		t.Errorf("no build information: %+v", got)
	}
}

func TestOutputs(t *testing.T) {
	info := get(nil, "0.3.1", "abc", "2026-12-01T12:00:00Z")
	var text bytes.Buffer
	if err := info.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tollgate 0.3.1\n", "commit:           abc\n", "build date:       2026-12-01T12:00:00Z\n", "go version:       go", "snapshot formats: reads 1, 2; writes 1 by default"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := info.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Info
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Version != "0.3.1" || back.Commit != "abc" || back.GoVersion != info.GoVersion || back.SnapshotFormats.Reads[1] != 2 {
		t.Errorf("JSON round trip: %+v", back)
	}
	kv := info.KeysAndValues()
	if len(kv) != 8 || kv[0] != "version" || kv[1] != "0.3.1" {
		t.Errorf("KeysAndValues = %v", kv)
	}
}
