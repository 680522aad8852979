package upgrade

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const crdFile = "config/crd/bases/ratelimit.tollgate.dev_ratelimitrules.yaml"

// TestCRDChangesAreAdditive: against previousRevision's CRD, every served
// version is still served, every field keeps its type, no field became
// required, and no enum lost a value. So objects written for the earlier
// version stay valid, and an earlier controller, which ignores fields it does
// not know, reads objects of this one.
func TestCRDChangesAreAdditive(t *testing.T) {
	old, err := exec.Command("git", "-C", root, "show", previousRevision+":"+crdFile).Output()
	if err != nil {
		t.Skipf("git history with commit %s is not available here (%v); a full clone has it", previousRevision[:12], err)
	}
	cur, err := os.ReadFile(filepath.Join(root, crdFile))
	if err != nil {
		t.Fatal(err)
	}
	var before, after apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(old, &before); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(cur, &after); err != nil {
		t.Fatal(err)
	}
	if before.Spec.Group != after.Spec.Group || before.Spec.Names.Kind != after.Spec.Names.Kind {
		t.Fatalf("group or kind changed: %s/%s -> %s/%s", before.Spec.Group, before.Spec.Names.Kind, after.Spec.Group, after.Spec.Names.Kind)
	}
	for _, bv := range before.Spec.Versions {
		i := slices.IndexFunc(after.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == bv.Name })
		if i < 0 || (bv.Served && !after.Spec.Versions[i].Served) {
			t.Errorf("version %s is no longer served", bv.Name)
			continue
		}
		av := after.Spec.Versions[i]
		if bv.Storage != av.Storage {
			t.Errorf("version %s: storage changed from %v to %v", bv.Name, bv.Storage, av.Storage)
		}
		if bv.Schema == nil || av.Schema == nil {
			t.Fatalf("version %s has no schema", bv.Name)
		}
		compareSchema(t, bv.Name, bv.Schema.OpenAPIV3Schema, av.Schema.OpenAPIV3Schema)
	}
}

func compareSchema(t *testing.T, path string, before, after *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if before == nil {
		return
	}
	if after == nil {
		t.Errorf("%s: removed", path)
		return
	}
	if before.Type != after.Type {
		t.Errorf("%s: type %q became %q", path, before.Type, after.Type)
	}
	for _, r := range after.Required {
		if !slices.Contains(before.Required, r) {
			t.Errorf("%s: %s became required", path, r)
		}
	}
	if len(before.Enum) > 0 {
		for _, e := range before.Enum {
			if !slices.ContainsFunc(after.Enum, func(a apiextensionsv1.JSON) bool { return string(a.Raw) == string(e.Raw) }) {
				t.Errorf("%s: enum value %s removed", path, e.Raw)
			}
		}
	}
	for name, p := range before.Properties {
		a, ok := after.Properties[name]
		if !ok {
			t.Errorf("%s.%s: removed", path, name)
			continue
		}
		compareSchema(t, path+"."+name, &p, &a)
	}
	if before.Items != nil && after.Items != nil {
		compareSchema(t, path+"[]", before.Items.Schema, after.Items.Schema)
	}
}
