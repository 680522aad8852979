package controllers

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/controllers/gatewayapi"
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

// readCerts reads the certificate Secrets the listeners reference and the
// TLS Secret's current content into in, and remembers which Secrets a pass
// depends on (secretEvent).
func (r *GatewayAPIReconciler) readCerts(ctx context.Context, in *gatewayapi.Input) error {
	in.Certs = map[types.NamespacedName]*gatewayapi.Cert{}
	refs := gatewayapi.CertRefs(in)
	for _, k := range refs {
		var s corev1.Secret
		switch err := r.apiReader.Get(ctx, k, &s); {
		case apierrors.IsNotFound(err):
			in.Certs[k] = &gatewayapi.Cert{Problem: fmt.Sprintf("Secret %s not found", k)}
		case err != nil:
			return fmt.Errorf("reading certificate Secret %s: %w", k, err)
		default:
			in.Certs[k] = gatewayapi.CheckCertSecret(&s)
		}
	}
	bundleKey := types.NamespacedName{Namespace: r.opts.SnapshotNamespace, Name: routetable.TLSSecretName(r.opts.RouteTableName)}
	var bundle corev1.Secret
	switch err := r.apiReader.Get(ctx, bundleKey, &bundle); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", bundleKey, err)
	default:
		in.Bundle = bundle.Data
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
	return m == nil || (*m)[client.ObjectKeyFromObject(obj)]
}

// publishTLS writes the TLS Secret with data (Output.TLSData) when its
// content changed (and creates it only when there is a certificate to
// hold).
func (r *GatewayAPIReconciler) publishTLS(ctx context.Context, data map[string][]byte) error {
	name := routetable.TLSSecretName(r.opts.RouteTableName)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.SnapshotNamespace, Name: name,
			Labels: routetable.Labels(r.opts.RouteTableName)},
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
		routetable.Owned(r.opts.RouteTableName, &cur):
		return nil
	}
	// Anything else of this name is rewritten, with the labels without
	// which gateways refuse it.
	s.ResourceVersion = cur.ResourceVersion
	return r.client.Update(ctx, s)
}

// watchedSecrets is the set of Secrets (namespace/name) a pass depends on.
type watchedSecrets = atomic.Pointer[map[types.NamespacedName]bool]
