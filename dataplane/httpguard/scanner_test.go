package httpguard

import (
	"bytes"
	"strings"
	"testing"
)

// scanAll feeds in to a fresh Scanner in pieces of the given size and
// returns what would be delivered and the verdicts seen.
func scanAll(in []byte, piece int) ([]byte, []Verdict) {
	var s Scanner
	var out []byte
	var vs []Verdict
	buf := bytes.Clone(in)
	for i := 0; i < len(buf); i += piece {
		p := buf[i:min(i+piece, len(buf))]
		n, v := s.Scan(p)
		out = append(out, p[:n]...)
		if v != Clean {
			vs = append(vs, v)
		}
		if v == Refused {
			break
		}
	}
	return out, vs
}

func TestScanner(t *testing.T) {
	const get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name    string
		in      string
		verdict Verdict // the first verdict other than Clean
		at      int     // with Refused: the offset of the replaced byte
	}{
		{name: "clean request", in: get, verdict: Clean},
		{name: "two pipelined requests", in: get + get, verdict: Clean},
		{name: "bare LF in a value", in: "GET / HTTP/1.1\r\nX-Note: a\nX-Injected: 1\r\n\r\n", verdict: Refused, at: 25},
		{name: "bare CR in a value", in: "GET / HTTP/1.1\r\nX-Note: a\rX-Injected: 1\r\n\r\n", verdict: Refused, at: 26},
		{name: "bare LF ends the request line", in: "GET / HTTP/1.1\nHost: x\r\n\r\n", verdict: Refused, at: 14},
		{name: "bare LF ends the block", in: "GET / HTTP/1.1\r\nHost: x\r\n\n", verdict: Refused, at: 25},
		{name: "CR CR LF", in: "GET / HTTP/1.1\r\r\nHost: x\r\n\r\n", verdict: Refused, at: 15},
		{name: "bare LF in the second request", in: get + "GET / HTTP/1.1\r\nA: 1\nB: 2\r\n\r\n", verdict: Refused, at: len(get) + 20},
		{name: "LF in a body is data", in: "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\na\nb\rc" + get, verdict: Clean},
		{name: "case and blanks in Content-Length", in: "POST / HTTP/1.1\r\ncontent-LENGTH: \t3 \r\n\r\n\n\n\n" + get, verdict: Clean},
		{name: "bare LF after a body", in: "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n\n\nGET / HTTP/1.1\nA: 1\r\n\r\n", verdict: Refused, at: 54},
		{name: "chunked body", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n\n\r\n0\r\n\r\n", verdict: Unfollowable},
		{name: "two Content-Lengths", in: "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", verdict: Unfollowable},
		{name: "same Content-Length twice", in: "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n\n" + get, verdict: Clean},
		{name: "signed Content-Length", in: "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\na", verdict: Unfollowable},
		{name: "huge Content-Length", in: "POST / HTTP/1.1\r\nContent-Length: " + strings.Repeat("9", 40) + "\r\n\r\n", verdict: Unfollowable},
		{name: "folded line", in: "POST / HTTP/1.1\r\nContent-Length: 1\r\n 2\r\n\r\nab", verdict: Unfollowable},
		{name: "Content-Length-X is another field", in: "GET / HTTP/1.1\r\nContent-Length-X: 5\r\n\r\n" + get, verdict: Clean},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, piece := range []int{1, 2, 7, len(tc.in)} {
				out, vs := scanAll([]byte(tc.in), piece)
				var got Verdict
				if len(vs) > 0 {
					got = vs[0]
				}
				if got != tc.verdict {
					t.Fatalf("pieces of %d: verdict %d, want %d", piece, got, tc.verdict)
				}
				if got == Refused {
					if len(out) != tc.at+1 || out[tc.at] != 0 || string(out[:tc.at]) != tc.in[:tc.at] {
						t.Fatalf("pieces of %d: delivered %q, want %q and NUL", piece, out, tc.in[:tc.at])
					}
				} else if string(out) != tc.in {
					t.Fatalf("pieces of %d: delivered %q, want the input unchanged", piece, out)
				}
			}
		})
	}
}

