package gatewayapi

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// compileRules compiles rt's rules. resolved is the route's ResolvedRefs
// condition; unsupported, when not empty, says which field uses a feature
// tollgate does not implement (the route is then not accepted).
func compileRules(rt *gwv1.HTTPRoute, idx *backendIndex) (rules []routetable.Rule, resolved metav1.Condition, unsupported string) {
	return compileRouteRules(idx, kindHTTPRoute, rt.Namespace, rt.Generation, rt.Spec.Rules,
		func(i int) (routetable.Rule, string) { return compileRule(rt, i) },
		func(r *gwv1.HTTPRouteRule) []gwv1.HTTPBackendRef { return r.BackendRefs },
		func(r *gwv1.HTTPBackendRef) (*gwv1.BackendRef, bool) { return &r.BackendRef, len(r.Filters) > 0 })
}

// compileRouteRules compiles the rules of a route of kind in ns
// (generation g), HTTPRoute or GRPCRoute: compile compiles rule i without
// its backends, refs are a rule's backendRefs and ref gives each one's
// BackendRef and whether it has filters (not supported). resolved is the
// route's ResolvedRefs condition; unsupported, when not empty, names a
// field tollgate does not implement.
func compileRouteRules[Rule, Ref any](idx *backendIndex, kind, ns string, g int64, in []Rule, compile func(i int) (routetable.Rule, string),
	refs func(*Rule) []Ref, ref func(*Ref) (*gwv1.BackendRef, bool)) (rules []routetable.Rule, resolved metav1.Condition, unsupported string) {
	resolved = cond(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "", g)
	var problems []string
	for i := range in {
		out, msg := compile(i)
		if msg != "" {
			return nil, resolved, msg
		}
		rs := refs(&in[i])
		for j := range rs {
			br, filtered := ref(&rs[j])
			if filtered {
				return nil, resolved, fmt.Sprintf("spec.rules[%d].backendRefs[%d].filters is not supported", i, j)
			}
			out.Backends = append(out.Backends, idx.resolveInto(kind, ns, br, &resolved, &problems, g))
		}
		rules = append(rules, out)
	}
	if len(problems) > 0 {
		resolved.Message = strings.Join(problems, "; ")
	}
	return rules, resolved, ""
}

// identityMode is rt's annotation routetable.AnnotationIdentity as the
// route table stores it ("" for required), or why it is refused.
func identityMode(rt *gwv1.HTTPRoute) (mode, msg string) {
	switch mode := rt.Annotations[routetable.AnnotationIdentity]; mode {
	case "", "required":
		return "", ""
	case "optional", "none":
		return mode, ""
	}
	return "", "metadata.annotations[" + routetable.AnnotationIdentity + "] must be required, optional or none"
}

// compileRule compiles rule i of rt without its backends; msg, when not
// empty, names a field tollgate does not support.
func compileRule(rt *gwv1.HTTPRoute, i int) (out routetable.Rule, msg string) {
	r := &rt.Spec.Rules[i]
	field := fmt.Sprintf("spec.rules[%d]", i)
	section := ""
	if r.Name != nil {
		section = string(*r.Name)
	}
	out = routetable.Rule{
		ID: routetable.RuleID(rt.Namespace, rt.Name, section, i), Route: rt.Namespace + "/" + rt.Name,
		Created: rt.CreationTimestamp.Unix(), Index: i,
		ForwardAuthorization: rt.Annotations[routetable.AnnotationForwardAuthorization] == "true",
	}
	if out.IdentityMode, msg = identityMode(rt); msg != "" {
		return out, msg
	}
	switch {
	case r.Retry != nil:
		return out, field + ".retry is not supported"
	case r.SessionPersistence != nil:
		return out, field + ".sessionPersistence is not supported"
	}
	matches := r.Matches
	if len(matches) == 0 {
		matches = []gwv1.HTTPRouteMatch{{}}
	}
	for j, m := range matches {
		cm, msg := compileMatch(m, fmt.Sprintf("%s.matches[%d]", field, j))
		if msg != "" {
			return out, msg
		}
		out.Matches = append(out.Matches, cm)
	}
	for j, f := range r.Filters {
		cf, msg := compileFilter(f, fmt.Sprintf("%s.filters[%d]", field, j))
		if msg != "" {
			return out, msg
		}
		out.Filters = append(out.Filters, cf)
	}
	if t := r.Timeouts; t != nil {
		for _, d := range []struct {
			v    *gwv1.Duration
			name string
			dst  *int64
		}{{t.Request, "request", &out.RequestTimeoutMs}, {t.BackendRequest, "backendRequest", &out.BackendTimeoutMs}} {
			if d.v == nil {
				continue
			}
			dur, err := time.ParseDuration(string(*d.v))
			if err != nil || dur < 0 {
				return out, fmt.Sprintf("%s.timeouts.%s %q is not a valid duration", field, d.name, *d.v)
			}
			*d.dst = dur.Milliseconds()
		}
	}
	return out, ""
}

