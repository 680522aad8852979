package gatewayapi

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// compileGRPCRules compiles rt's rules as compileRules does an HTTPRoute's:
// matches by service and method (Exact) and headers (Exact), the
// RequestHeaderModifier filter, backendRefs with weights (over h2c:
// backendProtocol). resolved is the route's ResolvedRefs condition;
// unsupported, when not empty, names a field tollgate does not implement.
func compileGRPCRules(rt *gwv1.GRPCRoute, idx *backendIndex) (rules []routetable.Rule, resolved metav1.Condition, unsupported string) {
	return compileRouteRules(idx, kindGRPCRoute, rt.Namespace, rt.Generation, rt.Spec.Rules,
		func(i int) (routetable.Rule, string) { return compileGRPCRule(rt, i) },
		func(r *gwv1.GRPCRouteRule) []gwv1.GRPCBackendRef { return r.BackendRefs },
		func(r *gwv1.GRPCBackendRef) (*gwv1.BackendRef, bool) { return &r.BackendRef, len(r.Filters) > 0 })
}

// compileGRPCRule compiles rule i of rt without its backends; msg, when
// not empty, names a field tollgate does not support.
func compileGRPCRule(rt *gwv1.GRPCRoute, i int) (out routetable.Rule, msg string) {
	r := &rt.Spec.Rules[i]
	field := fmt.Sprintf("spec.rules[%d]", i)
	section := ""
	if r.Name != nil {
		section = string(*r.Name)
	}
	out = routetable.Rule{
		ID: routetable.GRPCRuleID(rt.Namespace, rt.Name, section, i), Route: rt.Namespace + "/" + rt.Name,
		Created: rt.CreationTimestamp.Unix(), Index: i, GRPC: true,
		ForwardAuthorization: rt.Annotations[routetable.AnnotationForwardAuthorization] == "true",
	}
	if r.SessionPersistence != nil {
		return out, field + ".sessionPersistence is not supported"
	}
	matches := r.Matches
	if len(matches) == 0 {
		matches = []gwv1.GRPCRouteMatch{{}} // every call
	}
	for j, m := range matches {
		cm, msg := compileGRPCMatch(m, fmt.Sprintf("%s.matches[%d]", field, j))
		if msg != "" {
			return out, msg
		}
		out.Matches = append(out.Matches, cm)
	}
	for j, f := range r.Filters {
		if f.Type != gwv1.GRPCRouteFilterRequestHeaderModifier {
			return out, fmt.Sprintf("%s.filters[%d].type %s is not supported (RequestHeaderModifier is)", field, j, f.Type)
		}
		cf, _ := compileFilter(gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: f.RequestHeaderModifier}, "")
		out.Filters = append(out.Filters, cf)
	}
	return out, ""
}

func compileGRPCMatch(m gwv1.GRPCRouteMatch, field string) (routetable.Match, string) {
	var out routetable.Match
	if mm := m.Method; mm != nil {
		if mm.Type != nil && *mm.Type != gwv1.GRPCMethodMatchExact {
			return out, fmt.Sprintf("%s.method.type %s is not supported (Exact is)", field, *mm.Type)
		}
		if mm.Service != nil {
			out.GRPCService = *mm.Service
		}
		if mm.Method != nil {
			out.GRPCMethod = *mm.Method
		}
	}
	seen := map[string]bool{}
	for k, h := range m.Headers {
		if h.Type != nil && *h.Type != gwv1.GRPCHeaderMatchExact {
			return out, fmt.Sprintf("%s.headers[%d].type %s is not supported (Exact is)", field, k, *h.Type)
		}
		// Only the first match of a header name counts (GRPCRoute spec).
		if name := strings.ToLower(string(h.Name)); !seen[name] {
			seen[name] = true
			out.Headers = append(out.Headers, routetable.NameValue{Name: name, Value: h.Value})
		}
	}
	return out, ""
}
