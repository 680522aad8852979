package membership

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcoordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
)

const (
	// logEvery limits how often a persisting renewal failure is logged.
	logEvery = 30 * time.Second
	// releaseTimeout bounds the deletion of the Lease when Run stops.
	releaseTimeout = 2 * time.Second
)

// renewState is the renew loop's own state; only that loop touches it (and
// Run, after the loop has ended).
type renewState struct {
	lease        *coordv1.Lease // last known version of our Lease; nil: get it
	uid          types.UID      // of our Lease, for deleting it
	failingSince time.Time      // start of the current failure streak
	lastLog      time.Time
}

// renew renews the Lease once and logs failures, infrequently.
func (m *Membership) renew(ctx context.Context) {
	err := m.tryRenew(ctx)
	now, r := time.Now(), &m.renewal
	switch {
	case err == nil:
		if !r.failingSince.IsZero() {
			m.opts.Logger.Info("lease renewal works again", "lease", m.leaseName,
				"failedFor", now.Sub(r.failingSince).Round(time.Second))
			r.failingSince = time.Time{}
		}
	case ctx.Err() != nil:
		// Stopping.
	case r.failingSince.IsZero():
		r.failingSince, r.lastLog = now, now
		m.opts.Logger.Error(err, "lease renewal failed", "lease", m.leaseName)
	case now.Sub(r.lastLog) >= logEvery:
		r.lastLog = now
		m.opts.Logger.Error(err, "lease renewal still failing", "lease", m.leaseName,
			"for", now.Sub(r.failingSince).Round(time.Second))
	}
}

// tryRenew writes the Lease, retrying once if it changed or vanished under us.
func (m *Membership) tryRenew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.opts.LeaseDuration)
	defer cancel()
	leases := m.client.CoordinationV1().Leases(m.opts.Namespace)
	for attempt := 0; ; attempt++ {
		err := m.write(ctx, leases)
		if err == nil || attempt > 0 ||
			!(apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err)) {
			return err
		}
	}
}

// write creates or updates the Lease with a fresh renewTime.
func (m *Membership) write(ctx context.Context, leases typedcoordv1.LeaseInterface) error {
	r := &m.renewal
	now := metav1.NewMicroTime(m.opts.Clock())
	if r.lease == nil {
		l, err := leases.Get(ctx, m.leaseName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: m.leaseName, Namespace: m.opts.Namespace}}
			m.fill(l, now)
			l.Spec.AcquireTime = &now
			created, err := leases.Create(ctx, l, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("membership: create lease %s: %w", m.leaseName, err)
			}
			r.lease, r.uid = created, created.UID
			return nil
		case err != nil:
			return fmt.Errorf("membership: get lease %s: %w", m.leaseName, err)
		}
		r.lease, r.uid = l, l.UID
	}
	l := r.lease.DeepCopy()
	m.fill(l, now)
	updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			r.lease = nil
		}
		return fmt.Errorf("membership: renew lease %s: %w", m.leaseName, err)
	}
	r.lease, r.uid = updated, updated.UID
	return nil
}

// fill sets the label, the annotations and the holder fields of l.
func (m *Membership) fill(l *coordv1.Lease, now metav1.MicroTime) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LabelGroup] = m.groupVal
	for k, v := range m.opts.Annotations {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[k] = v
	}
	l.Spec.HolderIdentity = ptr.To(m.opts.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(m.opts.LeaseDuration / time.Second))
	l.Spec.RenewTime = &now
}

// release deletes the Lease, if this run wrote it, so that the others count
// one less at once; failing that, it expires.
func (m *Membership) release(ctx context.Context) {
	uid := m.renewal.uid
	if uid == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	err := m.client.CoordinationV1().Leases(m.opts.Namespace).Delete(ctx, m.leaseName,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		m.opts.Logger.Error(err, "deleting the lease failed; it will expire", "lease", m.leaseName)
	}
}

// dnsLabel turns s into a valid DNS-1123 label (also a valid label value):
// lower case, [a-z0-9-], at most 63 characters, starting and ending with an
// alphanumeric. If that changes s, a hash of s is appended so that distinct
// inputs stay distinct.
func dnsLabel(s string) string {
	const maxLen = 63
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	out := strings.Trim(string(b), "-")
	if out == s && len(out) <= maxLen {
		return out
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:4])
	out = strings.TrimRight(out[:min(len(out), maxLen-len(h)-1)], "-")
	if out == "" {
		return h
	}
	return out + "-" + h
}
