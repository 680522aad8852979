package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/lib/strictdecode"
)

// maxFileSize bounds what the MappedWatcher reads. Secrets are
// limited to 1 MiB, so this only guards against pointing at the wrong file.
const maxFileSize = 4 << 20

// Mapped is a Resolver that maps API keys to tenant ids, read from a key file
// (YAML or JSON), typically mounted from a Secret:
//
//	keys:
//	  - tenant: shop-a      # required; see v1alpha1.ValidIdentifier
//	    sha256: 9f86d0...   # hex SHA-256 of the key (64 digits, any case) ...
//	  - tenant: shop-b
//	    key: s3cr3t-key     # ... or the raw key (1-512 printable ASCII)
//
// Prefer sha256: then the file holds no usable secret. Each entry has exactly
// one of sha256 and key; a tenant may have several entries (key rotation), but
// a key may appear only once. Unknown fields are errors, and so is a file
// without a top-level "keys" list; "keys: []" is valid and knows no key.
//
// Only SHA-256 digests are kept in memory, and the key never reaches Redis:
// the tenant id does. A Mapped is immutable and safe for concurrent use; a nil
// *Mapped knows no key.
type Mapped struct {
	tenants map[[sha256.Size]byte]string
}

// Tenant returns the tenant of key, or ErrUnknownKey. It costs one SHA-256 of
// the key and one map lookup, and does not allocate for keys accepted by APIKey.
func (m *Mapped) Tenant(key string) (string, error) {
	if m == nil {
		return "", ErrUnknownKey
	}
	// Hash a stack copy: []byte(key) would allocate for keys over 32 bytes.
	var buf [MaxKeyLength]byte
	var sum [sha256.Size]byte
	if len(key) <= len(buf) {
		sum = sha256.Sum256(buf[:copy(buf[:], key)])
	} else {
		sum = sha256.Sum256([]byte(key))
	}
	if t, ok := m.tenants[sum]; ok {
		return t, nil
	}
	return "", ErrUnknownKey
}

// Len is the number of keys.
func (m *Mapped) Len() int {
	if m == nil {
		return 0
	}
	return len(m.tenants)
}

// entry is a key file entry. Pointers tell null (not a string) from
// absent.
type entry struct {
	Tenant *string `json:"tenant"`
	SHA256 *string `json:"sha256"`
	Key    *string `json:"key"`
}

