package gatewayapi

import (
	"fmt"
	"slices"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/consts"
)

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

// ClassStatus is the status GatewayClass c of ours should have: Accepted
// (tollgate's classes take no parameters), SupportedVersion against the
// bundle version of the installed Gateway API CRDs (version, or versionErr
// when it could not be read), and SupportedFeatures(h2c).
func ClassStatus(c *gwv1.GatewayClass, version string, versionErr error, h2c bool) *gwv1.GatewayClassStatus {
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
	want.SupportedFeatures = SupportedFeatures(h2c)
	return want
}

// Publication is what happened when the controller published a pass's
// route table: the Gateways' Programmed condition and addresses follow it.
type Publication struct {
	// Table names the route table ConfigMap ("namespace/name").
	Table string
	// Err is why the table or its certificates could not be published.
	Err error
	// Addresses are the gateway Service's addresses, or AddressErr why
	// there are none.
	Addresses  []gwv1.GatewayStatusAddress
	AddressErr error
}

// GatewayStatus is the status Gateway gw should have after pub, or nil when
// gw is not one of ours.
func (out *Output) GatewayStatus(gw *gwv1.Gateway, pub Publication) *gwv1.GatewayStatus {
	accepted, ours := out.gwAccepted[nn(gw)]
	if !ours {
		return nil
	}
	programmed := cond(string(gwv1.GatewayConditionProgrammed), true, string(gwv1.GatewayReasonProgrammed),
		"routes published in ConfigMap "+pub.Table, gw.Generation)
	switch {
	case accepted.Status != metav1.ConditionTrue:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "the Gateway is not accepted", gw.Generation)
	case pub.Err != nil:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "the route table could not be published: "+pub.Err.Error(), gw.Generation)
	case pub.AddressErr != nil:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotAssigned), pub.AddressErr.Error(), gw.Generation)
	}
	want := gw.Status.DeepCopy()
	want.Conditions = setConditions(gw.Status.Conditions, []metav1.Condition{accepted, programmed})
	want.Addresses = nil
	if pub.AddressErr == nil {
		want.Addresses = pub.Addresses
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
	return want
}

// RouteParents is what rt's status.parents should say: the entries of other
// implementations as they are, and ours as translated (an empty list, never
// nil, when there is none).
func (out *Output) RouteParents(rt *gwv1.HTTPRoute) []gwv1.RouteParentStatus {
	return parents(out.routes[nn(rt)], rt.Status.Parents)
}

// GRPCRouteParents is RouteParents for a GRPCRoute.
func (out *Output) GRPCRouteParents(rt *gwv1.GRPCRoute) []gwv1.RouteParentStatus {
	return parents(out.grpcRoutes[nn(rt)], rt.Status.Parents)
}

// parents is what a route's status.parents, now cur, should say after
// verdict v (nil: none of ours).
func parents(v *routeVerdict, cur []gwv1.RouteParentStatus) []gwv1.RouteParentStatus {
	var out []gwv1.RouteParentStatus
	for _, p := range cur {
		if p.ControllerName != ControllerName {
			out = append(out, p) // another implementation's
		}
	}
	if v != nil {
		for _, p := range v.parents {
			var conds []metav1.Condition
			for _, c := range cur {
				if c.ControllerName == ControllerName && apiequality.Semantic.DeepEqual(c.ParentRef, p.ParentRef) {
					conds = c.Conditions
				}
			}
			p.Conditions = setConditions(conds, p.Conditions)
			out = append(out, p)
		}
	}
	if out == nil {
		out = []gwv1.RouteParentStatus{}
	}
	return out
}

// SupportedFeatures are the conformance features tollgate implements (see
// docs/gateway-api.md, "Conformance features"), in the order of their
// names (the GatewayClass status lists them sorted). GRPCRoute and
// GRPCRouteNamedRouteRule need h2c: the conformance suite's GRPCRoutes are
// on HTTP listeners, which take them only when the gateways serve HTTP/2
// without TLS (HTTPS listeners always do).
func SupportedFeatures(h2c bool) []gwv1.SupportedFeature {
	names := []string{"Gateway", "GatewayHTTPSListenerDetectMisdirectedRequests", "HTTPRoute", "HTTPRouteBackendProtocolH2C",
		"HTTPRouteBackendTimeout", "HTTPRouteHostRewrite", "HTTPRouteMethodMatching", "HTTPRouteNamedRouteRule",
		"HTTPRouteParentRefPort", "HTTPRoutePathRedirect", "HTTPRoutePathRewrite", "HTTPRoutePortRedirect",
		"HTTPRouteQueryParamMatching", "HTTPRouteRequestTimeout", "HTTPRouteSchemeRedirect", "ReferenceGrant"}
	if h2c {
		names = append(names, "GRPCRoute", "GRPCRouteNamedRouteRule")
	}
	slices.Sort(names) // the API's rule: sorted by name
	var out []gwv1.SupportedFeature
	for _, f := range names {
		out = append(out, gwv1.SupportedFeature{Name: gwv1.FeatureName(f)})
	}
	return out
}

// setConditions returns cur with want set (keeping lastTransitionTime of
// unchanged conditions).
func setConditions(cur, want []metav1.Condition) []metav1.Condition {
	out := append([]metav1.Condition(nil), cur...)
	for _, c := range want {
		meta.SetStatusCondition(&out, c)
	}
	return out
}
