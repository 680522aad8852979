package foreign

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
)

// TestRefuse: every refusal counts; the Event and the log line come once
// per object, with the reason of its kind. The recorder is client-go's,
// watched in process (the envtest of dataplane/rules sends them to an API
// server).
func TestRefuse(t *testing.T) {
	b := events.NewBroadcaster(&events.EventSinkImpl{}) // the sink is not used: events are watched here
	defer b.Shutdown()
	seen := make(chan *eventsv1.Event, 10)
	stop, err := b.StartEventWatcher(func(obj runtime.Object) { seen <- obj.(*eventsv1.Event) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var logged []string
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused_total"}, []string{"source"})
	r := New(Options{Refused: refused, Recorder: b.NewRecorder(clientgoscheme.Scheme, "tollgate-gateway"),
		Log: funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})})

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "snap-0-of-2", UID: "u1", ResourceVersion: "1"}}
	r.Refuse("rules", cm, errors.New("not the controller's"))
	cm2 := cm.DeepCopy()
	cm2.ResourceVersion = "2"
	r.Refuse("rules", cm2, errors.New("not the controller's")) // a new version of the same object
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tollgate-httproutes-tls", UID: "u2"}}
	r.Refuse("tls", sec, errors.New(strings.Repeat("x", 2000)))

	if n := testutil.ToFloat64(refused.WithLabelValues("rules")); n != 2 {
		t.Errorf("rules refusals = %v, want 2 (every version counts)", n)
	}
	if n := testutil.ToFloat64(refused.WithLabelValues("tls")); n != 1 {
		t.Errorf("tls refusals = %v, want 1", n)
	}
	if len(logged) != 2 {
		t.Errorf("%d log lines, want one per object: %q", len(logged), logged)
	}
	var got []*eventsv1.Event
	for len(got) < 2 {
		select {
		case e := <-seen:
			got = append(got, e)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d Events, want one per object", len(got))
		}
	}
	select {
	case e := <-seen:
		t.Errorf("a third Event: %+v", e)
	default:
	}
	byName := map[string]*eventsv1.Event{}
	for _, e := range got {
		byName[e.Regarding.Name] = e
	}
	if e := byName["snap-0-of-2"]; e == nil || e.Reason != ReasonConfigMap || e.Regarding.Kind != "ConfigMap" || e.Type != corev1.EventTypeWarning ||
		e.Action != Action || e.Namespace != "ns" || e.Note != "not the controller's" {
		t.Errorf("ConfigMap Event: %+v", e)
	}
	if e := byName["tollgate-httproutes-tls"]; e == nil || e.Reason != ReasonSecret || e.Regarding.Kind != "Secret" || len(e.Note) != maxNote {
		t.Errorf("Secret Event: %+v", e)
	}
}

// TestRefuseWithoutRecorder: counting and logging need no Event recorder,
// and the memory of reported objects stays bounded.
func TestRefuseWithoutRecorder(t *testing.T) {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused_total"}, []string{"source"})
	r := New(Options{Refused: refused})
	const n = maxRemembered + 10
	for i := range n {
		r.Refuse("rules", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{UID: types.UID(fmt.Sprint(i))}}, errors.New("x"))
	}
	if got := testutil.ToFloat64(refused.WithLabelValues("rules")); got != n {
		t.Errorf("refusals = %v, want %d", got, n)
	}
	if len(r.seen) > maxRemembered {
		t.Errorf("%d objects remembered, bound %d", len(r.seen), maxRemembered)
	}
}
