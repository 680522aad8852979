package controllers

import (
	"bytes"
	"context"
	"fmt"
	"strings"
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

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses;gateways;httproutes;referencegrants,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses/status;gateways/status;httproutes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get

// supportedBundle is the Gateway API release (major.minor) tollgate is built
// and tested with; GatewayClasses report SupportedVersion against it.
var supportedBundle = bundleMinor(consts.BundleVersion)

func bundleMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// GatewayAPIReconciler serves the Gateway API: it compiles the HTTPRoutes
// attached to the Gateways of tollgate's GatewayClasses into the route table
// ConfigMap that gateways load (--gateway-api), and writes the status of the
// GatewayClasses, Gateways and HTTPRoutes. Every event maps to one work item;
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
	classes gwv1.GatewayClassList
	gws     gwv1.GatewayList
	routes  gwv1.HTTPRouteList
}

// input lists everything a pass compiles (from the cache).
func (r *GatewayAPIReconciler) input(ctx context.Context) (*gwInput, *gwLists, error) {
	in := &gwInput{port: r.opts.GatewayPort, tlsPort: r.opts.GatewayTLSPort, namespaces: map[string]labels.Set{}}
	var l gwLists
	var svcs corev1.ServiceList
	var slices discoveryv1.EndpointSliceList
	var grants gwv1.ReferenceGrantList
	var nss metav1.PartialObjectMetadataList
	nss.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	for _, list := range []client.ObjectList{&l.classes, &l.gws, &l.routes, &svcs, &slices, &grants, &nss} {
		if err := r.client.List(ctx, list); err != nil {
			return nil, nil, fmt.Errorf("listing %T: %w", list, err)
		}
	}
	in.classes, in.gateways, in.routes = l.classes.Items, l.gws.Items, l.routes.Items
	in.services, in.slices, in.grants = svcs.Items, slices.Items, grants.Items
	for _, n := range nss.Items {
		in.namespaces[n.Name] = labels.Set(n.Labels)
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
	out := compileGatewayAPI(in)
	// The certificates first: a gateway that loads the table finds them.
	pubErr := r.publishTLS(ctx, out, in)
	if pubErr == nil {
		pubErr = r.publish(ctx, out.table)
	}
	if pubErr != nil {
		log.FromContext(ctx).Error(pubErr, "publishing the HTTPRoute table or its certificates failed")
	}
	addrs, addrErr := r.addresses(ctx)
	var errs []error
	if err := r.writeClasses(ctx, lists.classes.Items); err != nil {
		errs = append(errs, err)
	}
	for i := range lists.gws.Items {
		if err := r.writeGateway(ctx, &lists.gws.Items[i], out, addrs, addrErr, pubErr); err != nil {
			errs = append(errs, err)
		}
	}
	for i := range lists.routes.Items {
		if err := r.writeRoute(ctx, &lists.routes.Items[i], out); err != nil {
			errs = append(errs, err)
		}
	}
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
		cur.Labels[routetable.LabelRouteTable] == cm.Name:
		// Compressing is deterministic: equal bytes, equal table. Anything
		// else (a change, or an edit by hand) is rewritten.
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
	if err := r.apiReader.Get(ctx, types.NamespacedName{Name: "httproutes." + gwGroup}, &crd); err != nil {
		return "", err
	}
	return crd.Annotations[consts.BundleVersionAnnotation], nil
}

func (r *GatewayAPIReconciler) writeClasses(ctx context.Context, classes []gwv1.GatewayClass) error {
	var version string
	var versionErr error
	for i := range classes {
		c := &classes[i]
		if c.Spec.ControllerName != ControllerName {
			continue
		}
		if version == "" && versionErr == nil {
			version, versionErr = r.crdVersion(ctx)
		}
		supported := cond(string(gwv1.GatewayClassConditionStatusSupportedVersion), true, string(gwv1.GatewayClassReasonSupportedVersion),
			fmt.Sprintf("Gateway API CRDs %s; tollgate is built for %s", version, consts.BundleVersion), c.Generation)
		switch {
		case versionErr != nil:
			supported = cond(string(gwv1.GatewayClassConditionStatusSupportedVersion), false, string(gwv1.GatewayClassReasonUnsupportedVersion),
				"the Gateway API CRD version could not be read: "+versionErr.Error(), c.Generation)
		case bundleMinor(version) != supportedBundle:
			supported = cond(string(gwv1.GatewayClassConditionStatusSupportedVersion), false, string(gwv1.GatewayClassReasonUnsupportedVersion),
				fmt.Sprintf("Gateway API CRDs %q are installed; tollgate supports %s.x (best effort with others)", version, supportedBundle), c.Generation)
		}
		accepted := cond(string(gwv1.GatewayClassConditionStatusAccepted), true, string(gwv1.GatewayClassReasonAccepted),
			"served by the tollgate controller and gateway pods", c.Generation)
		if c.Spec.ParametersRef != nil {
			accepted = cond(string(gwv1.GatewayClassConditionStatusAccepted), false, string(gwv1.GatewayClassReasonInvalidParameters),
				"spec.parametersRef is not supported: tollgate GatewayClasses take no parameters", c.Generation)
		}
		want := c.Status.DeepCopy()
		want.Conditions = setConditions(c.Status.Conditions, []metav1.Condition{accepted, supported})
		want.SupportedFeatures = supportedFeatures()
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

func (r *GatewayAPIReconciler) writeGateway(ctx context.Context, gw *gwv1.Gateway, out *gwOutput, addrs []gwv1.GatewayStatusAddress, addrErr, pubErr error) error {
	accepted, ours := out.gwAccepted[nn(gw)]
	if !ours {
		return nil
	}
	programmed := cond(string(gwv1.GatewayConditionProgrammed), true, string(gwv1.GatewayReasonProgrammed),
		fmt.Sprintf("routes published in ConfigMap %s/%s", r.opts.SnapshotNamespace, r.opts.RouteTableName), gw.Generation)
	switch {
	case accepted.Status != metav1.ConditionTrue:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "the Gateway is not accepted", gw.Generation)
	case pubErr != nil:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "the route table could not be published: "+pubErr.Error(), gw.Generation)
	case addrErr != nil:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotAssigned), addrErr.Error(), gw.Generation)
	}
	want := gw.Status.DeepCopy()
	want.Conditions = setConditions(gw.Status.Conditions, []metav1.Condition{accepted, programmed})
	if addrErr == nil {
		want.Addresses = addrs
	} else {
		want.Addresses = nil
	}
	var listeners []gwv1.ListenerStatus
	for _, ls := range out.listeners[nn(gw)] {
		var cur []metav1.Condition
		for _, s := range gw.Status.Listeners {
			if s.Name == ls.l.Name {
				cur = s.Conditions
			}
		}
		listeners = append(listeners, gwv1.ListenerStatus{
			Name: ls.l.Name, SupportedKinds: ls.kinds, AttachedRoutes: ls.attached,
			Conditions: setConditions(cur, ls.conds),
		})
	}
	want.Listeners = listeners
	if apiequality.Semantic.DeepEqual(&gw.Status, want) {
		return nil
	}
	gw.Status = *want
	return client.IgnoreNotFound(r.client.Status().Update(ctx, gw))
}

