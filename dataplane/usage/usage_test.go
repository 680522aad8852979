package usage

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// scan feeds body to s in pieces of at most chunk bytes.
func scan(s Scanner, body string, chunk int) (string, bool) {
	for len(body) > 0 {
		n := min(chunk, len(body))
		s.Write([]byte(body[:n]))
		body = body[n:]
	}
	s.Finish()
	return s.Found()
}

func TestJSON(t *testing.T) {
	cases := []struct {
		name, path, body, raw string
		found                 bool
	}{
		{"openai usage", "usage.total_tokens", `{"id":"x","usage":{"prompt_tokens":5,"total_tokens":42}}`, "42", true},
		{"top-level key", "tokens", `{"tokens": 7 }`, "7", true},
		{"number at the very end", "n", `{"n":12`, "12", true},
		{"last value wins", "n", `{"n":1,"n":2}`, "2", true},
		{"nested decoys", "a.b", `{"x":{"a":{"b":9}},"a":{"c":{"b":8},"bb":7,"b":3}}`, "3", true},
		{"key in an array does not match", "a.b", `{"a":[{"b":5}]}`, "", false},
		{"top-level array", "a", `[{"a":5}]`, "", false},
		{"strings with braces and quotes", "a", `{"s":"}{\"a\":1","a":4}`, "4", true},
		{"escaped key never matches", "a", `{"\u0061":4}`, "", false},
		{"a string value", "a", `{"a":"12"}`, "", true},
		{"null", "a", `{"a":null}`, "", true},
		{"object value", "a", `{"a":{"b":1}}`, "", true},
		{"negative", "a", `{"a":-5}`, "-5", true},
		{"exponent", "a", `{"a":1.5e3}`, "1.5e3", true},
		{"longer key with the path as prefix", "a", `{"ab":1}`, "", false},
		{"shorter key", "ab", `{"a":1}`, "", false},
		{"deep nesting is counted, not kept", "a", `{"x":` + strings.Repeat(`[{"a":1,`, 5000) + strings.Repeat(`"z":0}]`, 5000) + `,"a":6}`, "6", true},
		{"not JSON", "a", `<html>{"a":1}</html>`, "", false},
		{"two documents", "a", `{"a":1}` + "\n" + `{"a":2}`, "2", true},
		{"value after broken syntax is ignored", "a", `{"a":1}}{"a":2}`, "1", true},
		{"empty containers", "a.b", `{"x":[],"y":{},"a":{"b":[],"b":5}}`, "5", true},
		{"huge number kept bounded", "a", `{"a":` + strings.Repeat("9", 5000) + `}`, strings.Repeat("9", maxNumber), true},
	}
	for _, c := range cases {
		for _, chunk := range []int{1, 3, 1 << 20} {
			raw, found := scan(NewJSON(c.path), c.body, chunk)
			if raw != c.raw || found != c.found {
				t.Errorf("%s (pieces of %d): got %q %v, want %q %v", c.name, chunk, raw, found, c.raw, c.found)
			}
		}
	}
}

func TestSSE(t *testing.T) {
	const path = "usage.total_tokens"
	cases := []struct {
		name, body, raw string
		found           bool
	}{
		{"final usage event then DONE", "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"total_tokens\":31}}\n\ndata: [DONE]\n\n", "31", true},
		{"CRLF and comments", ": keepalive\r\nevent: message\r\ndata: {\"usage\":{\"total_tokens\":5}}\r\n\r\n", "5", true},
		{"CR only", "data: {\"usage\":\r\ndata: {\"total_tokens\":6}}\r\r", "6", true},
		{"data split over lines", "data: {\"usage\":\ndata: {\"total_tokens\"\ndata: :7}}\n\n", "7", true},
		{"last event with the field wins", "data: {\"usage\":{\"total_tokens\":1}}\n\ndata: {\"usage\":{\"total_tokens\":2}}\n\n", "2", true},
		{"no blank line at the end", "data: {\"usage\":{\"total_tokens\":8}}", "8", true},
		{"not a data field", "datum: {\"usage\":{\"total_tokens\":8}}\n\n", "", false},
		{"no space after the colon", "data:{\"usage\":{\"total_tokens\":9}}\n\n", "9", true},
		{"an event's value does not leak into the next", "data: {\"usage\":{\"total_tokens\":\n\ndata: 3}}\n\n", "", false},
	}
	for _, c := range cases {
		for _, chunk := range []int{1, 2, 7, 1 << 20} {
			raw, found := scan(NewSSE(path), c.body, chunk)
			if raw != c.raw || found != c.found {
				t.Errorf("%s (pieces of %d): got %q %v, want %q %v", c.name, chunk, raw, found, c.raw, c.found)
			}
		}
	}
}

