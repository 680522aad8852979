package controllers

import (
	"fmt"
	"strings"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// Namespace policies (--namespace-policy).
const (
	// PolicyLabelled, the default: a namespace may declare rules only for the
	// tenants its annotations allow (v1alpha1.AnnotationTenants,
	// v1alpha1.AnnotationAllowWildcardTenant).
	PolicyLabelled = "labelled"
	// PolicyOpen: any namespace may declare rules for any tenant, "*"
	// included. For single-team clusters.
	PolicyOpen = "open"
)

// nsGrant is what one namespace may declare.
type nsGrant struct {
	anyTenant bool            // tenants annotation "*"
	tenants   map[string]bool // tenants listed by name
	wildcard  bool            // tenant "*"
}

// tenantPolicy decides which tenants each namespace may declare rules for.
// The zero value allows nothing; open allows everything.
type tenantPolicy struct {
	open   bool
	grants map[string]nsGrant
}

// grantOf reads a namespace's policy annotations.
func grantOf(annotations map[string]string) nsGrant {
	g := nsGrant{wildcard: annotations[v1alpha1.AnnotationAllowWildcardTenant] == "true"}
	for _, t := range strings.Split(annotations[v1alpha1.AnnotationTenants], ",") {
		switch t = strings.TrimSpace(t); t {
		case "":
		case v1alpha1.Wildcard:
			g.anyTenant = true
		default:
			if g.tenants == nil {
				g.tenants = map[string]bool{}
			}
			g.tenants[t] = true
		}
	}
	return g
}

// check returns "" when a rule in namespace may limit tenant, else the
// message of its refusal.
func (p *tenantPolicy) check(namespace, tenant string) string {
	if p.open {
		return ""
	}
	g := p.grants[namespace]
	if tenant == v1alpha1.Wildcard {
		if g.wildcard {
			return ""
		}
		return fmt.Sprintf(`namespace %s may not declare rules for every tenant ("*"): a cluster administrator allows it with the annotation %s: "true" on the namespace`,
			namespace, v1alpha1.AnnotationAllowWildcardTenant)
	}
	if g.anyTenant || g.tenants[tenant] {
		return ""
	}
	return fmt.Sprintf(`namespace %s may not declare rules for tenant %q: a cluster administrator allows it by listing the tenant (or "*") in the annotation %s on the namespace`,
		namespace, tenant, v1alpha1.AnnotationTenants)
}
