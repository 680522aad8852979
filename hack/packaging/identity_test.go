package packaging_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
)

// TestChartIdentity: with default values the gateway maps API keys and knows
// none (so it answers 401 to every key, a tenant's name included) until
// gateway.apiKeys.existingSecret is set; header-is-tenant is an explicit
// opt-in and never combines with a Secret.
func TestChartIdentity(t *testing.T) {
	const gw, cm = "tollgate-gateway", "tollgate-routes"

	// Defaults: the empty key list of the routes ConfigMap.
	objs := decode(t, mustTemplate(t, valueSets[0]))
	args := containerArgs(t, objs, gw, "gateway")
	if v, _ := flagValue(args, "api-keys-file"); v != "/etc/tollgate/routes/no-api-keys.yaml" {
		t.Fatalf("default values: --api-keys-file=%q, want the empty key list", v)
	}
	if _, ok := flagValue(args, "identity"); ok {
		t.Error("default values pass --identity (the gateway's default, mapped, is wanted)")
	}
	keys, err := identity.ParseMapped([]byte(str(find(objs, "ConfigMap", cm), "data", "no-api-keys.yaml")))
	if err != nil {
		t.Fatalf("the gateway refuses the rendered key list: %v", err)
	}
	for _, k := range []string{"shop-a", "anything"} {
		if tenant, err := keys.Tenant(k); !errors.Is(err, identity.ErrUnknownKey) {
			t.Errorf("default values: key %q maps to %q (%v), want unknown (401)", k, tenant, err)
		}
	}

	// A Secret: mounted and used; no empty list.
	out, err := renderWith(t, "gateway: {apiKeys: {existingSecret: my-keys}}")
	if err != nil {
		t.Fatal(err)
	}
	objs = decode(t, out)
	if v, _ := flagValue(containerArgs(t, objs, gw, "gateway"), "api-keys-file"); v != "/etc/tollgate/api-keys/keys.yaml" {
		t.Errorf("with a Secret: --api-keys-file=%q", v)
	}
	if strings.Contains(out, "no-api-keys.yaml") {
		t.Error("with a Secret the empty key list is still rendered")
	}

	// The opt-in.
	out, err = renderWith(t, "gateway: {identity: header-is-tenant}")
	if err != nil {
		t.Fatal(err)
	}
	args = containerArgs(t, decode(t, out), gw, "gateway")
	if v, _ := flagValue(args, "identity"); v != "header-is-tenant" {
		t.Errorf("opt-in: --identity=%q", v)
	}
	if _, ok := flagValue(args, "api-keys-file"); ok {
		t.Error("opt-in: --api-keys-file passed too (the gateway refuses both)")
	}

	for _, tc := range []struct{ name, values, want string }{
		{"opt-in with a Secret", "gateway: {identity: header-is-tenant, apiKeys: {existingSecret: k}}", "gateway.apiKeys.existingSecret needs gateway.identity: mapped"},
		{"unknown mode", "gateway: {identity: trusted}", "/gateway/identity"},
	} {
		if _, err := renderWith(t, tc.values); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want an error mentioning %q, got %v", tc.name, tc.want, err)
		}
	}
}

// TestTenantHeaderArg: the chart and the kustomize tree name the header in
// which upstreams learn the tenant (--tenant-header, the gateway's default),
// gateway.tenantHeader renames it, and the schema refuses a value that is no
// header name.
func TestTenantHeaderArg(t *testing.T) {
	const gw = "tollgate-gateway"
	r := renders(t)
	for name, want := range map[string][2]string{ // render: gateway Deployment, --tenant-header
		"kustomize":        {gw, proxy.DefaultTenantHeader},
		"chart-default":    {gw, proxy.DefaultTenantHeader},
		"chart-gatewayapi": {"gw-tollgate-gateway", proxy.DefaultTenantHeader},
		"chart-full":       {"edge-tollgate-gateway", "X-Edge-Tenant"},
	} {
		if v, _ := flagValue(containerArgs(t, r[name], want[0], "gateway"), "tenant-header"); v != want[1] {
			t.Errorf("%s: --tenant-header=%q, want %s", name, v, want[1])
		}
	}
	out, err := renderWith(t, "gateway: {tenantHeader: X-Shop-Tenant}")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := flagValue(containerArgs(t, decode(t, out), gw, "gateway"), "tenant-header"); v != "X-Shop-Tenant" {
		t.Errorf("gateway.tenantHeader X-Shop-Tenant: --tenant-header=%q", v)
	}
	if _, err := renderWith(t, `gateway: {tenantHeader: "X Shop"}`); err == nil || !strings.Contains(err.Error(), "/gateway/tenantHeader") {
		t.Errorf("gateway.tenantHeader with a space: want a schema error naming it, got %v", err)
	}
}
