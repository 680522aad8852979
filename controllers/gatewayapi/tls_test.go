package gatewayapi

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/internal/testutil/certtest"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

func tlsSecret(ns, name string, typ corev1.SecretType, crt, key []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: typ,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}
}

func httpsListener(name, host string, port int32, refs ...gwv1.SecretObjectReference) gwv1.Listener {
	l := gwv1.Listener{Name: gwv1.SectionName(name), Port: port, Protocol: gwv1.HTTPSProtocolType,
		TLS: &gwv1.ListenerTLSConfig{Mode: ptr.To(gwv1.TLSModeTerminate), CertificateRefs: refs}}
	if host != "" {
		l.Hostname = ptr.To(gwv1.Hostname(host))
	}
	return l
}

func secretRef(ns, name string) gwv1.SecretObjectReference {
	r := gwv1.SecretObjectReference{Name: gwv1.ObjectName(name)}
	if ns != "" {
		r.Namespace = ptr.To(gwv1.Namespace(ns))
	}
	return r
}

// TestGatewayAPIHTTPSListeners checks the conditions of HTTPS listeners for
// each kind of certificate reference, the route table's TLS listeners, and
// that a route attached to an HTTP and an HTTPS listener gets one copy of
// its rules per kind of listener.
func TestGatewayAPIHTTPSListeners(t *testing.T) {
	crt, key := certtest.New("shop", "shop.example.com")
	other, _ := certtest.New("other", "other.example.com")
	in := &Input{Port: 80, TLSPort: 443, Namespaces: map[string]labels.Set{"infra": {}}}
	in.Classes = []gwv1.GatewayClass{{ObjectMeta: metav1.ObjectMeta{Name: "tollgate"}, Spec: gwv1.GatewayClassSpec{ControllerName: ControllerName}}}
	in.Gateways = []gwv1.Gateway{{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw"}, Spec: gwv1.GatewaySpec{GatewayClassName: "tollgate", Listeners: []gwv1.Listener{
		{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
		httpsListener("ok", "shop.example.com", 443, secretRef("", "good")),
		httpsListener("missing", "a.example.com", 443, secretRef("", "missing")),
		httpsListener("opaque", "b.example.com", 443, secretRef("", "opaque")),
		httpsListener("mismatched", "c.example.com", 443, secretRef("", "mismatched")),
		httpsListener("foreign", "d.example.com", 443, secretRef("certs", "shared")),
		httpsListener("granted", "e.example.com", 443, secretRef("granted", "shared")),
		httpsListener("rotated-bad", "f.example.com", 443, secretRef("", "broken")),
		httpsListener("port", "g.example.com", 8443, secretRef("", "good")),
		{Name: "tls", Port: 443, Protocol: gwv1.TLSProtocolType, Hostname: ptr.To(gwv1.Hostname("h.example.com")),
			TLS: &gwv1.ListenerTLSConfig{Mode: ptr.To(gwv1.TLSModePassthrough)}},
		{Name: "passthrough", Port: 443, Protocol: gwv1.HTTPSProtocolType, Hostname: ptr.To(gwv1.Hostname("i.example.com")),
			TLS: &gwv1.ListenerTLSConfig{Mode: ptr.To(gwv1.TLSModePassthrough)}},
		httpsListener("dup", "shop.example.com", 443, secretRef("", "good")),
		{Name: "options", Port: 443, Protocol: gwv1.HTTPSProtocolType, Hostname: ptr.To(gwv1.Hostname("j.example.com")),
			TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{secretRef("", "good")},
				Options: map[gwv1.AnnotationKey]gwv1.AnnotationValue{"example.com/cipher": "x"}}},
	}}}}
	in.Gateways = append(in.Gateways, gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "mtls"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: "tollgate", TLS: &gwv1.GatewayTLSConfig{},
		Listeners: []gwv1.Listener{httpsListener("https", "", 443, secretRef("", "good"))}}})
	in.Grants = []gwv1.ReferenceGrant{{ObjectMeta: metav1.ObjectMeta{Namespace: "granted", Name: "gw-certs"}, Spec: gwv1.ReferenceGrantSpec{
		From: []gwv1.ReferenceGrantFrom{{Group: gwGroup, Kind: "Gateway", Namespace: "infra"}},
		To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Secret"}},
	}}}
	in.Certs = map[types.NamespacedName]*Cert{}
	for _, s := range []*corev1.Secret{
		tlsSecret("infra", "good", corev1.SecretTypeTLS, crt, key),
		tlsSecret("infra", "opaque", corev1.SecretTypeOpaque, crt, key),
		tlsSecret("infra", "mismatched", corev1.SecretTypeTLS, other, key),
		tlsSecret("infra", "broken", corev1.SecretTypeTLS, []byte("not PEM"), key),
		tlsSecret("certs", "shared", corev1.SecretTypeTLS, crt, key),
		tlsSecret("granted", "shared", corev1.SecretTypeTLS, crt, key),
	} {
		in.Certs[nn(s)] = CheckCertSecret(s)
	}
	in.Certs[types.NamespacedName{Namespace: "infra", Name: "missing"}] = &Cert{Problem: "Secret infra/missing not found"}
	// infra/broken was good before: its last good copy is in the TLS Secret.
	lastCrt, lastKey := routetable.CertKeys("infra/broken")
	in.Bundle = map[string][]byte{lastCrt: crt, lastKey: key}
	r := hr("infra", "shop", time.Unix(0, 0), []string{"shop.example.com"}, testRule{prefix("/"), "svc"})
	r.Spec.ParentRefs = []gwv1.ParentReference{{Name: "gw", SectionName: ptr.To(gwv1.SectionName("http"))}, {Name: "gw", SectionName: ptr.To(gwv1.SectionName("ok"))}}
	in.Routes = []gwv1.HTTPRoute{r}
	out := Translate(in)

	got := map[string]map[string]string{}
	for _, ls := range out.listeners[types.NamespacedName{Namespace: "infra", Name: "gw"}] {
		got[string(ls.l.Name)] = map[string]string{}
		for _, c := range ls.conds {
			got[string(ls.l.Name)][c.Type] = string(c.Status) + "/" + c.Reason
		}
	}
	for _, c := range []struct{ listener, cond, want string }{
		{"ok", "Accepted", "True/Accepted"},
		{"ok", "ResolvedRefs", "True/ResolvedRefs"},
		{"ok", "Programmed", "True/Programmed"},
		{"missing", "Accepted", "True/Accepted"},
		{"missing", "ResolvedRefs", "False/InvalidCertificateRef"},
		{"missing", "Programmed", "False/Invalid"},
		{"opaque", "ResolvedRefs", "False/InvalidCertificateRef"},
		{"mismatched", "ResolvedRefs", "False/InvalidCertificateRef"},
		{"foreign", "ResolvedRefs", "False/RefNotPermitted"},
		{"foreign", "Programmed", "False/Invalid"},
		{"granted", "ResolvedRefs", "True/ResolvedRefs"},
		{"rotated-bad", "ResolvedRefs", "False/InvalidCertificateRef"},
		{"port", "Accepted", "False/PortUnavailable"},
		{"tls", "Accepted", "False/UnsupportedProtocol"},
		{"passthrough", "Accepted", "False/UnsupportedProtocol"},
		{"dup", "Conflicted", "True/HostnameConflict"},
		{"options", "Accepted", "False/UnsupportedValue"},
		{"http", "Conflicted", "False/NoConflicts"},
	} {
		if g := got[c.listener][c.cond]; g != c.want {
			t.Errorf("listener %s %s = %q, want %q", c.listener, c.cond, g, c.want)
		}
	}

	if c := out.gwAccepted[types.NamespacedName{Namespace: "infra", Name: "mtls"}]; string(c.Status)+"/"+c.Reason != "False/UnsupportedValue" {
		t.Errorf("Gateway with spec.tls: Accepted %s/%s, want False/UnsupportedValue", c.Status, c.Reason)
	}

	// The route table names the usable certificates per listener: good
	// ones, and the bad one with a last good copy.
	want := map[string]string{"infra/gw/ok": "shop.example.com infra/good", "infra/gw/granted": "e.example.com granted/shared",
		"infra/gw/rotated-bad": "f.example.com infra/broken"}
	if len(out.Table.TLS) != len(want) {
		t.Errorf("table TLS listeners = %+v, want %v", out.Table.TLS, want)
	}
	for _, l := range out.Table.TLS {
		if g := l.Hostname + " " + l.Certificates[0]; len(l.Certificates) != 1 || want[l.Listener] != g {
			t.Errorf("TLS listener %s = %s %v, want %s", l.Listener, l.Hostname, l.Certificates, want[l.Listener])
		}
	}
	data, err := out.TLSData(in.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"infra/good", "granted/shared", "infra/broken"} {
		c, k := routetable.CertKeys(ref)
		if string(data[c]) != string(crt) || string(data[k]) != string(key) {
			t.Errorf("TLS Secret lacks the certificate of %s", ref)
		}
	}
	if len(data) != 6 {
		t.Errorf("TLS Secret has %d keys, want 6 (no copy of a missing, refused or unusable Secret)", len(data))
	}

	// The route's rules once for HTTP and once for HTTPS.
	var plain, secure int
	for _, rule := range out.Table.Rules {
		if rule.TLS {
			secure++
		} else {
			plain++
		}
	}
	if plain != 1 || secure != 1 {
		t.Errorf("rules: %d HTTP, %d HTTPS, want 1 and 1: %+v", plain, secure, out.Table.Rules)
	}
}

