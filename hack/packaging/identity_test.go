package packaging_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/proxy"

	"github.com/tollgate-dev/tollgate/dataplane/identity"
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

// TestChartJWT: gateway.identity with jwt renders the --jwt-* flags the
// binary accepts, the Secret source with a Role that reads that one
// Secret, and refuses incomplete or contradictory values.
func TestChartJWT(t *testing.T) {
	const gw = "tollgate-gateway"
	out, err := renderWith(t, `gateway:
  identity: mapped,jwt
  jwt:
    issuer: https://login.example.com/
    audiences: [orders-api, admin-api]
    tenantClaim: org.id
    algorithms: [RS256, ES256]
    jwks: {existingSecret: issuer-jwks, secretKey: keys.json}`)
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	args := containerArgs(t, objs, gw, "gateway")
	for flag, want := range map[string]string{
		"identity": "mapped,jwt", "jwt-issuer": "https://login.example.com/", "jwt-audience": "orders-api,admin-api",
		"jwt-tenant-claim": "org.id", "jwt-algorithms": "RS256,ES256", "jwt-leeway": "30s",
		"jwt-jwks-secret": "issuer-jwks", "jwt-jwks-secret-key": "keys.json",
		"api-keys-file": "/etc/tollgate/routes/no-api-keys.yaml",
	} {
		if v, _ := flagValue(args, flag); v != want {
			t.Errorf("--%s=%q, want %q", flag, v, want)
		}
	}
	if _, err := run(t.TempDir(), nil, nil, imageBinary(t), append(args, "--help")...); err != nil {
		t.Errorf("the binary refuses the rendered args: %v", err)
	}
	role := find(objs, "Role", gw)
	var names []string
	for _, r := range role["rules"].([]any) {
		rule := r.(map[string]any)
		if res, _ := rule["resources"].([]any); len(res) == 1 && res[0] == "secrets" {
			rn, _ := rule["resourceNames"].([]any)
			if len(rn) == 0 {
				t.Errorf("the gateway Role reads every Secret: %v", rule)
			}
			for _, n := range rn {
				names = append(names, n.(string))
			}
		}
	}
	if strings.Join(names, ",") != "issuer-jwks" {
		t.Errorf("the gateway Role reads Secrets %v, want only issuer-jwks", names)
	}

	// Discovery: no source flag; jwt alone: no key file.
	out, err = renderWith(t, "gateway: {identity: jwt, jwt: {issuer: 'https://login.example.com', audiences: [api], tenantClaim: org_id}}")
	if err != nil {
		t.Fatal(err)
	}
	args = containerArgs(t, decode(t, out), gw, "gateway")
	for _, f := range []string{"jwt-jwks-url", "jwt-jwks-secret", "api-keys-file"} {
		if _, ok := flagValue(args, f); ok {
			t.Errorf("discovery: --%s passed", f)
		}
	}
	if strings.Contains(out, "no-api-keys.yaml") {
		t.Error("jwt alone renders the empty API key list")
	}

	for _, tc := range []struct{ name, values, want string }{
		{"jwt without issuer", "gateway: {identity: jwt}", "needs gateway.jwt.issuer"},
		{"two sources", "gateway: {identity: jwt, jwt: {issuer: 'https://i.example', audiences: [a], tenantClaim: t, jwks: {url: 'https://i.example/k', existingSecret: s}}}", "exclude each other"},
		{"jwt values without jwt", "gateway: {jwt: {issuer: 'https://i.example'}}", "needs jwt in gateway.identity"},
		{"http issuer", "gateway: {identity: jwt, jwt: {issuer: 'http://i.example', audiences: [a], tenantClaim: t}}", "/gateway/jwt/issuer"},
		{"alg none", "gateway: {identity: jwt, jwt: {issuer: 'https://i.example', audiences: [a], tenantClaim: t, algorithms: [none]}}", "/gateway/jwt/algorithms"},
	} {
		if _, err := renderWith(t, tc.values); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want an error mentioning %q, got %v", tc.name, tc.want, err)
		}
	}
}

// TestKustomizeJWTComponent: config/components/jwt on config/default
// gives the gateway --jwt-* args the binary accepts and a Role that reads
// only the JWKS Secret; the gateway's Roles read no other Secret than
// config/default's (the HTTPS listeners' copy).
func TestKustomizeJWTComponent(t *testing.T) {
	out, err := run(root, nil, nil, kubectl(t), "kustomize", repoPath("hack", "packaging", "testdata", "kustomize-jwt"))
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	args := containerArgs(t, objs, "tollgate-gateway", "gateway")
	if v, _ := flagValue(args, "jwt-jwks-secret"); v != "tollgate-jwks" {
		t.Errorf("--jwt-jwks-secret=%q", v)
	}
	if _, err := run(t.TempDir(), nil, nil, imageBinary(t), append(args, "--help")...); err != nil {
		t.Errorf("the binary refuses the rendered args: %v", err)
	}
	secretRules := func(objs []object) (names []string) {
		for _, o := range objs {
			if o.kind() != "Role" || !strings.HasPrefix(o.name(), "tollgate-gateway") {
				continue
			}
			for _, r := range o["rules"].([]any) {
				rule := r.(map[string]any)
				if res, _ := rule["resources"].([]any); len(res) == 1 && res[0] == "secrets" {
					rn, _ := rule["resourceNames"].([]any)
					if len(rn) == 0 {
						t.Errorf("Role %s reads every Secret", o.name())
					}
					for _, n := range rn {
						names = append(names, o.name()+":"+n.(string))
					}
				}
			}
		}
		return names
	}
	const base = "tollgate-gateway:tollgate-httproutes-tls"
	if got := strings.Join(secretRules(objs), ","); got != base+",tollgate-gateway-jwks:tollgate-jwks" {
		t.Errorf("with the component, the gateway's Roles read Secrets %q", got)
	}
	if got := strings.Join(secretRules(decode(t, kustomizeDefault(t))), ","); got != base {
		t.Errorf("config/default: the gateway's Roles read Secrets %q", got)
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
