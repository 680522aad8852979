package identity

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// The key file is read through filewatch and strictdecode, which serve other
// files too: whatever fails in them, what reaches OnError or the caller of
// NewMappedWatcher must not quote the file.
func TestMappedWatcherErrorsQuoteNoKeyMaterial(t *testing.T) {
	bad := []string{
		"keys:\n  - tenant: shop-a\n    key: " + secret + "\n    " + secret + ": 1\n",             // unknown field named like a key
		"keys:\n  - tenant: shop-a\n    Key: " + secret + "\n",                                    // field in the wrong case
		"keys:\n  - tenant: shop-a\n    key: [" + secret + "]\n",                                  // wrong type
		"keys:\n  - tenant: shop-a\n    key: a\n    " + secret + ": 1\n    " + secret + ": 2\n",   // duplicate field
		"keys:\n  - tenant: shop-a\n    key: *" + secret + "\n",                                   // unknown anchor
		"keys:\n  - tenant: shop-a\n    sha256: " + secret + "\n",                                 // key in the digest field
		"keys: [" + secret + "]\n",                                                                // entry not a mapping
		secret + ": []\nkeys: []\n",                                                               // unknown top-level field
		"keys:\n  - tenant: " + secret + "{\n    key: " + secret + "\n",                           // invalid tenant
		"keys:\n  - tenant: a\n    key: " + secret + "\n  - tenant: b\n    key: " + secret + "\n", // same key twice
	}
	dir := t.TempDir()
	for i, content := range bad {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("keys-%d.yaml", i))
			writeFile(t, path, content)
			if _, err := NewMappedWatcher(path, WatcherOptions{}); err == nil || strings.Contains(err.Error(), secret) {
				t.Errorf("NewMappedWatcher: %v", err)
			}

			var errs []error
			writeFile(t, path, "keys: []\n")
			w, err := NewMappedWatcher(path, WatcherOptions{OnError: func(err error) { errs = append(errs, err) }})
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, content)
			w.w.Poll()
			if len(errs) != 1 || strings.Contains(errs[0].Error(), secret) {
				t.Errorf("OnError: %v", errs)
			}
		})
	}
}
