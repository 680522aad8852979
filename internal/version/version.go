// Package version reports which tollgate is running: its release version,
// the commit it was built from, the Go version and the build date, and the
// rule snapshot formats it reads and writes.
//
// The release version comes from the repository's VERSION file, which
// main.go embeds (the one source: the Makefile reads it for the image tag, and
// the chart's appVersion must equal it). The commit and build date are set
// by the linker (-X, see GO_BUILD_FLAGS in the Makefile and the Dockerfile);
// a binary built without them (go build, go install) takes them from the
// build information Go records: the VCS revision and commit time, or
// "unknown".
package version

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Set by the linker: -X github.com/tollgate-dev/tollgate/internal/version.commit=...
var (
	commit    string
	buildDate string
)

// release is the VERSION file's content, given by main (SetRelease).
var release string

// SetRelease records the content of the VERSION file.
func SetRelease(v string) { release = strings.TrimSpace(v) }

// Unknown is reported for what neither the linker nor Go's build
// information tells.
const Unknown = "unknown"

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	BuildDate string `json:"buildDate"`
	Platform  string `json:"platform"`
	// SnapshotFormats are the rule snapshot formats the gateway reads, and
	// the one the controller writes unless --snapshot-format says otherwise.
	SnapshotFormats Formats `json:"snapshotFormats"`
}

// Formats are the snapshot formats of a build.
type Formats struct {
	Reads         []int `json:"reads"`
	WritesDefault int   `json:"writesDefault"`
	WritesNewest  int   `json:"writesNewest"`
}

// Get returns the running binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return get(bi, release, commit, buildDate)
}

func get(bi *debug.BuildInfo, release, linkCommit, linkDate string) Info {
	info := Info{
		Version:   release,
		Commit:    linkCommit,
		BuildDate: linkDate,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
		SnapshotFormats: Formats{
			Reads:         snapshot.ReadFormats(),
			WritesDefault: snapshot.DefaultWriteFormat,
			WritesNewest:  snapshot.Format,
		},
	}
	if bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		var rev, when string
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if info.Commit == "" && rev != "" {
			info.Commit = rev
			if modified {
				info.Commit += "-dirty"
			}
		}
		if info.BuildDate == "" {
			info.BuildDate = when
		}
		// go install module@v1.2.3 records the module version.
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = strings.TrimPrefix(bi.Main.Version, "v")
		}
	}
	info.Version = firstNonEmpty(info.Version, "devel")
	info.Commit = firstNonEmpty(info.Commit, Unknown)
	info.BuildDate = firstNonEmpty(info.BuildDate, Unknown)
	return info
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// ShortCommit is the commit's first 12 characters (and a -dirty suffix).
func (i Info) ShortCommit() string {
	c, dirty := strings.CutSuffix(i.Commit, "-dirty")
	if len(c) > 12 {
		c = c[:12]
	}
	if dirty {
		c += "-dirty"
	}
	return c
}

// KeysAndValues are Info as logr key/value pairs, for the start log line.
func (i Info) KeysAndValues() []any {
	return []any{"version", i.Version, "commit", i.Commit, "goVersion", i.GoVersion, "buildDate", i.BuildDate}
}

// WriteText writes Info for people.
func (i Info) WriteText(w io.Writer) error {
	reads := make([]string, len(i.SnapshotFormats.Reads))
	for n, f := range i.SnapshotFormats.Reads {
		reads[n] = fmt.Sprint(f)
	}
	_, err := fmt.Fprintf(w, `tollgate %s
  commit:           %s
  go version:       %s
  build date:       %s
  platform:         %s
  snapshot formats: reads %s; writes %d by default (newest %d, --snapshot-format)
`, i.Version, i.Commit, i.GoVersion, i.BuildDate, i.Platform,
		strings.Join(reads, ", "), i.SnapshotFormats.WritesDefault, i.SnapshotFormats.WritesNewest)
	return err
}

// WriteJSON writes Info as one indented JSON object.
func (i Info) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(i)
}
