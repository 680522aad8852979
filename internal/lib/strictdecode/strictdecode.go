// Package strictdecode decodes the gateway's configuration files (YAML or
// JSON) strictly, the way the API server decodes manifests: duplicate keys
// are errors, field names are case-sensitive, and unknown fields are errors.
//
// Whole documents decode into structs with Decode. Files whose errors must
// name the entry and the field in words of their own (the route file) or
// must not quote the file at all (the key file) decode each mapping into a
// struct with Fields, which applies the same rules one field at a time and
// hands back every problem for the caller to word.
package strictdecode

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// YAMLToJSON converts a YAML (or JSON) document to JSON; duplicate keys are
// errors. An empty document becomes null. Its errors may quote the input.
func YAMLToJSON(data []byte) ([]byte, error) {
	return yaml.YAMLToJSONStrict(data)
}

// Decode decodes the JSON js into v: field names are case-sensitive, and
// unknown or duplicate fields are errors, all of which are reported.
func Decode(js []byte, v any) error {
	strict, err := sjson.UnmarshalStrict(js, v)
	if err != nil {
		if msg := err.Error(); strings.Contains(msg, "unmarshal bool into") && strings.HasSuffix(msg, "of type string") {
			return fmt.Errorf("%w (YAML reads unquoted y, n, yes, no, on, off, true and false as booleans: quote the value)", err)
		}
		return err
	}
	return errors.Join(strict...)
}

// Problem is what is wrong with one field of a mapping decoded by Fields.
type Problem int

const (
	// Unknown: the struct has no field of this name.
	Unknown Problem = iota + 1
	// Invalid: the value does not decode into the struct's field, for
	// example a list where a string is wanted.
	Invalid
)

// FieldError is one problem with one field of a mapping.
type FieldError struct {
	// Name is the field's name as the document spells it.
	Name    string
	Problem Problem
	// Like, for an Unknown field, is the struct's field that Name spells in
	// another case, or "".
	Like string
	// Err, for an Invalid field, is the decoding error; it may quote the
	// value.
	Err error
}

// Error names the field and the problem, quoting the name (and, for an
// Invalid field, perhaps the value).
func (e FieldError) Error() string {
	switch {
	case e.Problem == Invalid:
		return fmt.Sprintf("%s: %v", e.Name, e.Err)
	case e.Like != "":
		return fmt.Sprintf("unknown field %q (did you mean %q?)", e.Name, e.Like)
	default:
		return fmt.Sprintf("unknown field %q", e.Name)
	}
}

// Mapping is what Fields found in a mapping.
type Mapping struct {
	// Null reports that the document was null (an empty YAML document):
	// nothing was decoded.
	Null bool
	// Errors lists every problem: unknown fields in name order, then
	// invalid ones in the order of the struct.
	Errors  []FieldError
	present map[string]bool
}

// Has reports whether the mapping has the field name, null or not.
func (m Mapping) Has(name string) bool {
	return m.present[name]
}

// Fields decodes the JSON mapping js into the struct v points to, one field
// at a time, so that a bad field does not hide the next one: each struct
// field is decoded with Decode's rules from the document field its json tag
// names (a field that does not decode is left zero), and every field of the
// document the struct does not name is reported. v must point to a struct.
// Fields reports false when js is neither a mapping nor null.
//
// Callers whose errors must name the field in words of their own (the route
// file) or must not quote the document at all (the key file) word the
// Mapping's Errors themselves. js is meant to come from YAMLToJSON, which
// rejects duplicate keys; Fields keeps the last of duplicates.
func Fields(js []byte, v any) (Mapping, bool) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(js, &doc); err != nil {
		return Mapping{}, false
	}
	if doc == nil {
		return Mapping{Null: true}, true
	}
	m := Mapping{present: make(map[string]bool, len(doc))}
	sv := reflect.ValueOf(v).Elem()
	var known []string
	var invalid []FieldError
	for i := range sv.NumField() {
		name, _, _ := strings.Cut(sv.Type().Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		known = append(known, name)
		raw, ok := doc[name]
		if !ok {
			continue
		}
		m.present[name] = true
		if err := Decode(raw, sv.Field(i).Addr().Interface()); err != nil {
			sv.Field(i).SetZero()
			invalid = append(invalid, FieldError{Name: name, Problem: Invalid, Err: err})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		if slices.Contains(known, k) {
			continue
		}
		e := FieldError{Name: k, Problem: Unknown}
		for _, f := range known {
			if strings.EqualFold(f, k) {
				e.Like = f
			}
		}
		m.Errors = append(m.Errors, e)
	}
	m.Errors = append(m.Errors, invalid...)
	return m, true
}
