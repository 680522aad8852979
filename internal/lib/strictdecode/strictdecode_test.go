package strictdecode

import (
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

func TestObject(t *testing.T) {
	js, err := YAMLToJSON([]byte("id: x\nPath: /a\nzz: 1\nlist: [1, 2]\nnum: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	o, ok := ParseObject(js)
	if !ok {
		t.Fatal("not an object")
	}
	unknown := o.Unknown([]string{"id", "path", "list", "num"})
	if len(unknown) != 2 || unknown[0] != (Unknown{Name: "Path", Like: "path"}) || unknown[1] != (Unknown{Name: "zz"}) {
		t.Errorf("Unknown = %+v", unknown)
	}
	if s, ok := o.String("id"); !ok || s != "x" {
		t.Errorf(`String("id") = %q, %v`, s, ok)
	}
	if _, ok := o.String("num"); ok {
		t.Error(`String("num") accepted a number`)
	}
	var n string
	if present, err := o.Field("num", &n); !present || err == nil {
		t.Errorf(`Field("num", string) = %v, %v; want present, an error`, present, err)
	}
	if present, err := o.Field("missing", &n); present || err != nil {
		t.Errorf(`Field("missing") = %v, %v`, present, err)
	}
	if items, ok := o.List("list"); !ok || len(items) != 2 {
		t.Errorf(`List("list") = %v, %v`, items, ok)
	}
	if _, ok := o.List("id"); ok {
		t.Error(`List("id") accepted a string`)
	}
	if _, ok := ParseObject([]byte(`[1]`)); ok {
		t.Error("ParseObject accepted a list")
	}
	if o, ok := ParseObject([]byte(`null`)); !ok || o != nil {
		t.Errorf("ParseObject(null) = %v, %v; want nil, true", o, ok)
	}
	if _, err := YAMLToJSON([]byte("a: 1\na: 2\n")); err == nil {
		t.Error("YAMLToJSON accepted a duplicate key")
	}
}