// ParseMapped parses and validates a key file (see Mapped). Every problem is
// reported, one per line, naming the entry and the field, e.g.
//
//	keys[2]: sha256: must be 64 hex digits
//
// Errors never quote the file: not keys, digests, tenants or unknown field
// names (a key pasted as a field name would leak), and YAML syntax errors are
// reduced to their line number when the parser's message could quote content.
func ParseMapped(data []byte) (*Mapped, error) {
	js, err := strictdecode.YAMLToJSON(data)
	if err != nil {
		return nil, syntaxError(err)
	}
	// Decode one field at a time: this gives errors naming entry and
	// field, and quoting nothing of the file.
	var file struct {
		Keys []json.RawMessage `json:"keys"`
	}
	top, ok := strictdecode.Fields(js, &file)
	if !ok || top.Null {
		return nil, errors.New(`must be a mapping with a "keys" list`)
	}
	var errs []error
	for i, e := range top.Errors {
		switch {
		case e.Problem == strictdecode.Invalid:
			return nil, errors.Join(append(errs, errors.New("keys: must be a list"))...)
		case i == 0: // unknown fields come first; one message for all
			errs = append(errs, errors.New(`unknown top-level field (the only field is "keys")`))
		}
	}
	if !top.Has("keys") {
		return nil, errors.Join(append(errs, errors.New(`keys: missing (use "keys: []" for no keys)`))...)
	}
	items := file.Keys

	m := &Mapped{tenants: make(map[[sha256.Size]byte]string, len(items))}
	seen := make(map[[sha256.Size]byte]int, len(items))
	for i, item := range items {
		tenant, sum, field, eerrs := parseEntry(i, item)
		if len(eerrs) == 0 {
			if j, dup := seen[sum]; dup {
				eerrs = append(eerrs, fmt.Errorf("keys[%d]: %s: same key as keys[%d]", i, field, j))
			} else {
				seen[sum] = i
				m.tenants[sum] = tenant
			}
		}
		errs = append(errs, eerrs...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m, nil
}

// parseEntry validates entry i. It returns the tenant, the digest of the key,
// the field the key came from, and every problem found.
func parseEntry(i int, raw json.RawMessage) (tenant string, sum [sha256.Size]byte, field string, errs []error) {
	var e entry
	fields, ok := strictdecode.Fields(raw, &e)
	if !ok || fields.Null {
		return "", sum, "", []error{fmt.Errorf("keys[%d]: must be a mapping", i)}
	}
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("keys[%d]: "+format, append([]any{i}, args...)...))
	}
	// Unknown field names are not quoted: a key pasted as one would leak.
	// A field of the wrong type is reported below, as not a valid value.
	for _, u := range fields.Errors {
		switch {
		case u.Problem != strictdecode.Unknown:
		case u.Like != "":
			fail("unknown field (did you mean %q?)", u.Like)
		default:
			fail("unknown field (fields are tenant, sha256 and key)")
		}
	}

	if !fields.Has("tenant") {
		fail("tenant: missing")
	} else if e.Tenant == nil || !v1alpha1.ValidIdentifier(*e.Tenant) {
		fail("tenant: must be a valid id (1-64 characters [A-Za-z0-9._-], starting with a letter or digit)")
	} else {
		tenant = *e.Tenant
	}

	hasSum, hasKey := fields.Has("sha256"), fields.Has("key")
	switch {
	case hasSum && hasKey:
		fail("exactly one of sha256 and key is allowed, not both")
	case hasSum:
		field = "sha256"
		if e.SHA256 == nil || len(*e.SHA256) != 2*sha256.Size {
			fail("sha256: must be 64 hex digits (the SHA-256 of the key)")
		} else if _, err := hex.Decode(sum[:], []byte(*e.SHA256)); err != nil {
			fail("sha256: must be 64 hex digits (the SHA-256 of the key)")
		}
	case hasKey:
		field = "key"
		if e.Key == nil {
			fail("key: must be a string (quote it)")
		} else if !validKey(*e.Key) {
			fail("key: must be 1-%d printable ASCII characters (0x21-0x7e)", MaxKeyLength)
		} else {
			sum = sha256.Sum256([]byte(*e.Key))
		}
	default:
		fail("one of sha256 and key is required")
	}
	return tenant, sum, field, errs
}

var (
	// yamlSafe matches YAML errors that are a line and a fixed message of
	// the scanner or parser; they quote at most single characters.
	yamlSafe = regexp.MustCompile(`^yaml: ((?:line \d+: )?(?:[A-Za-z0-9 ,.<>%-]|'[^']')+)$`)
	// yamlLine finds the line number in other YAML errors.
	yamlLine = regexp.MustCompile(`^yaml: (?:unmarshal errors:\n\s*)?line (\d+): `)
)

// syntaxError turns an error of YAML decoding into one that quotes no input.
// Some YAML errors quote content (unknown anchors, duplicate map keys,
// unsupported keys), which in a key file may be a key: those keep only their
// line number.
func syntaxError(err error) error {
	msg := err.Error()
	if m := yamlSafe.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("syntax: %s", m[1])
	}
	where := ""
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		where = "line " + m[1] + ": "
	}
	what := "invalid YAML"
	if strings.Contains(msg, "already set in map") {
		what = "duplicate field"
	}
	return fmt.Errorf("syntax: %s%s (details withheld: they could quote a key)", where, what)
}
