package kubewatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestErrorHandler(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	cases := []struct {
		err  error
		want string // "" when the error is not reported
	}{
		{io.EOF, ""},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), ""},
		{apierrors.NewResourceExpired("too old resource version"), ""},
		{apierrors.NewGone("gone"), ""},
		{apierrors.NewForbidden(gr, "cm", errors.New("no")), `watching ConfigMap ns/cm: configmaps "cm" is forbidden: no`},
		{errors.New("connection refused"), "watching ConfigMap ns/cm: connection refused"},
	}
	for _, tc := range cases {
		var got error
		ErrorHandler("ConfigMap ns/cm", func(err error) { got = err })(context.Background(), nil, tc.err)
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%v: reported %v, want a routine end", tc.err, got)
		case tc.want != "" && (got == nil || got.Error() != tc.want || !errors.Is(got, tc.err)):
			t.Errorf("%v: reported %v, want %q wrapping it", tc.err, got, tc.want)
		}
	}
	ErrorHandler("x", nil)(context.Background(), nil, errors.New("no reporter: no panic"))
}
