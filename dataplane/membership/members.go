package membership

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// AnnotationAdminPort is the Lease annotation in which a gateway publishes
// the port of its admin listener (--admin-listen), so that tools find its
// /debug endpoints through the API server (List).
const AnnotationAdminPort = "ratelimit.tollgate.dev/admin-port"

// Member is a live gateway of a group, as its Lease says.
type Member struct {
	// Pod is the Lease's holder: the gateway's pod name (--pod-name).
	Pod string
	// AdminPort is its admin listener's port; 0 when the Lease does not
	// say (a gateway without an admin listener, or older than 0.2).
	AdminPort int
	// Renewed is the Lease's last renewal, by the gateway's clock.
	Renewed time.Time
}

// List returns the live members of group in namespace, by pod name: the
// Leases whose renewTime is less than their leaseDurationSeconds before
// now. It trusts the gateways' clocks (a tool's view, not the count the
// fallback uses: see the package comment), and needs list on leases in
// namespace.
func List(ctx context.Context, client kubernetes.Interface, namespace, group string, now time.Time) ([]Member, error) {
	leases, err := client.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelGroup + "=" + dnsLabel(group)})
	if err != nil {
		return nil, fmt.Errorf("listing the gateways' Leases in %s: %w", namespace, err)
	}
	var out []Member
	for _, l := range leases.Items {
		s := l.Spec
		if !live(s, now) {
			continue
		}
		m := Member{Pod: *s.HolderIdentity, Renewed: s.RenewTime.Time}
		if p, err := strconv.Atoi(l.Annotations[AnnotationAdminPort]); err == nil && p > 0 && p < 65536 {
			m.AdminPort = p
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out, nil
}

// Groups returns the groups (their label values, sorted) of the live
// Leases in namespace, for a tool that was not told the group.
func Groups(ctx context.Context, client kubernetes.Interface, namespace string, now time.Time) ([]string, error) {
	leases, err := client.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelGroup})
	if err != nil {
		return nil, fmt.Errorf("listing the gateways' Leases in %s: %w", namespace, err)
	}
	seen := map[string]bool{}
	for _, l := range leases.Items {
		if live(l.Spec, now) {
			seen[l.Labels[LabelGroup]] = true
		}
	}
	out := make([]string, 0, len(seen))
	for g := range seen {
		out = append(out, g)
	}
	sort.Strings(out)
	return out, nil
}

// live reports whether a Lease was renewed less than its duration before
// now and names its holder.
func live(s coordv1.LeaseSpec, now time.Time) bool {
	return s.HolderIdentity != nil && *s.HolderIdentity != "" && s.RenewTime != nil && s.LeaseDurationSeconds != nil &&
		now.Sub(s.RenewTime.Time) < time.Duration(*s.LeaseDurationSeconds)*time.Second
}
