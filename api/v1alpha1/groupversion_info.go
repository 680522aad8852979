// Package v1alpha1 contains the API types of the ratelimit.tollgate.dev group.
//
// +kubebuilder:object:generate=true
// +groupName=ratelimit.tollgate.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the tollgate API.
	GroupVersion = schema.GroupVersion{Group: "ratelimit.tollgate.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
