package packaging_test

import (
	"strings"
	"testing"
)

// TestChartSentinelPassword: the Sentinels' own password comes from a
// Secret, mounted and passed as a file; it needs sentinel mode.
func TestChartSentinelPassword(t *testing.T) {
	out, err := renderWith(t, "redis: {mode: sentinel, masterName: main, addrs: ['s1:26379', 's2:26379'], "+
		"sentinel: {username: watcher, existingSecret: sentinel-auth, passwordKey: pw}}")
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	args := containerArgs(t, objs, "tollgate-gateway", "gateway")
	if v, _ := flagValue(args, "redis-sentinel-password-file"); v != "/etc/tollgate/redis-sentinel-password/password" {
		t.Errorf("--redis-sentinel-password-file=%q", v)
	}
	if v, _ := flagValue(args, "redis-sentinel-username"); v != "watcher" {
		t.Errorf("--redis-sentinel-username=%q", v)
	}
	d := find(objs, "Deployment", "tollgate-gateway")
	var mounted bool
	for _, v := range list(d, "spec", "template", "spec", "volumes") {
		if str(v, "secret", "secretName") == "sentinel-auth" {
			items := list(v, "secret", "items")
			mounted = len(items) == 1 && str(items[0], "key") == "pw" && str(items[0], "path") == "password"
		}
	}
	if !mounted {
		t.Error("the Secret sentinel-auth is not mounted with its key pw as password")
	}
	if _, err := renderWith(t, "redis: {sentinel: {existingSecret: x}}"); err == nil ||
		!strings.Contains(err.Error(), "need redis.mode: sentinel") {
		t.Errorf("a Sentinel password without sentinel mode: %v", err)
	}
	if _, ok := flagValue(containerArgs(t, decode(t, mustTemplate(t, valueSets[0])), "tollgate-gateway", "gateway"), "redis-sentinel-password-file"); ok {
		t.Error("default values pass a Sentinel password file")
	}
}

// TestChartRLSTLS: the rate limit port's certificate and client CA come from
// Secrets, mounted and passed as files.
func TestChartRLSTLS(t *testing.T) {
	out, err := renderWith(t, "gateway: {rls: {enabled: true, tls: {existingSecret: rls-cert, clientCASecret: envoy-ca}}}")
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	args := containerArgs(t, objs, "tollgate-gateway", "gateway")
	for flag, want := range map[string]string{
		"rls-tls-cert": "/etc/tollgate/rls-tls/tls.crt", "rls-tls-key": "/etc/tollgate/rls-tls/tls.key",
		"rls-client-ca": "/etc/tollgate/rls-client-ca/ca.crt",
	} {
		if v, _ := flagValue(args, flag); v != want {
			t.Errorf("--%s=%q, want %q", flag, v, want)
		}
	}
	secrets := map[string]bool{}
	for _, v := range list(find(objs, "Deployment", "tollgate-gateway"), "spec", "template", "spec", "volumes") {
		secrets[str(v, "secret", "secretName")] = true
	}
	if !secrets["rls-cert"] || !secrets["envoy-ca"] {
		t.Errorf("Secrets mounted: %v, want rls-cert and envoy-ca", secrets)
	}
	if _, err := renderWith(t, "gateway: {rls: {enabled: true, tls: {clientCASecret: envoy-ca}}}"); err == nil ||
		!strings.Contains(err.Error(), "needs gateway.rls.tls.existingSecret") {
		t.Errorf("a client CA without a server certificate: %v", err)
	}
}
