package main

import "time"

// plan holds the sizes and durations (in JSON: nanoseconds) of every
// scenario, full or quick.
type plan struct {
	Warmup time.Duration `json:"warmupNs"`

	// 1. Added latency.
	LatencyRates []int         `json:"latencyRates"`
	LatencyDur   time.Duration `json:"latencyDurationNs"`

	// 2. Throughput ceiling: offered rates tried in order until one fails.
	CeilingRates  []int         `json:"ceilingRates"`
	CeilingDur    time.Duration `json:"ceilingStepDurationNs"`
	ProfileRate   int           `json:"profileRate"`
	ProfileDur    time.Duration `json:"profileDurationNs"`
	CeilingP99    time.Duration `json:"ceilingP99Ns"`
	CeilingBadMax float64       `json:"ceilingBadFraction"`

	// 3. Redis cost.
	CostRate int           `json:"costRate"`
	CostDur  time.Duration `json:"costDurationNs"`

	// Tenant mix of scenarios 1-3.
	Tenants  int     `json:"tenants"`
	ZipfS    float64 `json:"zipfS"`
	HotShare float64 `json:"hotShare"`

	// 4. Accuracy.
	AccuracyInstances []int         `json:"accuracyInstances"`
	AccuracyWindow    time.Duration `json:"accuracyWindowNs"`

	// 5. Outage: each phase (before, during, after) lasts this long.
	OutageRate  int           `json:"outageRate"`
	OutagePhase time.Duration `json:"outagePhaseNs"`

	// 6. Propagation.
	PropagationChanges int `json:"propagationChanges"`

	// 7. Scale.
	RedisBuckets int `json:"redisBuckets"`
	// Addresses is the number of client addresses of the per-address
	// buckets (spec.by clientAddress) the scale scenario measures.
	Addresses     int    `json:"addresses"`
	SnapshotRules int    `json:"snapshotRules"`
	PublishBench  string `json:"publishBench"`

	// 8. Envoy rate limit service: callers, measured time (closed-loop,
	// then at a steady RLSRate, then at RLSBusy of the batched mode's
	// closed-loop rate).
	RLSStreams int           `json:"rlsStreams"`
	RLSRate    int           `json:"rlsRate"` // calls per second, all callers together; 0: no steady pass
	RLSBusy    float64       `json:"rlsBusy"` // a share of the batched mode's closed-loop calls per second; 0: no busy pass
	RLSDur     time.Duration `json:"rlsDurationNs"`

	// 12. Regions: how long the shifted load runs in each split mode;
	// the rate and rounds (each mode once per round) of the demand
	// recording's overhead.
	RegionsShiftDur time.Duration `json:"regionsShiftDurationNs"`
	RegionsRate     int           `json:"regionsRate"`
	RegionsRounds   int           `json:"regionsRounds"`

	// 9. Limits: a steady rate the machine sustains with every limit, so
	// that the rows compare costs, not queues.
	LimitsRate int           `json:"limitsRate"`
	LimitsDur  time.Duration `json:"limitsDurationNs"`

	// 10. Scale-out (-scale-out): gateways (chains), tenants, the offered
	// rate and how long each pass loads the cluster; the masters of the
	// two passes; how long the operations pass holds a slot migrating;
	// the steady rates of one chain and how long each runs.
	ScaleOutGateways int           `json:"scaleOutGateways"`
	ScaleOutTenants  int           `json:"scaleOutTenants"`
	ScaleOutRate     int           `json:"scaleOutRate"`
	ScaleOutDur      time.Duration `json:"scaleOutDurationNs"`
	ScaleOutMasters  [2]int        `json:"scaleOutMasters"`
	ScaleOutHold     time.Duration `json:"scaleOutHoldNs"`
	// ScaleOutRounds: the passes the scaling efficiency compares run this
	// many times, interleaved, and their figures are pooled.
	ScaleOutRounds int           `json:"scaleOutRounds"`
	SteadyRates    []int         `json:"steadyRates"`
	SteadyDur      time.Duration `json:"steadyDurationNs"`

	// 11. HTTP/2 and gRPC: one steady rate for every row, pinned.
	HTTP2Rate int           `json:"http2Rate"`
	HTTP2Dur  time.Duration `json:"http2DurationNs"`
}

