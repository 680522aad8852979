// Package admintoken authenticates the mutations of the gateway's admin
// listener (POST /debug/reset): a bearer token compared, in constant
// time, with the tokens of a file (--admin-token-file, a Secret mounted as
// a file in the chart) that is watched, so that a token rotates without a
// restart. Without the file every mutation is refused (403): the admin
// listener then only reads.
//
// The file holds one token per line, optionally after a name and a space
// ("oncall-2025 4f9c...", names of letters, digits, '.', '_' and '-');
// blank lines and lines starting with '#' are ignored. A token is 16 to
// 4,096 printable ASCII characters without spaces. Several lines let an
// old and a new token overlap during a rotation; a file without any token
// refuses every mutation. A request is logged under its token's name, or
// its fingerprint ("sha256:" and 12 hex digits of its SHA-256) when it has
// none: the token itself is never logged.
package admintoken

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/lib/filewatch"
)

// Bounds of the token file.
const (
	MinTokenLength = 16
	MaxTokenLength = 4096
	maxFileSize    = 64 << 10
	maxNameLength  = 64
)

// Tokens are the tokens of one content of the file.
type Tokens struct {
	entries []entry
}

type entry struct {
	who string
	sum [sha256.Size]byte
}

// Parse reads a token file; errors name the line, never quote a token.
func Parse(data []byte) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]int{}
	names := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxFileSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, token, named := strings.Cut(line, " ")
		if !named {
			name, token = "", line
		}
		token = strings.TrimSpace(token)
		if err := checkLine(name, token, named); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		sum := sha256.Sum256([]byte(token))
		if first, dup := seen[sum]; dup {
			return nil, fmt.Errorf("line %d: the same token as line %d", n, first)
		}
		seen[sum] = n
		who := name
		if who == "" {
			who = Fingerprint(token)
		} else if first, dup := names[name]; dup {
			return nil, fmt.Errorf("line %d: the name %q is already used on line %d", n, name, first)
		}
		names[name] = n
		t.entries = append(t.entries, entry{who: who, sum: sum})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading tokens: %w", err)
	}
	return t, nil
}

// checkLine checks one line's name and token.
func checkLine(name, token string, named bool) error {
	if named && (name == "" || len(name) > maxNameLength || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "") {
		return fmt.Errorf("a name is 1 to %d letters, digits, '.', '_' or '-', then one space and the token", maxNameLength)
	}
	if len(token) < MinTokenLength || len(token) > MaxTokenLength {
		return fmt.Errorf("a token is %d to %d characters (this one has %d)", MinTokenLength, MaxTokenLength, len(token))
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("a token is printable ASCII without spaces (character %d is not)", i+1)
		}
	}
	return nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// Check returns the name (or fingerprint) of the token presented, and
// false when no token matches. It compares the SHA-256 of presented with
// every token's, in constant time and without stopping at a match, so
// that the time taken tells neither how much of a token matched nor
// which one did.
func (t *Tokens) Check(presented string) (who string, ok bool) {
	sum := sha256.Sum256([]byte(presented))
	for i := range t.entries {
		if subtle.ConstantTimeCompare(sum[:], t.entries[i].sum[:]) == 1 {
			who, ok = t.entries[i].who, true
		}
	}
	return who, ok
}

// Fingerprint names a token without revealing it: "sha256:" and the first
// 12 hex digits of its SHA-256.
func Fingerprint(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// Guard authorizes the admin listener's mutations. A nil Guard refuses
// every one (no --admin-token-file).
type Guard struct {
	w *filewatch.Watcher[Tokens]
}

// Options configure a Guard's watch of the file.
type Options struct {
	// Interval is how often the file is read; default 1s.
	Interval time.Duration
	// OnReload is called with the number of tokens after a changed, valid
	// file was swapped in.
	OnReload func(tokens int)
	// OnError is called when the file cannot be read or is invalid; the
	// last good tokens stay in force.
	OnError func(error)
}

// NewGuard reads the token file at path; it fails when the file cannot be
// read or is invalid. Run follows its changes.
func NewGuard(path string, opts Options) (*Guard, error) {
	w, err := filewatch.New(path, maxFileSize, Parse, filewatch.Options[Tokens]{
		Interval: opts.Interval,
		OnReload: func(t *Tokens) {
			if opts.OnReload != nil {
				opts.OnReload(t.Len())
			}
		},
		OnError: opts.OnError,
	})
	if err != nil {
		return nil, err
	}
	return &Guard{w: w}, nil
}

// Run follows the file until ctx ends, and returns nil then.
func (g *Guard) Run(ctx context.Context) error { return g.w.Run(ctx) }

// Loaded is true: the Guard is made from a file that loads.
func (g *Guard) Loaded() bool { return true }

// Refusal is why Authorize refused a request: the HTTP status to answer
// and a message that quotes nothing the client sent.
type Refusal struct {
	Status  int
	Message string
	// Reason is a short word for metrics: "disabled", "missing" or
	// "invalid".
	Reason string
}

// Header is where a client reaching the gateway through the Kubernetes API
// server's proxy sends its bearer token: the API server consumes the
// Authorization header for its own authentication and removes it.
const Header = "X-Tollgate-Authorization"

// Authorize returns the name (or fingerprint) of the bearer token of r,
// taken from the Header or else from Authorization ("Bearer <token>"), or
// the refusal: 403 without a token file, 401 without a token or with a
// token the file does not hold.
func (g *Guard) Authorize(r *http.Request) (string, *Refusal) {
	if g == nil {
		return "", &Refusal{Status: http.StatusForbidden, Reason: "disabled",
			Message: "mutations are off: this gateway runs without --admin-token-file (the admin listener only reads)"}
	}
	value := r.Header.Get(Header)
	if value == "" {
		value = r.Header.Get("Authorization")
	}
	scheme, token, ok := strings.Cut(value, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", &Refusal{Status: http.StatusUnauthorized, Reason: "missing",
			Message: "a bearer token is required: Authorization: Bearer <token> (" + Header + " through the Kubernetes API server's proxy)"}
	}
	who, ok := g.w.Current().Check(strings.TrimSpace(token))
	if !ok {
		return "", &Refusal{Status: http.StatusUnauthorized, Reason: "invalid", Message: "the bearer token is not one of --admin-token-file's"}
	}
	return who, nil
}