// TestCertRefsReadsOnlyPermittedSecrets: the controller reads the Secrets
// of its own Gateways' HTTPS listeners in their namespace or allowed by a
// ReferenceGrant, and no other.
func TestCertRefsReadsOnlyPermittedSecrets(t *testing.T) {
	classes := []gwv1.GatewayClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "tollgate"}, Spec: gwv1.GatewayClassSpec{ControllerName: ControllerName}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/other"}},
	}
	gw := func(class, name string, ls ...gwv1.Listener) gwv1.Gateway {
		return gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: name},
			Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class), Listeners: ls}}
	}
	gws := []gwv1.Gateway{
		gw("tollgate", "ours",
			httpsListener("a", "a.example.com", 443, secretRef("", "local")),
			httpsListener("b", "b.example.com", 443, secretRef("granted", "cert")),
			httpsListener("c", "c.example.com", 443, secretRef("denied", "cert")),
			httpsListener("d", "d.example.com", 443, secretRef("", "local"))),
		gw("other", "theirs", httpsListener("a", "a.example.com", 443, secretRef("", "not-ours"))),
	}
	grants := grantsByNamespace([]gwv1.ReferenceGrant{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "granted", Name: "g"}, Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwGroup, Kind: "Gateway", Namespace: "infra"}},
			To:   []gwv1.ReferenceGrantTo{{Kind: "Secret", Name: ptr.To(gwv1.ObjectName("cert"))}}}},
		// Allows HTTPRoutes, not Gateways.
		{ObjectMeta: metav1.ObjectMeta{Namespace: "denied", Name: "g"}, Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwGroup, Kind: "HTTPRoute", Namespace: "infra"}},
			To:   []gwv1.ReferenceGrantTo{{Kind: "Secret"}}}},
	})
	got := certRefs(gws, classes, &backendIndex{grants: grants})
	want := []types.NamespacedName{{Namespace: "infra", Name: "local"}, {Namespace: "granted", Name: "cert"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Secrets read: %v, want %v", got, want)
	}
}

