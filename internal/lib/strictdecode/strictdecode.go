// Package strictdecode decodes the gateway's configuration files (YAML or
// JSON) strictly, the way the API server decodes manifests: duplicate keys
// are errors, field names are case-sensitive, and unknown fields are errors.
//
// Whole documents decode into structs with Decode. Files whose errors must
// name the entry and the field in words of their own (the route file) or
// must not quote the file at all (the key file) decode mappings one field at
// a time with Object, which applies the same rules.
package strictdecode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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

// Object is a JSON mapping whose fields are decoded one at a time.
type Object map[string]json.RawMessage

// ParseObject decodes js as a mapping. It reports false when js is not a
// mapping or null; null gives a nil Object.
func ParseObject(js []byte) (Object, bool) {
	var o Object
	if err := json.Unmarshal(js, &o); err != nil {
		return nil, false
	}
	return o, true
}

// Unknown is a field of an Object that is not one of the known ones.
type Unknown struct {
	Name string
	// Like is the known field that Name spells in another case, or "".
	Like string
}

// Unknown lists the fields of o that are not in known, in name order.
func (o Object) Unknown(known []string) []Unknown {
	var out []Unknown
	for _, k := range slices.Sorted(maps.Keys(o)) {
		if slices.Contains(known, k) {
			continue
		}
		u := Unknown{Name: k}
		for _, f := range known {
			if strings.EqualFold(f, k) {
				u.Like = f
			}
		}
		out = append(out, u)
	}
	return out
}

// Has reports whether o has the field name.
func (o Object) Has(name string) bool {
	_, ok := o[name]
	return ok
}

// Field decodes the field name into dst with Decode's rules, leaving dst
// alone when o has no such field. It reports whether the field is present
// and the decoding error, which may quote the value.
func (o Object) Field(name string, dst any) (present bool, err error) {
	raw, ok := o[name]
	if !ok {
		return false, nil
	}
	return true, Decode(raw, dst)
}

// String decodes the field name as a string; null and other types are not
// strings. It reports false when the field is absent or not a string.
func (o Object) String(name string) (string, bool) {
	raw := o[name]
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// List decodes the field name as a list of raw values. It reports false
// when the field is not a list; null is an empty list.
func (o Object) List(name string) ([]json.RawMessage, bool) {
	var items []json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(o[name]), &items); err != nil {
		return nil, false
	}
	return items, true
}
