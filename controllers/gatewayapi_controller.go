package controllers

import (
	"bytes"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/consts"

	"github.com/tollgate-dev/tollgate/controllers/gatewayapi"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses;gateways;httproutes;grpcroutes;referencegrants,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses/status;gateways/status;httproutes/status;grpcroutes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get

// GatewayAPIReconciler serves the Gateway API: it compiles the HTTPRoutes
// and GRPCRoutes attached to the Gateways of tollgate's GatewayClasses into
// the route table ConfigMap that gateways load (--gateway-api), and writes
// the status of the GatewayClasses, Gateways, HTTPRoutes and GRPCRoutes. Every event maps to one work item;
// a pass recompiles everything, publishes the table if it changed, and patches
// only the statuses that changed.
type GatewayAPIReconciler struct {
	client    client.Client
	apiReader client.Reader
	opts      Options
	// watchedSecrets are the Secrets the last pass read (gatewayapi_tls.go).
	watchedSecrets watchedSecrets
}

var gwKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "gateway-api"}}

// gwLists are the objects of one pass.
type gwLists struct {
	classes    gwv1.GatewayClassList
	gws        gwv1.GatewayList
	routes     gwv1.HTTPRouteList
	grpcRoutes gwv1.GRPCRouteList
}

// input lists everything a pass compiles (from the cache).
func (r *GatewayAPIReconciler) input(ctx context.Context) (*gatewayapi.Input, *gwLists, error) {
	in := &gatewayapi.Input{Port: r.opts.GatewayPort, TLSPort: r.opts.GatewayTLSPort, H2C: r.opts.GatewayH2C, Namespaces: map[string]labels.Set{}}
	var l gwLists
	var svcs corev1.ServiceList
	var slices discoveryv1.EndpointSliceList
	var grants gwv1.ReferenceGrantList
	var nss metav1.PartialObjectMetadataList
	nss.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	for _, list := range []client.ObjectList{&l.classes, &l.gws, &l.routes, &l.grpcRoutes, &svcs, &slices, &grants, &nss} {
		if err := r.client.List(ctx, list); err != nil {
			return nil, nil, fmt.Errorf("listing %T: %w", list, err)
		}
	}
	in.Classes, in.Gateways, in.Routes, in.GRPCRoutes = l.classes.Items, l.gws.Items, l.routes.Items, l.grpcRoutes.Items
	in.Services, in.Slices, in.Grants = svcs.Items, slices.Items, grants.Items
	for _, n := range nss.Items {
		in.Namespaces[n.Name] = labels.Set(n.Labels)
	}
	if err := r.readCerts(ctx, in); err != nil {
		return nil, nil, err
	}
	return in, &l, nil
}

