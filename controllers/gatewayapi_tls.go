package controllers

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// HTTPS listeners (TLS termination). The controller reads the certificate
// Secrets that accepted HTTPS listeners reference (directly from the API
// server: Secrets are not cached, only their metadata is watched, and only
// events of referenced Secrets start a pass), checks them, and copies the
// good ones into one Secret in the snapshot namespace,
// routetable.TLSSecretName(route table): the only Secret the gateways read.
// The route table ConfigMap names the Secrets per listener, never their
// content. A Secret that turns bad leaves its last good copy in that Secret.

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update,namespace=tollgate-system

// MaxTLSSecretBytes bounds the certificates copied into the TLS Secret (the
// API server's object limit is 1 MiB).
const MaxTLSSecretBytes = 900 << 10

// certInfo is a certificate Secret, read and checked.
type certInfo struct {
	crt, key []byte // PEM, when the Secret is usable
	// problem says why the Secret cannot be used; "" when it can.
	problem string
}

// checkCertSecret checks that s is a kubernetes.io/tls Secret whose tls.crt
// and tls.key are a PEM certificate chain and its private key.
func checkCertSecret(s *corev1.Secret) *certInfo {
	ref := s.Namespace + "/" + s.Name
	if s.Type != corev1.SecretTypeTLS {
		return &certInfo{problem: fmt.Sprintf("Secret %s is of type %q, not %s", ref, s.Type, corev1.SecretTypeTLS)}
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if _, err := tls.X509KeyPair(crt, key); err != nil {
		return &certInfo{problem: fmt.Sprintf("Secret %s: tls.crt and tls.key are not a PEM certificate and its private key: %v", ref, err)}
	}
	return &certInfo{crt: crt, key: key}
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

// readCerts reads the certificate Secrets the listeners reference and the
// TLS Secret's current content into in, and remembers which Secrets a pass
// depends on (secretEvent).
func (r *GatewayAPIReconciler) readCerts(ctx context.Context, in *gwInput) error {
	in.certs = map[types.NamespacedName]*certInfo{}
	refs := certRefs(in.gateways, in.classes, &backendIndex{grants: grantsByNamespace(in.grants)})
	for _, k := range refs {
		var s corev1.Secret
		switch err := r.apiReader.Get(ctx, k, &s); {
		case apierrors.IsNotFound(err):
			in.certs[k] = &certInfo{problem: fmt.Sprintf("Secret %s not found", k)}
		case err != nil:
			return fmt.Errorf("reading certificate Secret %s: %w", k, err)
		default:
			in.certs[k] = checkCertSecret(&s)
		}
	}
	bundleKey := types.NamespacedName{Namespace: r.opts.SnapshotNamespace, Name: routetable.TLSSecretName(r.opts.RouteTableName)}
	var bundle corev1.Secret
	switch err := r.apiReader.Get(ctx, bundleKey, &bundle); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", bundleKey, err)
	default:
		in.bundle = bundle.Data
	}
	watched := map[types.NamespacedName]bool{bundleKey: true}
	for _, k := range refs {
		watched[k] = true
	}
	r.watchedSecrets.Store(&watched)
	return nil
}

// secretEvent reports whether an event of Secret obj concerns a pass: a
// referenced certificate Secret or the TLS Secret.
func (r *GatewayAPIReconciler) secretEvent(obj client.Object) bool {
	m := r.watchedSecrets.Load()
	return m == nil || (*m)[nn(obj)]
}

// resolveCerts checks an accepted HTTPS listener's certificateRefs, records
// the usable ones in ls.certs and certs, and returns the ResolvedRefs
// condition when one is not resolved (nil when all are).
func (ls *listenerState) resolveCerts(in *gwInput, idx *backendIndex, certs map[string]*certInfo) *metav1.Condition {
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
			info := in.certs[k]
			if info == nil {
				info = &certInfo{problem: fmt.Sprintf("Secret %s was not read", k)}
			}
			certs[k.String()] = info
			crtKey, _ := routetable.CertKeys(k.String())
			_, lastGood := in.bundle[crtKey]
			if info.problem != "" && lastGood {
				fail(string(gwv1.ListenerReasonInvalidCertificateRef), info.problem+"; the gateways keep serving its last good certificate")
			} else if info.problem != "" {
				fail(string(gwv1.ListenerReasonInvalidCertificateRef), info.problem)
			}
			if info.problem == "" || lastGood {
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
func (out *gwOutput) tlsConflicts(gateways map[types.NamespacedName]*gwv1.Gateway) {
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
func (out *gwOutput) tlsListeners(_ *gwInput) []routetable.TLSListener {
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

// tlsData is the TLS Secret's content for out: the usable certificates, and
// the last good copy of those that turned bad.
func tlsData(out *gwOutput, bundle map[string][]byte) (map[string][]byte, error) {
	data := map[string][]byte{}
	size := 0
	for ref, info := range out.certs {
		crtKey, keyKey := routetable.CertKeys(ref)
		crt, key := info.crt, info.key
		if info.problem != "" {
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

// publishTLS writes the TLS Secret when its content changed (and creates it
// only when there is a certificate to hold).
func (r *GatewayAPIReconciler) publishTLS(ctx context.Context, out *gwOutput, in *gwInput) error {
	data, err := tlsData(out, in.bundle)
	if err != nil {
		return err
	}
	name := routetable.TLSSecretName(r.opts.RouteTableName)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.SnapshotNamespace, Name: name,
			Labels: map[string]string{routetable.LabelRouteTable: r.opts.RouteTableName, "app.kubernetes.io/managed-by": "tollgate-controller"}},
		Type: corev1.SecretTypeOpaque, Data: data,
	}
	var cur corev1.Secret
	switch err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(s), &cur); {
	case apierrors.IsNotFound(err) && len(data) == 0:
		return nil
	case apierrors.IsNotFound(err):
		return r.client.Create(ctx, s)
	case err != nil:
		return fmt.Errorf("reading Secret %s/%s: %w", s.Namespace, name, err)
	case maps.EqualFunc(cur.Data, data, func(a, b []byte) bool { return string(a) == string(b) }) &&
		cur.Labels[routetable.LabelRouteTable] == r.opts.RouteTableName:
		return nil
	}
	s.ResourceVersion = cur.ResourceVersion
	return r.client.Update(ctx, s)
}

// watchedSecrets is the set of Secrets (namespace/name) a pass depends on.
type watchedSecrets = atomic.Pointer[map[types.NamespacedName]bool]
