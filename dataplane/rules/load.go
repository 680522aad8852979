package rules

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/lib/filewatch"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// maxFileSize bounds one rule file, well above 100,000 rules.
const maxFileSize = 64 << 20

// isRuleFile reports whether a directory entry is read as a rule file.
func isRuleFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// ruleFile is one file read from the rule path.
type ruleFile struct {
	name string // the path, for messages
	data []byte
}

// readRuleFiles reads path, a rule file or a directory of them, and returns
// the files in name order and a hash of their names and contents.
//
// In a directory only regular files (or symlinks to them) with a rule
// extension are read; hidden entries are skipped, which leaves out the
// "..data" links of a ConfigMap volume, and so are entries that vanish while
// they are read (the volume's symlinks are being swapped). Subdirectories are
// not read.
func readRuleFiles(path string) ([]ruleFile, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	info, err := os.Stat(path)
	if err != nil {
		return nil, sum, fmt.Errorf("rule path: %w", err)
	}
	var files []ruleFile
	if !info.IsDir() {
		data, err := readFile(path)
		if err != nil {
			return nil, sum, err
		}
		files = append(files, ruleFile{name: path, data: data})
	} else {
		entries, err := os.ReadDir(path) // sorted by name
		if err != nil {
			return nil, sum, fmt.Errorf("rule directory: %w", err)
		}
		for _, e := range entries {
			name := e.Name()
			if !isRuleFile(name) {
				continue
			}
			full := filepath.Join(path, name)
			if fi, err := os.Stat(full); err != nil || !fi.Mode().IsRegular() {
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					return nil, sum, fmt.Errorf("rule file: %w", err)
				}
				continue
			}
			data, err := readFile(full)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, sum, err
			}
			files = append(files, ruleFile{name: full, data: data})
		}
	}
	h := sha256.New()
	for _, f := range files {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f.name)))
		h.Write(n[:])
		h.Write([]byte(f.name))
		binary.BigEndian.PutUint64(n[:], uint64(len(f.data)))
		h.Write(n[:])
		h.Write(f.data)
	}
	h.Sum(sum[:0])
	return files, sum, nil
}

// readFile reads one file of at most maxFileSize bytes.
func readFile(path string) ([]byte, error) {
	data, err := filewatch.ReadFile(path, maxFileSize)
	if err != nil {
		return nil, fmt.Errorf("rule file: %w", err)
	}
	return data, nil
}

// loadFiles parses and compiles rule files at the time now (rules whose
// spec.expiresAt is not after now are left out). The error lists every
// problem found; warnings report rules that lose a conflict or expired.
func loadFiles(files []ruleFile, now time.Time) (*compiled, error) {
	var ms []manifest
	var errs []error
	for _, f := range files {
		fms, err := parseManifests(f.name, f.data)
		if err != nil {
			errs = append(errs, err)
		}
		ms = append(ms, fms...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return compileManifests(ms, now)
}

// compileManifests compiles manifests at the time now like the controller
// compiles the objects of a cluster, failing where kubectl apply would have
// been refused: on an invalid spec, or two manifests of the same
// namespace/name. A rule that loses a conflict for its tenant+route (to the
// first in namespace/name order, files having no creation time) is left out
// with a warning, as the controller leaves it out with reason Conflict; so
// is a rule whose spec.expiresAt has passed (reason Expired), and the
// result's next says when the next one expires.
func compileManifests(ms []manifest, now time.Time) (*compiled, error) {
	items := make([]v1alpha1.RateLimitRule, len(ms))
	where := make(map[string]string, len(ms)) // namespace/name -> loc
	var errs []error
	for i := range ms {
		key := ms[i].obj.Namespace + "/" + ms[i].obj.Name
		if first, dup := where[key]; dup {
			errs = append(errs, fmt.Errorf("%s: RateLimitRule %s is already defined at %s", ms[i].loc, key, first))
			continue
		}
		where[key] = ms[i].loc
		items[i] = ms[i].obj
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	rules, verdicts, next := snapshot.CompileAt(items, now)
	var warnings []string
	var winners map[[3]string]string // kind+tenant+route -> namespace/name, on demand
	for i, v := range verdicts {
		switch {
		case v.Accepted:
		case v.Reason == v1alpha1.ReasonConflict:
			spec := &items[i].Spec
			if winners == nil {
				winners = make(map[[3]string]string, len(rules))
				for _, r := range rules {
					winners[[3]string{r.Kind(), r.Tenant, r.Route}] = r.Source
				}
			}
			kind := ""
			if r, err := snapshot.FromSpec(spec, ""); err == nil {
				kind = r.Kind()
			}
			winner := winners[[3]string{kind, spec.Tenant, spec.Route}]
			warnings = append(warnings, fmt.Sprintf(
				"%s: RateLimitRule %s/%s is ignored: tenant %q route %q is already limited by %s (%s), which comes first in namespace/name order",
				ms[i].loc, items[i].Namespace, items[i].Name, spec.Tenant, spec.Route, winner, where[winner]))
		case v.Reason == v1alpha1.ReasonExpired:
			warnings = append(warnings, fmt.Sprintf("%s: RateLimitRule %s/%s is not in force: %s", ms[i].loc, items[i].Namespace, items[i].Name, v.Message))
		default: // snapshot.ReasonInvalid, or anything this code does not know
			errs = append(errs, fmt.Errorf("%s: %s", ms[i].loc, v.Message))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &compiled{rules: rules, warnings: warnings, ms: ms, next: next}, nil
}
