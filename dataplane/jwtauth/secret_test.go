package jwtauth_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tollgate-dev/tollgate/dataplane/jwtauth"
	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
	"github.com/tollgate-dev/tollgate/internal/testutil/jwttest"
)

// eventually polls cond every 20ms for up to 15s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSecretSource runs a SecretSource against a real API server (envtest)
// as a user whose Role reads only the JWKS Secret (resourceNames): the
// keys load, a change of the Secret rotates them live, a broken value or
// a deleted Secret leave the last good keys in force.
func TestSecretSource(t *testing.T) {
	env, err := envtestutil.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := t.Context()
	const ns, name = "default", "jwks"
	grantOneSecret(t, admin, ns, name, "jwks-reader")
	iss := jwttest.NewIssuer(t)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"jwks.json": iss.JWKS()}}
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := rest.CopyConfig(cfg)
	reader.Impersonate = rest.ImpersonationConfig{UserName: "jwks-reader"}
	as := kubernetes.NewForConfigOrDie(reader)
	if _, err := as.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the reader lists every Secret: %v", err)
	}
	var mu sync.Mutex
	var errs []string
	src := jwtauth.NewSecretSource(as, ns, name, "jwks.json", jwtauth.SourceOptions{OnError: func(err error) {
		mu.Lock()
		errs = append(errs, err.Error())
		mu.Unlock()
	}})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	eventually(t, "the first keys", func() bool { return src.Keys().Len() == 1 })

	kid := iss.AddKey(t, jose.ES256)
	sec.Data["jwks.json"] = iss.JWKS()
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rotated keys", func() bool { return src.Keys().Len() == 2 })
	v, _ := jwtauth.New(jwtauth.Options{Issuer: iss.URL, Audiences: []string{"api"}, TenantClaim: "org_id", Keys: src})
	if _, err := v.Verify(ctx, iss.Sign(t, kid, iss.Claims("shop-a"))); err != nil {
		t.Errorf("token of the new key: %v", err)
	}

	sec.Data["jwks.json"] = []byte("{not json")
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two errors", func() bool { mu.Lock(); defer mu.Unlock(); return len(errs) >= 2 })
	if src.Keys().Len() != 2 {
		t.Errorf("keys after a broken value and a delete: %d, want the last good 2", src.Keys().Len())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, e := range errs {
		if strings.Contains(e, "kty") || strings.Contains(e, "{not json") {
			t.Errorf("error quotes the Secret: %s", e)
		}
	}
}

// grantOneSecret gives user get, list and watch on the one Secret name.
func grantOneSecret(t *testing.T, c kubernetes.Interface, ns, name, user string) {
	ctx := t.Context()
	_, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{name}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	if err == nil {
		_, err = c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
			Subjects:   []rbacv1.Subject{{Kind: "User", Name: user}},
		}, metav1.CreateOptions{})
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