// Reconcile runs one pass.
func (r *GatewayAPIReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	in, lists, err := r.input(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	out := gatewayapi.Translate(in)
	// The certificates first: a gateway that loads the table finds them.
	data, pubErr := out.TLSData(in.Bundle)
	if pubErr == nil {
		pubErr = r.publishTLS(ctx, data)
	}
	if pubErr == nil {
		pubErr = r.publish(ctx, out.Table)
	}
	if pubErr != nil {
		log.FromContext(ctx).Error(pubErr, "publishing the HTTPRoute table or its certificates failed")
	}
	pub := gatewayapi.Publication{Table: r.opts.SnapshotNamespace + "/" + r.opts.RouteTableName, Err: pubErr}
	pub.Addresses, pub.AddressErr = r.addresses(ctx)
	errs := r.writeStatuses(ctx, lists, out, pub)
	if pubErr != nil {
		errs = append(errs, pubErr)
	}
	conflicts := 0
	for _, err := range errs {
		if apierrors.IsConflict(err) {
			conflicts++
		}
	}
	switch {
	case len(errs) > 0 && conflicts == len(errs):
		// The cache had not yet seen an object's latest version (often our
		// own previous status write): try again soon, without the growing
		// backoff of failures.
		return reconcile.Result{RequeueAfter: 200 * time.Millisecond}, nil
	case len(errs) > 0:
		return reconcile.Result{}, fmt.Errorf("%d Gateway API writes failed, first: %w", len(errs), errs[0])
	}
	// The gateway Service's addresses are read, not watched.
	return reconcile.Result{RequeueAfter: time.Minute}, nil
}

// writeStatuses writes the statuses of a pass that changed, and returns
// the errors of the writes that failed.
func (r *GatewayAPIReconciler) writeStatuses(ctx context.Context, lists *gwLists, out *gatewayapi.Output, pub gatewayapi.Publication) []error {
	var errs []error
	if err := r.writeClasses(ctx, lists.classes.Items); err != nil {
		errs = append(errs, err)
	}
	for i := range lists.gws.Items {
		if err := r.writeGateway(ctx, &lists.gws.Items[i], out, pub); err != nil {
			errs = append(errs, err)
		}
	}
	for i := range lists.routes.Items {
		rt := &lists.routes.Items[i]
		if err := r.writeRoute(ctx, rt, &rt.Status.RouteStatus, out.RouteParents(rt)); err != nil {
			errs = append(errs, err)
		}
	}
	for i := range lists.grpcRoutes.Items {
		rt := &lists.grpcRoutes.Items[i]
		if err := r.writeRoute(ctx, rt, &rt.Status.RouteStatus, out.GRPCRouteParents(rt)); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// publish writes the route table ConfigMap when its content changed.
func (r *GatewayAPIReconciler) publish(ctx context.Context, t *routetable.Table) error {
	cm, err := t.ConfigMap(r.opts.SnapshotNamespace, r.opts.RouteTableName)
	if err != nil {
		return err
	}
	var cur corev1.ConfigMap
	err = r.apiReader.Get(ctx, client.ObjectKeyFromObject(cm), &cur)
	switch {
	case apierrors.IsNotFound(err):
		return r.client.Create(ctx, cm)
	case err != nil:
		return fmt.Errorf("reading ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	case bytes.Equal(cur.BinaryData[routetable.DataKey], cm.BinaryData[routetable.DataKey]) &&
		cur.Annotations[routetable.AnnotationChecksum] == cm.Annotations[routetable.AnnotationChecksum] &&
		routetable.Owned(r.opts.RouteTableName, &cur):
		// Compressing is deterministic: equal bytes, equal table. Anything
		// else (a change, an edit by hand, or a copy without the labels
		// gateways require) is rewritten.
		return nil
	}
	cm.ResourceVersion = cur.ResourceVersion
	return r.client.Update(ctx, cm)
}

// addresses are the gateway Service's: its load balancer's, else its
// cluster IPs.
func (r *GatewayAPIReconciler) addresses(ctx context.Context) ([]gwv1.GatewayStatusAddress, error) {
	var svc corev1.Service
	key := types.NamespacedName{Namespace: r.opts.SnapshotNamespace, Name: r.opts.GatewayService}
	if err := r.apiReader.Get(ctx, key, &svc); err != nil {
		return nil, fmt.Errorf("gateway Service %s: %w", key, err)
	}
	var out []gwv1.GatewayStatusAddress
	ip, host := gwv1.IPAddressType, gwv1.HostnameAddressType
	for _, in := range svc.Status.LoadBalancer.Ingress {
		switch {
		case in.IP != "":
			out = append(out, gwv1.GatewayStatusAddress{Type: &ip, Value: in.IP})
		case in.Hostname != "":
			out = append(out, gwv1.GatewayStatusAddress{Type: &host, Value: in.Hostname})
		}
	}
	if len(out) == 0 {
		for _, c := range svc.Spec.ClusterIPs {
			if c != "" && c != corev1.ClusterIPNone {
				out = append(out, gwv1.GatewayStatusAddress{Type: &ip, Value: c})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("gateway Service %s has no address yet", key)
	}
	return out, nil
}

func (r *GatewayAPIReconciler) crdVersion(ctx context.Context) (string, error) {
	var crd metav1.PartialObjectMetadata
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := r.apiReader.Get(ctx, types.NamespacedName{Name: "httproutes." + gwv1.GroupName}, &crd); err != nil {
		return "", err
	}
	return crd.Annotations[consts.BundleVersionAnnotation], nil
}

func (r *GatewayAPIReconciler) writeClasses(ctx context.Context, classes []gwv1.GatewayClass) error {
	var version string
	var versionErr error
	for i := range classes {
		c := &classes[i]
		if c.Spec.ControllerName != gatewayapi.ControllerName {
			continue
		}
		if version == "" && versionErr == nil {
			version, versionErr = r.crdVersion(ctx)
		}
		want := gatewayapi.ClassStatus(c, version, versionErr, r.opts.GatewayH2C)
		if apiequality.Semantic.DeepEqual(&c.Status, want) {
			continue
		}
		c.Status = *want
		if err := r.client.Status().Update(ctx, c); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	return nil
}

func (r *GatewayAPIReconciler) writeGateway(ctx context.Context, gw *gwv1.Gateway, out *gatewayapi.Output, pub gatewayapi.Publication) error {
	want := out.GatewayStatus(gw, pub)
	if want == nil || apiequality.Semantic.DeepEqual(&gw.Status, want) {
		return nil
	}
	gw.Status = *want
	return client.IgnoreNotFound(r.client.Status().Update(ctx, gw))
}

// writeRoute writes parents into the status st of route rt (an HTTPRoute
// or a GRPCRoute) when they changed.
func (r *GatewayAPIReconciler) writeRoute(ctx context.Context, rt client.Object, st *gwv1.RouteStatus, parents []gwv1.RouteParentStatus) error {
	if apiequality.Semantic.DeepEqual(st.Parents, parents) || len(st.Parents) == 0 && len(parents) == 0 {
		return nil
	}
	st.Parents = parents
	return client.IgnoreNotFound(r.client.Status().Update(ctx, rt))
}

func (r *GatewayAPIReconciler) setupWithManager(mgr ctrl.Manager) error {
	toKey := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{gwKey}
	})
	initial := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(gwKey)
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("gateway-api").
		WithOptions(controller.Options{RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, 30*time.Second)}).
		WatchesRawSource(initial).
		// Status writes (ours included) do not change generation.
		Watches(&gwv1.GatewayClass{}, toKey, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&gwv1.Gateway{}, toKey, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&gwv1.HTTPRoute{}, toKey, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&gwv1.GRPCRoute{}, toKey, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&gwv1.ReferenceGrant{}, toKey).
		Watches(&corev1.Service{}, toKey).
		Watches(&discoveryv1.EndpointSlice{}, toKey).
		WatchesMetadata(&corev1.Namespace{}, toKey).
		// Secrets' metadata only, and only referenced ones start a pass;
		// their content is read from the API server (readCerts).
		WatchesMetadata(&corev1.Secret{}, toKey, builder.WithPredicates(predicate.NewPredicateFuncs(r.secretEvent))).
		Complete(r)
}