// newPlan is the full plan, or the quick one.
// long: one literal of every scenario's sizes, then the quick mode's, side by side.
func newPlan(quick bool) plan {
	p := plan{
		Warmup:       2 * time.Second,
		LatencyRates: []int{2500, 5000, 10000},
		LatencyDur:   8 * time.Second,

		CeilingRates:  []int{2000, 3000, 4000, 5000, 6500, 8000, 10000, 12500, 15000, 20000, 25000},
		CeilingDur:    4 * time.Second,
		ProfileRate:   2500,
		ProfileDur:    5 * time.Second,
		CeilingP99:    10 * time.Millisecond,
		CeilingBadMax: 0.01,

		CostRate: 2500,
		CostDur:  6 * time.Second,

		Tenants:  1000,
		ZipfS:    1.1,
		HotShare: 0.30,

		AccuracyInstances: []int{1, 4, 20},
		AccuracyWindow:    3 * time.Second,

		OutageRate:  2500,
		OutagePhase: 5 * time.Second,

		PropagationChanges: 20,

		RedisBuckets:  100_000,
		Addresses:     100_000,
		SnapshotRules: 100_000,
		PublishBench:  "Publish/rules=100000/cold",

		RLSStreams: 50,
		RLSDur:     20 * time.Second,
		RLSRate:    refRLSDecisionsPerSecond,
		RLSBusy:    0.75,

		LimitsRate: 1000,
		LimitsDur:  8 * time.Second,

		ScaleOutGateways: 12,
		ScaleOutTenants:  100_000,
		ScaleOutRate:     10_000,
		ScaleOutDur:      15 * time.Second,
		ScaleOutMasters:  [2]int{3, 6},
		ScaleOutHold:     time.Second,
		ScaleOutRounds:   2,
		SteadyRates:      []int{1000, 5000, 20000},
		SteadyDur:        6 * time.Second,

		HTTP2Rate: 2000,
		HTTP2Dur:  8 * time.Second,

		RegionsShiftDur: 40 * time.Second,
		RegionsRate:     1000,
		RegionsRounds:   3,
	}
	if quick {
		// Quick mode checks the harness, not the machine: low rates, so
		// that it also runs under the race detector (make test) next to
		// other test packages without saturating two cores.
		p.Warmup = 300 * time.Millisecond
		p.LatencyRates = []int{250, 500, 1000}
		p.LatencyDur = time.Second
		p.CeilingRates = []int{250, 500}
		p.CeilingDur = time.Second
		p.ProfileRate = 250
		p.ProfileDur = time.Second
		p.CostRate = 250
		p.CostDur = time.Second
		p.OutageRate = 250
		p.AccuracyWindow = time.Second
		p.OutagePhase = 1500 * time.Millisecond
		p.PropagationChanges = 3
		p.RedisBuckets = 10_000
		p.Addresses = 2_000
		p.SnapshotRules = 10_000
		p.PublishBench = "Publish/rules=20000/cold"
		p.RLSStreams = 4
		p.RLSDur = time.Second
		p.RLSRate = 200
		p.RLSBusy = 0.25 // well below the ceiling, under the race detector too
		p.LimitsRate = 250
		p.LimitsDur = time.Second
		p.ScaleOutGateways = 3
		p.ScaleOutTenants = 5_000
		p.ScaleOutRate = 600
		p.ScaleOutDur = 1500 * time.Millisecond
		p.ScaleOutHold = 150 * time.Millisecond
		p.ScaleOutRounds = 1
		p.SteadyRates = []int{200, 400, 800}
		p.SteadyDur = time.Second
		p.RegionsShiftDur = 6 * time.Second
		p.RegionsRate = 250
		p.RegionsRounds = 1
		p.HTTP2Rate = 250
		p.HTTP2Dur = time.Second
	}
	return p
}