func TestParse(t *testing.T) {
	cases := []struct {
		raw  string
		want int64
		ok   bool
	}{
		{"42", 42, true}, {"0", 0, true}, {"1.2", 2, true}, {"1e2", 100, true}, {"1e3", 500, true}, {"1e999", 500, true},
		{"501", 500, true}, {strings.Repeat("9", 60), 500, true}, {"1e-400", 0, true},
		{"", 0, false}, {"-5", 0, false}, {"abc", 0, false}, {"12abc", 0, false}, {"NaN", 0, false},
		{"Inf", 0, false}, {"0x10", 0, false}, {" 5", 0, false}, {"1.2.3", 0, false}, {"+5", 0, false},
	}
	for _, c := range cases {
		if got, ok := Parse(c.raw, 500); got != c.want || ok != c.ok {
			t.Errorf("Parse(%q, 500) = %d %v, want %d %v", c.raw, got, ok, c.want, c.ok)
		}
	}
}

// randomValue builds a random JSON value that may hold the key "t" at
// several depths, so that the path a.t has decoys.
func randomValue(r *rand.Rand, depth int) any {
	switch k := r.IntN(7); {
	case depth > 4 || k == 0:
		return r.IntN(1000)
	case k == 1:
		return fmt.Sprintf("s}{\"%d", r.IntN(10))
	case k == 2:
		return []any{randomValue(r, depth+1), randomValue(r, depth+1)}
	case k == 3:
		return nil
	default:
		m := map[string]any{}
		for _, key := range []string{"a", "t", "x", "aa"} {
			if r.IntN(2) == 0 {
				m[key] = randomValue(r, depth+1)
			}
		}
		return m
	}
}

// TestJSONAgreesWithDecoding: on random documents, the scan finds what a
// full decode finds at a.t, in pieces of any size.
func TestJSONAgreesWithDecoding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		doc := map[string]any{"a": randomValue(r, 0), "x": randomValue(r, 0)}
		body, _ := json.Marshal(doc)
		var want string
		found := false
		if a, ok := doc["a"].(map[string]any); ok {
			if v, ok := a["t"]; ok {
				found = true
				if n, ok := v.(int); ok {
					want = fmt.Sprint(n)
				}
			}
		}
		raw, got := scan(NewJSON("a.t"), string(body), 1+i%17)
		if raw != want || got != found {
			t.Fatalf("%s: scan found %q %v, decoding %q %v", body, raw, got, want, found)
		}
	}
}

// FuzzScanners: any body, in any pieces, never panics, keeps the state
// bounded (the containers along the path, a number of at most maxNumber
// bytes), and finds the same value whatever the pieces.
func FuzzScanners(f *testing.F) {
	f.Add([]byte(`{"usage":{"total_tokens":12}}`), 3)
	f.Add([]byte("data: {\"usage\":{\"total_tokens\":5}}\r\n\r\ndata: [DONE]\n\n"), 1)
	f.Add([]byte(`{"usage":[[[{"a":"\\"}]]]},"usage":{"total_tokens":-1e9}}`), 7)
	f.Fuzz(func(t *testing.T, body []byte, chunk int) {
		chunk = 1 + abs(chunk)%64
		for _, mk := range []func() Scanner{
			func() Scanner { return NewJSON("usage.total_tokens") },
			func() Scanner { return NewSSE("usage.total_tokens") },
		} {
			whole, inPieces := mk(), mk()
			raw1, ok1 := scan(whole, string(body), len(body)+1)
			raw2, ok2 := scan(inPieces, string(body), chunk)
			if raw1 != raw2 || ok1 != ok2 {
				t.Fatalf("whole: %q %v, in pieces of %d: %q %v", raw1, ok1, chunk, raw2, ok2)
			}
			if len(raw1) > maxNumber {
				t.Fatalf("captured %d bytes", len(raw1))
			}
			var j *JSON
			switch s := whole.(type) {
			case *JSON:
				j = s
			case *SSE:
				j = &s.ev
			}
			if len(j.stack) > 2 || cap(j.num) > maxNumber {
				t.Fatalf("state grew: %d containers, number buffer %d", len(j.stack), cap(j.num))
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