// TestScannerH2C: with H2C, a stream that opens with the HTTP/2 preface
// passes unscanned from there on, whatever bytes its frames hold, however
// it is split; any other stream is scanned as without H2C, and without
// H2C the preface is an HTTP/1.x stream like any other.
func TestScannerH2C(t *testing.T) {
	// A SETTINGS frame whose payload holds 0x0a (LF) and 0x0d (CR), in that order.
	frames := "\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x0a\x0d"
	for _, tc := range []struct {
		name    string
		h2c     bool
		in      string
		verdict Verdict
	}{
		{"preface and frames", true, preface + frames, Preface},
		{"the preface alone", true, preface, Preface},
		{"without H2C the frames are refused", false, preface + frames, Refused},
		{"HTTP/1.1 is still scanned", true, "GET / HTTP/1.1\r\nX-Note: a\nX-Injected: 1\r\n\r\n", Refused},
		{"a near preface is HTTP/1.x", true, "PRI * HTTP/2.0\r\n\r\nSX\r\n\r\n" + frames, Refused},
		{"the preface later in the stream is HTTP/1.x", true, "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + preface + frames, Refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, piece := range []int{1, 5, 23, 24, len(tc.in)} {
				s := Scanner{H2C: tc.h2c}
				buf := []byte(tc.in)
				var got Verdict
				for i := 0; i < len(buf) && got == Clean; i += piece {
					p := buf[i:min(i+piece, len(buf))]
					n, v := s.Scan(p)
					got = v
					if v == Preface && (n != len(p) || string(buf) != tc.in) {
						t.Fatalf("pieces of %d: the preface's read delivered %d of %d bytes, changed %v", piece, n, len(p), string(buf) != tc.in)
					}
				}
				if got != tc.verdict {
					t.Fatalf("pieces of %d: verdict %d, want %d", piece, got, tc.verdict)
				}
			}
		})
	}
}

// FuzzScanner: the Scanner never panics, its result does not depend on how
// the stream is split, it only ever replaces one byte (a CR or LF) with NUL
// and cuts there, and a first header block with a bare LF or CR is always
// refused.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nX-Note: a\nX-Injected: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\na\nbGET / HTTP/1.1\nX: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"\r\n\r\nGET / HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, piece uint8) {
		whole, wv := scanAll(in, max(len(in), 1))
		split, sv := scanAll(in, int(piece%16)+1)
		if !bytes.Equal(whole, split) || len(wv) != len(sv) {
			t.Fatalf("split in pieces of %d: %q %v, whole: %q %v", piece%16+1, split, sv, whole, wv)
		}
		refused := len(wv) > 0 && wv[0] == Refused
		if refused {
			i := len(whole) - 1
			if whole[i] != 0 || (in[i] != '\n' && in[i-1] != '\r') || !bytes.Equal(whole[:i], in[:i]) {
				t.Fatalf("refused %q as %q", in, whole)
			}
		} else if !bytes.Equal(whole, in) {
			t.Fatalf("changed %q to %q without refusing", in, whole)
		}
		// The first block: up to the first CRLF CRLF.
		first := in
		if i := bytes.Index(in, []byte("\r\n\r\n")); i >= 0 {
			first = in[:i+2]
		}
		if !refused && hasBare(first) && !bytes.HasPrefix(in, []byte("\r\n")) {
			t.Fatalf("a bare CR or LF in the first header block passed: %q", in)
		}
	})
}

// hasBare reports whether b has an LF without CR before it, or a CR followed
// by something other than LF.
func hasBare(b []byte) bool {
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') || c == '\r' && i+1 < len(b) && b[i+1] != '\n' {
			return true
		}
	}
	return false
}
