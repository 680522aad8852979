package strictdecode

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	type T struct {
		Name string `json:"name"`
		On   string `json:"on"`
	}
	for _, tc := range []struct{ name, js, want string }{
		{"valid", `{"name":"a"}`, ""},
		{"unknown field", `{"name":"a","nmae":"b"}`, `unknown field "nmae"`},
		{"field in wrong case", `{"Name":"a"}`, `unknown field "Name"`},
		{"duplicate field", `{"name":"a","name":"b"}`, `duplicate field "name"`},
		{"YAML boolean for a string", `{"on":true}`, "quote the value"},
	} {
		var v T
		err := Decode([]byte(tc.js), &v)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Decode = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestFields(t *testing.T) {
	type T struct {
		ID   string   `json:"id"`
		Path string   `json:"path"`
		List []int    `json:"list"`
		Num  *string  `json:"num"`
		Skip string   `json:"-"`
		Tags []string `json:"tags,omitempty"`
	}
	for _, tc := range []struct {
		name, yaml string
		want       []FieldError // Err only checked for presence
		wantT      T
	}{
		{name: "valid", yaml: "id: x\npath: /a\nlist: [1, 2]\n", wantT: T{ID: "x", Path: "/a", List: []int{1, 2}}},
		{name: "unknown fields in name order, with a case hint", yaml: "zz: 1\nPath: /a\nid: x\n",
			want: []FieldError{{Name: "Path", Problem: Unknown, Like: "path"}, {Name: "zz", Problem: Unknown}}, wantT: T{ID: "x"}},
		{name: "a json:\"-\" field is unknown", yaml: "Skip: a\n", want: []FieldError{{Name: "Skip", Problem: Unknown}}},
		{name: "every invalid field, in struct order, left zero", yaml: "num: 3\nlist: [a]\nid: [x]\npath: /ok\n",
			want:  []FieldError{{Name: "id", Problem: Invalid}, {Name: "list", Problem: Invalid}, {Name: "num", Problem: Invalid}},
			wantT: T{Path: "/ok"}},
		{name: "unknown before invalid", yaml: "id: 1\nx: 1\n", want: []FieldError{{Name: "x", Problem: Unknown}, {Name: "id", Problem: Invalid}}},
		{name: "a nested wrong type", yaml: "tags: [a, 1]\n", want: []FieldError{{Name: "tags", Problem: Invalid}}},
	} {
		js, err := YAMLToJSON([]byte(tc.yaml))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var v T
		m, ok := Fields(js, &v)
		if !ok || m.Null {
			t.Fatalf("%s: Fields = %+v, %v", tc.name, m, ok)
		}
		if len(m.Errors) != len(tc.want) {
			t.Errorf("%s: errors %v, want %+v", tc.name, m.Errors, tc.want)
			continue
		}
		for i, e := range m.Errors {
			w := tc.want[i]
			if e.Name != w.Name || e.Problem != w.Problem || e.Like != w.Like || (e.Err != nil) != (e.Problem == Invalid) {
				t.Errorf("%s: error %d = %+v, want %+v", tc.name, i, e, w)
			}
		}
		if !reflect.DeepEqual(v, tc.wantT) {
			t.Errorf("%s: decoded %+v, want %+v", tc.name, v, tc.wantT)
		}
	}
}

func TestFieldsPresence(t *testing.T) {
	var v struct {
		A *string `json:"a"`
		B string  `json:"b"`
	}
	m, ok := Fields([]byte(`{"a":null}`), &v)
	if !ok || !m.Has("a") || m.Has("b") || v.A != nil || len(m.Errors) != 0 {
		t.Errorf(`Fields({"a":null}) = %+v, %v; want a present and nil, b absent`, m, ok)
	}
	if m, ok := Fields([]byte(`null`), &v); !ok || !m.Null || m.Has("a") {
		t.Errorf("Fields(null) = %+v, %v; want Null", m, ok)
	}
	for _, js := range []string{`[1]`, `"a"`, `3`} {
		if _, ok := Fields([]byte(js), &v); ok {
			t.Errorf("Fields(%s) accepted a non-mapping", js)
		}
	}
	for _, tc := range []struct {
		e    FieldError
		want string
	}{
		{FieldError{Name: "Path", Problem: Unknown, Like: "path"}, `unknown field "Path" (did you mean "path"?)`},
		{FieldError{Name: "zz", Problem: Unknown}, `unknown field "zz"`},
		{FieldError{Name: "id", Problem: Invalid, Err: errors.New("boom")}, `id: boom`},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	if _, err := YAMLToJSON([]byte("a: 1\na: 2\n")); err == nil {
		t.Error("YAMLToJSON accepted a duplicate key")
	}
}
