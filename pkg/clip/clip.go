// Package clip shortens untrusted text (a name from a request or a value
// from a file) before it goes into an error message or a log line.
package clip

// Max is the number of bytes of untrusted text that messages quote.
const Max = 64

// String returns s, cut to Max bytes followed by "..." when longer.
func String(s string) string {
	if len(s) > Max {
		return s[:Max] + "..."
	}
	return s
}