// TestUnacceptedGatewayServesNothing: the routes of a Gateway that is not
// accepted (here: spec.addresses) are not in the route table, and its
// listeners say Programmed=False. (Before, its valid listeners served.)
func TestUnacceptedGatewayServesNothing(t *testing.T) {
	in := &Input{Port: 80, TLSPort: 443, Namespaces: map[string]labels.Set{"infra": {}}}
	in.Classes = []gwv1.GatewayClass{{ObjectMeta: metav1.ObjectMeta{Name: "tollgate"}, Spec: gwv1.GatewayClassSpec{ControllerName: ControllerName}}}
	in.Gateways = []gwv1.Gateway{{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw"}, Spec: gwv1.GatewaySpec{GatewayClassName: "tollgate",
		Addresses: []gwv1.GatewaySpecAddress{{Value: "10.0.0.1"}},
		Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}}
	r := hr("infra", "shop", time.Unix(0, 0), nil, testRule{prefix("/"), "svc"})
	r.Spec.ParentRefs = []gwv1.ParentReference{{Name: "gw"}}
	in.Routes = []gwv1.HTTPRoute{r}
	out := Translate(in)
	if len(out.Table.Rules) != 0 {
		t.Errorf("route table of a Gateway that is not accepted: %+v, want none", out.Table.Rules)
	}
	ls := out.listeners[types.NamespacedName{Namespace: "infra", Name: "gw"}][0]
	if c := ls.conds[3]; c.Type != "Programmed" || c.Status != metav1.ConditionFalse {
		t.Errorf("listener %s = %s, want Programmed False", c.Type, c.Status)
	}
}

