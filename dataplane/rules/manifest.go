package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	yamlv2 "go.yaml.in/yaml/v2"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/lib/strictdecode"
)

// maxErrorsPerFile bounds the documents reported as bad in one file, and the
// work spent on a file that is not rule manifests at all.
const maxErrorsPerFile = 20

// manifest is one RateLimitRule read from a file.
type manifest struct {
	// loc says where the object was found, for messages:
	// `rules.yaml: document 2 (line 14)`, with ` items[3]` for a list item.
	loc string
	obj v1alpha1.RateLimitRule
}

// parseManifests decodes the RateLimitRule manifests in data, which is the
// content of file: YAML or JSON, several documents separated by lines that
// are "---" (optionally followed by a comment). Documents holding only
// comments or nothing are skipped. Every document is checked as strictly as
// the API server would check it (unknown and duplicate fields, apiVersion and
// kind, metadata.name, the refill period's format); compiling the specs is
// left to snapshot.Compile. The error lists every bad document.
func parseManifests(file string, data []byte) ([]manifest, error) {
	var out []manifest
	var errs []error
	n := 0
	for _, d := range splitDocuments(data) {
		if blank(d.text) {
			continue
		}
		if len(errs) == maxErrorsPerFile {
			errs = append(errs, fmt.Errorf("%s: too many errors; fix these first", file))
			break
		}
		n++
		loc := fmt.Sprintf("%s: document %d (line %d)", file, n, d.line)
		ms, err := parseDocument(loc, d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, ms...)
	}
	return out, errors.Join(errs...)
}

// document is one YAML document of a file; line is where it starts (1-based).
type document struct {
	text []byte
	line int
}

// splitDocuments splits data on separator lines.
func splitDocuments(data []byte) []document {
	var docs []document
	start, startLine, line := 0, 1, 1
	for pos := 0; pos < len(data); line++ {
		end := bytes.IndexByte(data[pos:], '\n')
		next := len(data)
		if end >= 0 {
			next = pos + end + 1
		}
		if isSeparator(data[pos:next]) {
			docs = append(docs, document{text: data[start:pos], line: startLine})
			start, startLine = next, line+1
		}
		pos = next
	}
	return append(docs, document{text: data[start:], line: startLine})
}

// isSeparator reports whether line is "---", optionally followed by spaces
// and a comment.
func isSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("---"))
	if !ok {
		return false
	}
	trimmed := bytes.TrimSpace(rest)
	// YAML needs white space between the marker and a comment.
	return len(trimmed) == 0 || (trimmed[0] == '#' && (rest[0] == ' ' || rest[0] == '\t'))
}

// blank reports whether text holds only whitespace and comment lines.
func blank(text []byte) bool {
	for line := range bytes.Lines(text) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

// parseDocument decodes one document: a RateLimitRule or a list of them.
func parseDocument(loc string, d document) ([]manifest, error) {
	js, err := strictdecode.YAMLToJSON(d.text)
	if err != nil {
		// Parse again behind blank lines so the message has file line numbers.
		// Only on this error path: padding every document would be quadratic.
		padded := append(bytes.Repeat([]byte("\n"), d.line-1), d.text...)
		if _, perr := strictdecode.YAMLToJSON(padded); perr != nil {
			err = perr
		}
		return nil, fmt.Errorf("%s: %w", loc, err)
	}
	if err := singleDocument(d.text); err != nil {
		return nil, fmt.Errorf("%s: %w", loc, err)
	}
	if string(js) == "null" {
		return nil, nil // e.g. "~" or an explicit "---" ... "..." document
	}
	tm, err := typeMeta(js)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", loc, err)
	}
	switch {
	case tm.APIVersion == ruleAPIVersion && tm.Kind == kindRule:
		m, err := decodeRule(loc, js)
		if err != nil {
			return nil, err
		}
		return []manifest{m}, nil
	case tm.APIVersion == ruleAPIVersion && tm.Kind == kindRuleList,
		tm.APIVersion == "v1" && tm.Kind == kindList:
		return decodeList(loc, js, tm.Kind)
	}
	return nil, fmt.Errorf("%s: %w", loc, wrongKind(tm))
}

// singleDocument fails when text holds more than one YAML document, which
// YAMLToJSON would silently cut to the first (a "..." end marker, or a "---"
// with content after it on the same line).
func singleDocument(text []byte) error {
	if !hasMarker(text) {
		return nil // the common case, without parsing again
	}
	dec := yamlv2.NewDecoder(bytes.NewReader(text))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil // an empty document; YAMLToJSON has checked the syntax
	}
	if err := dec.Decode(&v); err != io.EOF {
		return errors.New(`more than one YAML document: separate documents with a line "---"`)
	}
	return nil
}

// hasMarker reports whether a line of text starts like a document marker
// ("---" or "..."); without one, text cannot hold two documents.
func hasMarker(text []byte) bool {
	for line := range bytes.Lines(text) {
		if bytes.HasPrefix(line, []byte("---")) || bytes.HasPrefix(line, []byte("...")) {
			return true
		}
	}
	return false
}