func (r *GatewayAPIReconciler) writeRoute(ctx context.Context, rt *gwv1.HTTPRoute, out *gwOutput) error {
	v := out.routes[nn(rt)]
	var parents []gwv1.RouteParentStatus
	for _, p := range rt.Status.Parents {
		if p.ControllerName != ControllerName {
			parents = append(parents, p) // another implementation's
		}
	}
	if v != nil {
		for _, p := range v.parents {
			var cur []metav1.Condition
			for _, c := range rt.Status.Parents {
				if c.ControllerName == ControllerName && apiequality.Semantic.DeepEqual(c.ParentRef, p.ParentRef) {
					cur = c.Conditions
				}
			}
			p.Conditions = setConditions(cur, p.Conditions)
			parents = append(parents, p)
		}
	}
	if parents == nil {
		parents = []gwv1.RouteParentStatus{}
	}
	if apiequality.Semantic.DeepEqual(rt.Status.Parents, parents) || len(rt.Status.Parents) == 0 && len(parents) == 0 {
		return nil
	}
	rt.Status.Parents = parents
	return client.IgnoreNotFound(r.client.Status().Update(ctx, rt))
}

// supportedFeatures are the conformance features tollgate implements (see
// the README's Gateway API section).
func supportedFeatures() []gwv1.SupportedFeature {
	var out []gwv1.SupportedFeature
	for _, f := range []string{"Gateway", "HTTPRoute", "HTTPRouteMethodMatching", "HTTPRouteQueryParamMatching",
		"HTTPRouteNamedRouteRule", "HTTPRoutePathRedirect", "HTTPRoutePathRewrite", "HTTPRouteHostRewrite",
		"HTTPRoutePortRedirect", "HTTPRouteSchemeRedirect", "HTTPRouteRequestTimeout", "HTTPRouteBackendTimeout",
		"HTTPRouteParentRefPort", "ReferenceGrant", "GatewayHTTPSListenerDetectMisdirectedRequests"} {
		out = append(out, gwv1.SupportedFeature{Name: gwv1.FeatureName(f)})
	}
	return out
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
		Watches(&gwv1.ReferenceGrant{}, toKey).
		Watches(&corev1.Service{}, toKey).
		Watches(&discoveryv1.EndpointSlice{}, toKey).
		WatchesMetadata(&corev1.Namespace{}, toKey).
		// Secrets' metadata only, and only referenced ones start a pass;
		// their content is read from the API server (readCerts).
		WatchesMetadata(&corev1.Secret{}, toKey, builder.WithPredicates(predicate.NewPredicateFuncs(r.secretEvent))).
		Complete(r)
}