// TestHTTPSHostnameAcrossGateways: all Gateways share one HTTPS port, so a
// hostname served by an older Gateway's HTTPS listener with other
// certificates makes a newer Gateway's listener Conflicted; the same
// certificate on both is no conflict.
func TestHTTPSHostnameAcrossGateways(t *testing.T) {
	crt, key := certtest.New("shop", "shop.example.com")
	in := &Input{Port: 80, TLSPort: 443, Namespaces: map[string]labels.Set{"a": {}, "b": {}, "c": {}}}
	in.Classes = []gwv1.GatewayClass{{ObjectMeta: metav1.ObjectMeta{Name: "tollgate"}, Spec: gwv1.GatewayClassSpec{ControllerName: ControllerName}}}
	gw := func(ns string, created int64, secret string) gwv1.Gateway {
		return gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw", CreationTimestamp: metav1.Unix(created, 0)},
			Spec: gwv1.GatewaySpec{GatewayClassName: "tollgate", Listeners: []gwv1.Listener{
				httpsListener("https", "shop.example.com", 443, secretRef("certs", secret))}}}
	}
	// b is the oldest; c shares its certificate; a has another one.
	in.Gateways = []gwv1.Gateway{gw("a", 200, "other"), gw("b", 100, "shop"), gw("c", 300, "shop")}
	for _, ns := range []string{"a", "b", "c"} {
		in.Grants = append(in.Grants, gwv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "certs", Name: ns}, Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwGroup, Kind: "Gateway", Namespace: gwv1.Namespace(ns)}},
			To:   []gwv1.ReferenceGrantTo{{Kind: "Secret"}}}})
	}
	in.Certs = map[types.NamespacedName]*Cert{}
	for _, name := range []string{"shop", "other"} {
		s := tlsSecret("certs", name, corev1.SecretTypeTLS, crt, key)
		in.Certs[nn(s)] = CheckCertSecret(s)
	}
	out := Translate(in)
	for ns, want := range map[string]string{"a": "True/HostnameConflict", "b": "False/NoConflicts", "c": "False/NoConflicts"} {
		ls := out.listeners[types.NamespacedName{Namespace: ns, Name: "gw"}][0]
		if got := string(ls.conds[1].Status) + "/" + ls.conds[1].Reason; got != want {
			t.Errorf("Gateway %s/gw listener Conflicted = %s (%s), want %s", ns, got, ls.conds[1].Message, want)
		}
	}
	if len(out.Table.TLS) != 2 || len(out.certs) != 1 || out.certs["certs/shop"] == nil {
		t.Errorf("table TLS listeners %+v, certificates %v: want b's and c's, with certs/shop only", out.Table.TLS, out.certs)
	}
}
