package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	sjson "sigs.k8s.io/json"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/lib/strictdecode"
	"github.com/tollgate-dev/tollgate/pkg/clip"
)

// Kinds accepted in rule files.
const (
	kindRule     = "RateLimitRule"
	kindRuleList = "RateLimitRuleList"
	kindList     = "List"
	// defaultNamespace is the namespace of a manifest that names none, as
	// kubectl apply would use with the default context.
	defaultNamespace = "default"
)

var ruleAPIVersion = v1alpha1.GroupVersion.String()

// periodPattern is the CRD schema's pattern for spec.refill.period: whole
// seconds written with the units h, m and s.
var periodPattern = regexp.MustCompile(`^([0-9]+h)?([0-9]+m)?([0-9]+s)?$`)

// maxPeriodLength is the schema's maxLength of spec.refill.period.
const maxPeriodLength = 16

// typeMeta reads apiVersion and kind of a JSON object.
func typeMeta(js []byte) (metav1.TypeMeta, error) {
	var tm metav1.TypeMeta
	if len(js) == 0 || js[0] != '{' {
		return tm, errors.New("not a mapping: want a RateLimitRule manifest")
	}
	if err := sjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return tm, fmt.Errorf("apiVersion and kind: %w", err)
	}
	return tm, nil
}

func wrongKind(tm metav1.TypeMeta) error {
	switch {
	case tm.APIVersion == "" && tm.Kind == "":
		return fmt.Errorf("apiVersion and kind missing: want apiVersion %s, kind %s", ruleAPIVersion, kindRule)
	case tm.APIVersion == "":
		return fmt.Errorf("apiVersion missing: want %s", ruleAPIVersion)
	case tm.Kind == "":
		return fmt.Errorf("kind missing: want %s", kindRule)
	}
	return fmt.Errorf("apiVersion %q, kind %q: want apiVersion %s, kind %s (or a %s or %s of them)",
		clip.String(tm.APIVersion), clip.String(tm.Kind), ruleAPIVersion, kindRule, kindRuleList, kindList)
}

// decodeList decodes a RateLimitRuleList or a v1 List of RateLimitRules.
func decodeList(loc string, js []byte, kind string) ([]manifest, error) {
	var list struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata,omitempty"`
		Items           []json.RawMessage `json:"items"`
	}
	if err := strictdecode.Decode(js, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", loc, err)
	}
	out := make([]manifest, 0, len(list.Items))
	var errs []error
	for i, item := range list.Items {
		iloc := fmt.Sprintf("%s items[%d]", loc, i)
		tm, err := typeMeta(item)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", iloc, err))
			continue
		}
		// A v1 List names every item's type; a typed list may leave it out.
		implied := kind == kindRuleList && tm.APIVersion == "" && tm.Kind == ""
		if !implied && (tm.APIVersion != ruleAPIVersion || tm.Kind != kindRule) {
			errs = append(errs, fmt.Errorf("%s: %w", iloc, wrongKind(tm)))
			continue
		}
		m, err := decodeRule(iloc, item)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}

// decodeRule decodes one RateLimitRule and does the checks of the API
// server that snapshot.FromSpec does not do.
func decodeRule(loc string, js []byte) (manifest, error) {
	// The period's text is checked before decoding: the decoder reduces it
	// to a duration, and its errors do not name the field.
	if err := checkPeriod(js); err != nil {
		return manifest{}, fmt.Errorf("%s: %w", loc, err)
	}
	var obj v1alpha1.RateLimitRule
	if err := strictdecode.Decode(js, &obj); err != nil {
		return manifest{}, fmt.Errorf("%s: %w", loc, err)
	}
	if obj.Namespace == "" {
		obj.Namespace = defaultNamespace
	}
	var errs []error
	if obj.Name == "" {
		errs = append(errs, errors.New("metadata.name: missing"))
	} else if msgs := validation.IsDNS1123Subdomain(obj.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("metadata.name %q: %s", clip.String(obj.Name), strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Label(obj.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("metadata.namespace %q: %s", clip.String(obj.Namespace), strings.Join(msgs, "; ")))
	}
	if err := errors.Join(errs...); err != nil {
		return manifest{}, fmt.Errorf("%s: %w", loc, err)
	}
	// Files carry no meaningful creation time; without one, conflicts are
	// decided by namespace/name alone.
	obj.CreationTimestamp = metav1.Time{}
	return manifest{loc: loc, obj: obj}, nil
}

// checkPeriod applies the schema's type, pattern and length to
// spec.refill.period.
func checkPeriod(js []byte) error {
	var raw struct {
		Spec struct {
			Refill *struct {
				Period json.RawMessage `json:"period"`
			} `json:"refill"`
		} `json:"spec"`
	}
	// Errors are left to the strict decode, which reports them by field.
	_ = sjson.UnmarshalCaseSensitivePreserveInts(js, &raw)
	if raw.Spec.Refill == nil || raw.Spec.Refill.Period == nil {
		return nil
	}
	var p string
	if err := json.Unmarshal(raw.Spec.Refill.Period, &p); err != nil {
		return errors.New(`spec.refill.period: must be a string such as "30s", "1m" or "1h30m"`)
	}
	if p == "" || len(p) > maxPeriodLength || !periodPattern.MatchString(p) {
		return fmt.Errorf(`spec.refill.period %q: want whole seconds written with the units h, m and s, such as "30s", "1m" or "1h30m"`, clip.String(p))
	}
	return nil
}
