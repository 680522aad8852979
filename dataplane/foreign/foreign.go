// Package foreign reports the objects a gateway refuses to load because the
// controller does not own them: snapshot ConfigMaps that are not
// snapshot.Owned, and a route table ConfigMap or TLS Secret that is not
// routetable.Owned. The sources decide what to refuse; a Reporter tells: a
// counter by source for every refusal, and, the first time this process
// refuses an object, a Warning Event on that object and a log line.
package foreign

import (
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
)

// Event reasons, by the kind of the refused object. The controller reports
// the snapshot ConfigMaps it leaves alone with the same reason
// (ForeignConfigMap), action Publish; gateways use action Load.
const (
	ReasonConfigMap = "ForeignConfigMap"
	ReasonSecret    = "ForeignSecret"
	// Action is the Events' action: the gateway refused to load the object.
	Action = "Load"
)

// maxRemembered bounds the objects a Reporter remembers as reported. Past
// it the memory is cleared, and an object refused again is reported again.
const maxRemembered = 1024

// Object is an object of a typed client, a *corev1.ConfigMap or a
// *corev1.Secret as an informer delivers it.
type Object interface {
	metav1.Object
	runtime.Object
}

// Options configure a Reporter. Every field may be left zero.
type Options struct {
	// Refused counts refusals by source (one label); every refused version
	// of an object counts. The gateway passes
	// metrics.Gateway.ForeignRefused.
	Refused *prometheus.CounterVec
	// Recorder records the Warning Events. Without one, none are recorded.
	Recorder events.EventRecorder
	// Log hears the first refusal of each object.
	Log logr.Logger
}

// Reporter reports refusals. It is safe for concurrent use; each source
// calls Refuse from its informer's goroutine.
type Reporter struct {
	opts Options

	mu   sync.Mutex
	seen map[types.UID]bool // objects reported by Event and log line
}

// New returns a Reporter.
func New(opts Options) *Reporter {
	return &Reporter{opts: opts, seen: map[types.UID]bool{}}
}

// Refuse reports that source refused obj, for the reason err. It never
// blocks on the API server: Events are sent in the background.
func (r *Reporter) Refuse(source string, obj Object, err error) {
	if r.opts.Refused != nil {
		r.opts.Refused.WithLabelValues(source).Inc()
	}
	r.mu.Lock()
	first := !r.seen[obj.GetUID()]
	if first {
		if len(r.seen) >= maxRemembered {
			clear(r.seen)
		}
		r.seen[obj.GetUID()] = true
	}
	r.mu.Unlock()
	if !first {
		return
	}
	r.opts.Log.Error(err, "refused an object the controller does not own; the gateway does not load it", "source", source,
		"namespace", obj.GetNamespace(), "name", obj.GetName())
	if r.opts.Recorder == nil {
		return
	}
	reason := ReasonConfigMap
	if _, ok := obj.(*corev1.Secret); ok {
		reason = ReasonSecret
	}
	note := err.Error()
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	r.opts.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, Action, "%s", note)
}

// maxNote is the longest note the API server accepts in an Event.
const maxNote = 1024
