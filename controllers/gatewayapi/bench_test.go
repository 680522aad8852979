package gatewayapi

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/dataplane/httproutes"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// BenchmarkGatewayAPICompile10k compiles 10,000 HTTPRoutes (one host and
// one rule each, one Service each) into the route table, encodes its
// ConfigMap, and indexes it as a gateway does. It reports the compressed
// ConfigMap size and the heap a gateway holds for the indexed table.
//
//	go test ./controllers/ -run '^$' -bench GatewayAPICompile -benchtime 3x
func BenchmarkGatewayAPICompile10k(b *testing.B) {
	const n = 10_000
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	routes := make([]gwv1.HTTPRoute, n)
	for i := range routes {
		routes[i] = hr(fmt.Sprintf("team-%d", i%100), fmt.Sprintf("route-%d", i), t0.Add(time.Duration(i)*time.Second),
			[]string{fmt.Sprintf("svc-%d.example.com", i)}, testRule{prefix(fmt.Sprintf("/api/v%d", i%7)), fmt.Sprintf("backend-%d", i)})
	}
	in, _ := precedenceInput(routes)
	var size int
	var rules int
	b.ResetTimer()
	for range b.N {
		out := Translate(in)
		cm, err := out.Table.ConfigMap("tollgate-system", routetable.DefaultName)
		if err != nil {
			b.Fatal(err)
		}
		size, rules = len(cm.BinaryData[routetable.DataKey]), len(out.Table.Rules)
	}
	b.StopTimer()
	if rules != n {
		b.Fatalf("%d rules compiled, want %d", rules, n)
	}
	b.ReportMetric(float64(size)/1024, "KiB-configmap")

	// The gateway side: decode and index, and the heap the index holds.
	cm, _ := Translate(in).Table.ConfigMap("tollgate-system", routetable.DefaultName)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t, err := routetable.FromConfigMap(cm)
	if err != nil {
		b.Fatal(err)
	}
	idx := httproutes.New(t)
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB-gateway-table")
	runtime.KeepAlive(idx)
}
