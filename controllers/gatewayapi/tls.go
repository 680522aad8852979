package gatewayapi

import (
	"crypto/tls"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// MaxTLSSecretBytes bounds the certificates copied into the TLS Secret (the
// API server's object limit is 1 MiB).
const MaxTLSSecretBytes = 900 << 10

// Cert is a certificate Secret, read and checked.
type Cert struct {
	crt, key []byte // PEM, when the Secret is usable
	// Problem says why the Secret cannot be used; "" when it can.
	Problem string
}

// CheckCertSecret checks that s is a kubernetes.io/tls Secret whose tls.crt
// and tls.key are a PEM certificate chain and its private key.
func CheckCertSecret(s *corev1.Secret) *Cert {
	ref := s.Namespace + "/" + s.Name
	if s.Type != corev1.SecretTypeTLS {
		return &Cert{Problem: fmt.Sprintf("Secret %s is of type %q, not %s", ref, s.Type, corev1.SecretTypeTLS)}
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if _, err := tls.X509KeyPair(crt, key); err != nil {
		return &Cert{Problem: fmt.Sprintf("Secret %s: tls.crt and tls.key are not a PEM certificate and its private key: %v", ref, err)}
	}
	return &Cert{crt: crt, key: key}
}

// CertRefs are the certificate Secrets the controller reads for in: those
// referenced by the HTTPS listeners of Gateways of our classes, in their
// namespace or permitted by a ReferenceGrant.
func CertRefs(in *Input) []types.NamespacedName {
	return certRefs(in.Gateways, in.Classes, &backendIndex{grants: grantsByNamespace(in.Grants)})
}

// certRefs are the certificate Secrets referenced by the HTTPS listeners of
// gateways of our classes, in their namespace or permitted by a
// ReferenceGrant (the controller reads no other Secret).
func certRefs(gws []gwv1.Gateway, classes []gwv1.GatewayClass, grants *backendIndex) []types.NamespacedName {
	ours := map[string]bool{}
	for _, c := range classes {
		ours[c.Name] = c.Spec.ControllerName == ControllerName
	}
	seen := map[types.NamespacedName]bool{}
	var out []types.NamespacedName
	for _, gw := range gws {
		if !ours[string(gw.Spec.GatewayClassName)] {
			continue
		}
		for _, l := range gw.Spec.Listeners {
			if l.Protocol != gwv1.HTTPSProtocolType || l.TLS == nil {
				continue
			}
			for _, ref := range l.TLS.CertificateRefs {
				k := secretKey(gw.Namespace, ref)
				if seen[k] || !isSecret(ref) || k.Namespace != gw.Namespace && !grants.permitted("Gateway", gw.Namespace, k.Namespace, "Secret", k.Name) {
					continue
				}
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

func isSecret(ref gwv1.SecretObjectReference) bool {
	return (ref.Group == nil || *ref.Group == "") && (ref.Kind == nil || *ref.Kind == "Secret")
}

func secretKey(gwNS string, ref gwv1.SecretObjectReference) types.NamespacedName {
	ns := gwNS
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return types.NamespacedName{Namespace: ns, Name: string(ref.Name)}
}

// resolveCerts checks an accepted HTTPS listener's certificateRefs, records
// the usable ones in ls.certs and certs, and returns the ResolvedRefs
// condition when one is not resolved (nil when all are).
func (ls *listenerState) resolveCerts(in *Input, idx *backendIndex, certs map[string]*Cert) *metav1.Condition {
	g, gw := ls.gw.Generation, ls.gw
	var problems []string
	reason := ""
	fail := func(r, msg string) {
		if reason == "" {
			reason = r
		}
		problems = append(problems, msg)
	}
	if ls.l.TLS == nil || len(ls.l.TLS.CertificateRefs) == 0 {
		fail(string(gwv1.ListenerReasonInvalidCertificateRef), "an HTTPS listener needs tls.certificateRefs (a kubernetes.io/tls Secret)")
	}
	for i, ref := range tlsRefs(ls.l) {
		k := secretKey(gw.Namespace, ref)
		switch {
		case !isSecret(ref):
			fail(string(gwv1.ListenerReasonInvalidCertificateRef), fmt.Sprintf("certificateRefs[%d]: only core Secrets are supported", i))
		case k.Namespace != gw.Namespace && !idx.permitted("Gateway", gw.Namespace, k.Namespace, "Secret", k.Name):
			fail(string(gwv1.ListenerReasonRefNotPermitted),
				fmt.Sprintf("certificateRefs[%d]: no ReferenceGrant in namespace %s allows Gateways from %s to reference Secret %s", i, k.Namespace, gw.Namespace, k.Name))
		default:
			info := in.Certs[k]
			if info == nil {
				info = &Cert{Problem: fmt.Sprintf("Secret %s was not read", k)}
			}
			certs[k.String()] = info
			crtKey, _ := routetable.CertKeys(k.String())
			_, lastGood := in.Bundle[crtKey]
			if info.Problem != "" && lastGood {
				fail(string(gwv1.ListenerReasonInvalidCertificateRef), info.Problem+"; the gateways keep serving its last good certificate")
			} else if info.Problem != "" {
				fail(string(gwv1.ListenerReasonInvalidCertificateRef), info.Problem)
			}
			if info.Problem == "" || lastGood {
				ls.certs = append(ls.certs, k.String())
			}
		}
	}
	if reason == "" {
		return nil
	}
	c := cond(string(gwv1.ListenerConditionResolvedRefs), false, reason, strings.Join(problems, "; "), g)
	return &c
}

func tlsRefs(l *gwv1.Listener) []gwv1.SecretObjectReference {
	if l.TLS == nil {
		return nil
	}
	return l.TLS.CertificateRefs
}

// tlsConflicts refuses the HTTPS listeners whose hostname an older
// Gateway's HTTPS listener serves with other certificates (the oldest
// Gateway, then the first by namespace/name, keeps it): all Gateways share
// one HTTPS port, which has one certificate per server name.
func (out *Output) tlsConflicts(gateways map[types.NamespacedName]*gwv1.Gateway) {
	gws := make([]*gwv1.Gateway, 0, len(gateways))
	for _, gw := range gateways {
		gws = append(gws, gw)
	}
	sort.Slice(gws, func(i, j int) bool {
		a, b := gws[i], gws[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return nn(a).String() < nn(b).String()
	})
	type owner struct {
		gw    types.NamespacedName
		certs string
	}
	first := map[string]owner{} // hostname -> the listener serving it
	for _, gw := range gws {
		for _, ls := range out.listeners[nn(gw)] {
			if !ls.tls || !ls.valid || len(ls.certs) == 0 {
				continue
			}
			host, certs := listenerHost(ls.l), strings.Join(ls.certs, ",")
			o, seen := first[host]
			if !seen {
				first[host] = owner{nn(gw), certs}
				continue
			}
			if o.certs == certs {
				continue
			}
			msg := fmt.Sprintf("the HTTPS listener of the older Gateway %s serves hostname %q with other certificates: the Gateways share one HTTPS port", o.gw, host)
			g := gw.Generation
			ls.valid = false
			ls.conds[0] = cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonHostnameConflict), msg, g)
			ls.conds[1] = cond(string(gwv1.ListenerConditionConflicted), true, string(gwv1.ListenerReasonHostnameConflict), msg, g)
			ls.conds[3] = cond(string(gwv1.ListenerConditionProgrammed), false, string(gwv1.ListenerReasonInvalid), msg, g)
		}
	}
}

func listenerHost(l *gwv1.Listener) string {
	if l.Hostname == nil {
		return ""
	}
	return strings.ToLower(string(*l.Hostname))
}

// tlsListeners are the route table's HTTPS listeners: the accepted ones with
// at least one usable certificate, ordered by Gateway and listener order.
// Certificates of no such listener are dropped from out.certs.
func (out *Output) tlsListeners(_ *Input) []routetable.TLSListener {
	keys := make([]types.NamespacedName, 0, len(out.listeners))
	for k := range out.listeners {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var tl []routetable.TLSListener
	used := map[string]bool{}
	for _, k := range keys {
		for _, ls := range out.listeners[k] {
			if !ls.tls || !ls.valid || len(ls.certs) == 0 {
				continue
			}
			tl = append(tl, routetable.TLSListener{Listener: k.String() + "/" + string(ls.l.Name), Hostname: listenerHost(ls.l), Certificates: ls.certs})
			for _, c := range ls.certs {
				used[c] = true
			}
		}
	}
	for ref := range out.certs {
		if !used[ref] {
			delete(out.certs, ref)
		}
	}
	return tl
}

// TLSData is the TLS Secret's content for out: the usable certificates, and
// the last good copy (from bundle, the Secret's current content) of those
// that turned bad.
func (out *Output) TLSData(bundle map[string][]byte) (map[string][]byte, error) {
	data := map[string][]byte{}
	size := 0
	for ref, info := range out.certs {
		crtKey, keyKey := routetable.CertKeys(ref)
		crt, key := info.crt, info.key
		if info.Problem != "" {
			crt, key = bundle[crtKey], bundle[keyKey]
		}
		if crt == nil {
			continue
		}
		data[crtKey], data[keyKey] = crt, key
		size += len(crt) + len(key)
	}
	if size > MaxTLSSecretBytes {
		return nil, fmt.Errorf("the certificates of %d Secrets take %d bytes, more than the %d one Secret holds", len(data)/2, size, MaxTLSSecretBytes)
	}
	return data, nil
}
