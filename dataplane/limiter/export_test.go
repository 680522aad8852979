package limiter

import "github.com/tollgate-dev/tollgate/api/v1alpha1"

var validID = v1alpha1.ValidIdentifier