func compileMatch(m gwv1.HTTPRouteMatch, field string) (routetable.Match, string) {
	out := routetable.Match{PathType: routetable.PathPrefix, PathValue: "/"}
	if p := m.Path; p != nil {
		if p.Type != nil {
			switch *p.Type {
			case gwv1.PathMatchExact:
				out.PathType = routetable.PathExact
			case gwv1.PathMatchPathPrefix:
			default:
				return out, fmt.Sprintf("%s.path.type %s is not supported (Exact and PathPrefix are)", field, *p.Type)
			}
		}
		if p.Value != nil {
			out.PathValue = *p.Value
		}
		if out.PathType == routetable.PathPrefix && out.PathValue != "/" {
			out.PathValue = strings.TrimSuffix(out.PathValue, "/")
		}
	}
	if m.Method != nil {
		out.Method = string(*m.Method)
	}
	seen := map[string]bool{}
	for k, h := range m.Headers {
		if h.Type != nil && *h.Type != gwv1.HeaderMatchExact {
			return out, fmt.Sprintf("%s.headers[%d].type %s is not supported (Exact is)", field, k, *h.Type)
		}
		// Only the first match of a header name counts (HTTPRoute spec).
		if name := strings.ToLower(string(h.Name)); !seen[name] {
			seen[name] = true
			out.Headers = append(out.Headers, routetable.NameValue{Name: name, Value: h.Value})
		}
	}
	seen = map[string]bool{}
	for k, q := range m.QueryParams {
		if q.Type != nil && *q.Type != gwv1.QueryParamMatchExact {
			return out, fmt.Sprintf("%s.queryParams[%d].type %s is not supported (Exact is)", field, k, *q.Type)
		}
		if !seen[string(q.Name)] {
			seen[string(q.Name)] = true
			out.Query = append(out.Query, routetable.NameValue{Name: string(q.Name), Value: q.Value})
		}
	}
	return out, ""
}

func compileFilter(f gwv1.HTTPRouteFilter, field string) (routetable.Filter, string) {
	out := routetable.Filter{Type: string(f.Type)}
	nvs := func(hs []gwv1.HTTPHeader) []routetable.NameValue {
		var o []routetable.NameValue
		for _, h := range hs {
			o = append(o, routetable.NameValue{Name: string(h.Name), Value: h.Value})
		}
		return o
	}
	path := func(p *gwv1.HTTPPathModifier) {
		if p == nil {
			return
		}
		out.PathType = string(p.Type)
		if p.ReplaceFullPath != nil {
			out.PathValue = *p.ReplaceFullPath
		}
		if p.ReplacePrefixMatch != nil {
			out.PathValue = *p.ReplacePrefixMatch
		}
	}
	switch f.Type {
	case gwv1.HTTPRouteFilterRequestHeaderModifier:
		if m := f.RequestHeaderModifier; m != nil {
			out.Set, out.Add, out.Remove = nvs(m.Set), nvs(m.Add), m.Remove
		}
	case gwv1.HTTPRouteFilterRequestRedirect:
		if r := f.RequestRedirect; r != nil {
			if r.Scheme != nil {
				out.Scheme = *r.Scheme
			}
			if r.Hostname != nil {
				out.Hostname = string(*r.Hostname)
			}
			if r.Port != nil {
				out.Port = *r.Port
			}
			if r.StatusCode != nil {
				out.StatusCode = *r.StatusCode
			}
			path(r.Path)
		}
	case gwv1.HTTPRouteFilterURLRewrite:
		if r := f.URLRewrite; r != nil {
			if r.Hostname != nil {
				out.Hostname = string(*r.Hostname)
			}
			path(r.Path)
		}
	default:
		return out, fmt.Sprintf("%s.type %s is not supported (RequestHeaderModifier, RequestRedirect and URLRewrite are)", field, f.Type)
	}
	return out, ""
}

func ptrTo[T any](v T) *T { return &v }

// resolveInto resolves one backendRef of a route of kind in namespace ns
// of generation g; a reference that does not resolve sets resolved (the
// first one's reason) and adds its message to problems.
func (b *backendIndex) resolveInto(kind, ns string, ref *gwv1.BackendRef, resolved *metav1.Condition, problems *[]string, g int64) routetable.Backend {
	be, reason, msg := b.resolve(kind, ns, ref)
	if reason != "" {
		if resolved.Status == metav1.ConditionTrue {
			*resolved = cond(string(gwv1.RouteConditionResolvedRefs), false, reason, "", g)
		}
		*problems = append(*problems, msg)
	}
	return be
}
