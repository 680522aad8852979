package admintoken

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	tokenA = "a-first-token-of-32-characters.."
	tokenB = "b-second-token-0123456789abcdef"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name, content string
		who           []string // names of the tokens, in order
		err           string   // substring of the error
	}{
		{"one bare token", tokenA + "\n", []string{Fingerprint(tokenA)}, ""},
		{"named tokens, comments and blank lines", "# rotation\n\noncall-2025 " + tokenA + "\n  ci.bot_1 " + tokenB + "  \n", []string{"oncall-2025", "ci.bot_1"}, ""},
		{"empty: every mutation refused", "# no token yet\n", nil, ""},
		{"too short", "short-token\n", nil, "line 1: a token is 16 to 4096 characters (this one has 11)"},
		{"a space inside the token", "name " + tokenA + " tail\n", nil, "line 1: a token is printable ASCII without spaces (character 33 is not)"},
		{"a control character", tokenA + "\x01\n", nil, "printable ASCII"},
		{"a bad name", "na/me " + tokenA + "\n", nil, "line 1: a name is 1 to 64"},
		{"the same token twice", tokenA + "\n# again\nx " + tokenA + "\n", nil, "line 3: the same token as line 1"},
		{"the same name twice", "x " + tokenA + "\nx " + tokenB + "\n", nil, "line 2: the name \"x\" is already used on line 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk, err := Parse([]byte(c.content))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				if strings.Contains(err.Error(), tokenA) {
					t.Fatalf("the error quotes the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var who []string
			for _, e := range tk.entries {
				who = append(who, e.who)
			}
			if strings.Join(who, ",") != strings.Join(c.who, ",") {
				t.Errorf("tokens %v, want %v", who, c.who)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tk, err := Parse([]byte("first " + tokenA + "\n" + tokenB + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		presented, who string
		ok             bool
	}{
		{tokenA, "first", true},
		{tokenB, Fingerprint(tokenB), true},
		{tokenA[:len(tokenA)-1], "", false},
		{tokenA + "x", "", false},
		{"", "", false},
	} {
		if who, ok := tk.Check(c.presented); who != c.who || ok != c.ok {
			t.Errorf("Check(%q) = %q, %v; want %q, %v", c.presented, who, ok, c.who, c.ok)
		}
	}
	if f := Fingerprint(tokenA); !strings.HasPrefix(f, "sha256:") || len(f) != len("sha256:")+12 || strings.Contains(f, tokenA[:8]) {
		t.Errorf("fingerprint %q", f)
	}
}

// request is a mutation carrying header: value.
func request(header, value string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/debug/reset", nil)
	if header != "" {
		r.Header.Set(header, value)
	}
	return r
}

// TestAuthorize: no token file, no token, a wrong token, both headers, and
// a token file that rotates while the guard runs.
func TestAuthorize(t *testing.T) {
	var none *Guard
	if _, ref := none.Authorize(request("Authorization", "Bearer "+tokenA)); ref == nil || ref.Status != http.StatusForbidden || !strings.Contains(ref.Message, "--admin-token-file") {
		t.Fatalf("without a token file: %+v", ref)
	}

	path := filepath.Join(t.TempDir(), "tokens")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write("oncall " + tokenA + "\n")
	var reloads []int
	var errs []error
	g, err := NewGuard(path, Options{OnReload: func(n int) { reloads = append(reloads, n) }, OnError: func(e error) { errs = append(errs, e) }})
	if err != nil {
		t.Fatal(err)
	}
	expect := func(step string, r *http.Request, who string, status int) {
		t.Helper()
		got, ref := g.Authorize(r)
		switch {
		case status == 0 && (ref != nil || got != who):
			t.Errorf("%s: refused %+v, want %q", step, ref, who)
		case status != 0 && (ref == nil || ref.Status != status):
			t.Errorf("%s: %q, %+v; want status %d", step, got, ref, status)
		case ref != nil && strings.Contains(ref.Message, tokenA):
			t.Errorf("%s: the refusal quotes the token", step)
		}
	}
	expect("the token", request("Authorization", "Bearer "+tokenA), "oncall", 0)
	expect("scheme in lower case", request("Authorization", "bearer "+tokenA), "oncall", 0)
	expect("through the API server's proxy", request(Header, "Bearer "+tokenA), "oncall", 0)
	expect("no token", request("", ""), "", http.StatusUnauthorized)
	expect("basic auth", request("Authorization", "Basic "+tokenA), "", http.StatusUnauthorized)
	expect("bearer without a token", request("Authorization", "Bearer "), "", http.StatusUnauthorized)
	expect("a wrong token", request("Authorization", "Bearer "+tokenB), "", http.StatusUnauthorized)

	write("oncall " + tokenA + "\nnext " + tokenB + "\n")
	g.w.Poll()
	expect("rotation: the old token still works", request("Authorization", "Bearer "+tokenA), "oncall", 0)
	expect("rotation: the new one too", request("Authorization", "Bearer "+tokenB), "next", 0)
	write("next " + tokenB + "\n")
	g.w.Poll()
	expect("rotation done: the old token is refused", request("Authorization", "Bearer "+tokenA), "", http.StatusUnauthorized)
	expect("rotation done: the new one works", request("Authorization", "Bearer "+tokenB), "next", 0)

	write("next short\n")
	g.w.Poll()
	if len(errs) != 1 || strings.Contains(errs[0].Error(), "short") {
		t.Errorf("a bad file: errors %v, want one that quotes nothing", errs)
	}
	expect("a bad file keeps the last good tokens", request("Authorization", "Bearer "+tokenB), "next", 0)
	write("# revoked\n")
	g.w.Poll()
	expect("an empty file refuses every token", request("Authorization", "Bearer "+tokenB), "", http.StatusUnauthorized)
	if len(reloads) != 3 || reloads[0] != 2 || reloads[1] != 1 || reloads[2] != 0 {
		t.Errorf("reloads %v, want [2 1 0]", reloads)
	}
}

// FuzzParse: any file content parses or is refused without a panic, an
// error never quotes a token, and every token of a file that parses is
// accepted by Check.
func FuzzParse(f *testing.F) {
	f.Add("oncall " + tokenA + "\n" + tokenB + "\n# x\n")
	f.Add("a b c\n\n")
	f.Fuzz(func(t *testing.T, content string) {
		tk, err := Parse([]byte(content))
		if err != nil {
			for _, line := range strings.Split(content, "\n") {
				if f := strings.Fields(line); len(f) > 0 && len(f[len(f)-1]) >= MinTokenLength && strings.Contains(err.Error(), f[len(f)-1]) {
					t.Fatalf("the error quotes a token: %v", err)
				}
			}
			return
		}
		for _, line := range strings.Split(content, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			token := line
			if _, rest, named := strings.Cut(line, " "); named {
				token = strings.TrimSpace(rest)
			}
			if _, ok := tk.Check(token); !ok {
				t.Fatalf("token of line %q refused", line)
			}
		}
	})
}
