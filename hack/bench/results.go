package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Results is results.json. Latencies are in milliseconds, CPU in
// microseconds, memory in bytes, ratios are plain numbers (1.0 = baseline).
type Results struct {
	Meta        Meta               `json:"meta"`
	Latency     *LatencyResult     `json:"latency,omitempty"`
	Throughput  *ThroughputResult  `json:"throughput,omitempty"`
	RedisCost   *RedisCostResult   `json:"redisCost,omitempty"`
	Accuracy    *AccuracyResult    `json:"accuracy,omitempty"`
	Outage      *OutageResult      `json:"outage,omitempty"`
	Propagation *PropagationResult `json:"propagation,omitempty"`
	Scale       *ScaleResult       `json:"scale,omitempty"`
	RLS         *RLSResult         `json:"rls,omitempty"`
	Limits      *LimitsResult      `json:"limits,omitempty"`
	ScaleOut    *ScaleOutResult    `json:"scaleOut,omitempty"`
	HTTP2       *HTTP2Result       `json:"http2,omitempty"`
	Regions     *RegionsResult     `json:"regions,omitempty"`
	Targets     []TargetCheck      `json:"targets"`
	Errors      map[string]string  `json:"errors,omitempty"`
}

// Meta describes the run and the machine.
type Meta struct {
	Date            string             `json:"date"`
	Mode            string             `json:"mode"` // full or quick
	Command         string             `json:"command"`
	Cores           int                `json:"cores"`
	CPUModel        string             `json:"cpuModel"`
	MemoryBytes     int64              `json:"memoryBytes"`
	Kernel          string             `json:"kernel"`
	GoVersion       string             `json:"goVersion"`
	RedisVersion    string             `json:"redisVersion,omitempty"`
	Race            bool               `json:"raceDetector,omitempty"`
	Seconds         float64            `json:"seconds"`
	ScenarioSeconds map[string]float64 `json:"scenarioSeconds"`
	// LoadAvg is the 1-minute load average at the start and end of each
	// scenario: other work on the machine shows here.
	LoadAvg map[string][2]float64 `json:"loadAverage"`
	// Pinning says how the latency and rls scenarios placed the measured processes
	// on CPUs (taskset), or why it could not.
	Pinning string `json:"pinning"`
	Plan    plan   `json:"plan"`
}

func newResults(cfg config, p plan) *Results {
	mode := "full"
	if cfg.quick {
		mode = "quick"
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return &Results{
		Meta: Meta{
			Date: time.Now().UTC().Format(time.RFC3339), Mode: mode, Command: strings.TrimSpace(cfg.command),
			Cores: numCPU(), CPUModel: cpuModel(), MemoryBytes: memTotal(), Kernel: strings.TrimSpace(string(kernel)),
			GoVersion: goVersion(), Race: raceEnabled, ScenarioSeconds: map[string]float64{}, LoadAvg: map[string][2]float64{}, Plan: p,
			RedisVersion: redisVersion(),
		},
		Errors: map[string]string{},
	}
}

// TargetCheck is one target (see targets.go) and what this run measured.
type TargetCheck struct {
	What     string `json:"what"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	// Status is met, missed or n/a (not measured in this run).
	Status string `json:"status"`
	Note   string `json:"note,omitempty"`
}

// LatencyResult is scenario 1.
type LatencyResult struct {
	Mix   string        `json:"mix"`
	Rule  string        `json:"rule"`
	Steps []LatencyStep `json:"steps"`
	Nginx []LatencyStep `json:"nginx,omitempty"`
	// Pinned is the gateway at the first rate alone on the measured CPU,
	// as nginx and the floors run: the CPU comparison's gateway figure.
	Pinned []LatencyStep `json:"pinnedGateway,omitempty"`
	// ProxyFloor is a bare httputil.ReverseProxy with the gateway's
	// transport, at the first rate.
	ProxyFloor []LatencyStep `json:"proxyFloor,omitempty"`
	// FastFloor is a bare valyala/fasthttp proxy (hack/engineeval) with the
	// gateway's settings where they map, at the first rate.
	FastFloor []LatencyStep `json:"fasthttpFloor,omitempty"`
	Note      string        `json:"note,omitempty"`
}

// LatencyStep compares direct and through-the-gateway at one rate.
type LatencyStep struct {
	Rate    int         `json:"rate"`
	Direct  *loadResult `json:"direct"`
	Gateway *loadResult `json:"gateway"`
	// Added is gateway minus direct, per percentile.
	AddedP50  float64 `json:"addedP50Ms"`
	AddedP99  float64 `json:"addedP99Ms"`
	AddedP999 float64 `json:"addedP999Ms"`
	// CPUPerRequest is gateway CPU µs per proxied (2xx) request.
	CPUPerRequest float64 `json:"gatewayCpuUsPerProxiedRequest"`
}

// ThroughputResult is scenario 2.
type ThroughputResult struct {
	Mix   string           `json:"mix"`
	Modes []ThroughputMode `json:"modes"`
}

// ThroughputMode is one limiter mode's step-up.
type ThroughputMode struct {
	Mode        string           `json:"mode"`
	Flags       string           `json:"flags"`
	Steps       []ThroughputStep `json:"steps"`
	Ceiling     int              `json:"ceilingRate"` // highest passing offered rate; 0 if none passed
	CeilingCPU  float64          `json:"cpuUsPerDecisionAtCeiling"`
	CeilingVs   float64          `json:"ceilingVsClassic"`
	CPUVs       float64          `json:"cpuVsClassic"`
	StoppedBy   string           `json:"stoppedBy"`
	Profile     *ProfileResult   `json:"profile,omitempty"`
	HitTopRate  bool             `json:"hitTopRate,omitempty"`
	Decisions   float64          `json:"decisionsAtCeiling"`
	ReadyAfterS float64          `json:"readyAfterSeconds"`
}

// ThroughputStep is one offered rate.
type ThroughputStep struct {
	Load           *loadResult `json:"load"`
	CPUPerDecision float64     `json:"cpuUsPerDecision"`
	Decisions      float64     `json:"decisions"`
	Pass           bool        `json:"pass"`
	Why            string      `json:"why,omitempty"`
}

// ProfileResult is a CPU profile of the gateway at a fixed rate.
type ProfileResult struct {
	Rate           int      `json:"rate"`
	Seconds        float64  `json:"seconds"`
	CPUPerRequest  float64  `json:"cpuUsPerRequest"`
	LimiterShare   float64  `json:"limiterShare"` // of the process's CPU samples
	LimiterPerDec  float64  `json:"limiterCpuUsPerDecision"`
	Top            []string `json:"top"` // heaviest functions, cumulative
	File           string   `json:"file"`
	LimiterMatches []string `json:"limiterFunctions"`
}

// RedisCostResult is scenario 3.
type RedisCostResult struct {
	Mix   string          `json:"mix"`
	Rule  string          `json:"rule"`
	Modes []RedisCostMode `json:"modes"`
}

// RedisCostMode is one limiter mode, on the mix and on the hot tenant alone.
type RedisCostMode struct {
	Mode string        `json:"mode"`
	Mix  *RedisCostRun `json:"mix"`
	Hot  *RedisCostRun `json:"hotOnly"`
}

// RedisCostRun is one run's Redis traffic per decision.
type RedisCostRun struct {
	Rate                int            `json:"rate"`
	Decisions           float64        `json:"decisions"`
	RoundTrips          float64        `json:"roundTrips"`
	Commands            float64        `json:"scriptCallsSent"`
	ServerScriptCalls   int64          `json:"serverScriptCalls"` // INFO commandstats evalsha+eval
	RoundTripsPerDec    float64        `json:"roundTripsPerDecision"`
	CommandsPerDec      float64        `json:"scriptCallsPerDecision"`
	ServerCallsPerDec   float64        `json:"serverScriptCallsPerDecision"`
	CPUPerDecision      float64        `json:"cpuUsPerDecision"`
	RedisCPUPerDecision float64        `json:"redisCpuUsPerDecision"`
	P99                 float64        `json:"p99Ms"`
	Codes               map[string]int `json:"codes"`
}

// AccuracyResult is scenario 4.
type AccuracyResult struct {
	Rule  string         `json:"rule"`
	Load  string         `json:"load"`
	Cases []AccuracyCase `json:"cases"`
	Note  string         `json:"note"`
}

// AccuracyCase is N instances on one bucket in one condition.
type AccuracyCase struct {
	Case      string  `json:"case"` // healthy, prefetch, slow, outage
	Instances int     `json:"instances"`
	Batch     int64   `json:"prefetchBatch,omitempty"`
	Seconds   float64 `json:"seconds"`
	Decisions int64   `json:"decisions"`
	Admitted  int64   `json:"admitted"`
	IdealLow  float64 `json:"idealLow"`
	IdealHigh float64 `json:"idealHigh"`
	// Error is admitted vs the ideal range: 0 inside it, else the relative
	// distance to its nearer end (negative: under).
	Error  float64 `json:"error"`
	Ratio  float64 `json:"ratioToIdealMid"`
	Within bool    `json:"withinTarget"`
	Target float64 `json:"target"`
	Series *series `json:"-"`
}

// OutageResult is scenario 5.
type OutageResult struct {
	Rate            int         `json:"rate"`
	Rule            string      `json:"rule"`
	Flags           string      `json:"flags"`
	DirectP99       float64     `json:"directP99Ms"`
	Before          *loadResult `json:"before"`
	Transition      *loadResult `json:"transition"`
	During          *loadResult `json:"during"`
	Recovery        *loadResult `json:"recovery"`
	After           *loadResult `json:"after"`
	AddedP99Before  float64     `json:"addedP99BeforeMs"`
	AddedP99During  float64     `json:"addedP99DuringMs"`
	AddedP99After   float64     `json:"addedP99AfterMs"`
	OpenAfterMs     float64     `json:"breakerOpenAfterMs"`   // kill → breaker_state{open}=1 seen on /metrics
	LocalAfterMs    float64     `json:"firstLocalDecisionMs"` // kill → decisions{source=local} > 0 seen
	PollMs          float64     `json:"pollIntervalMs"`       // resolution of the two above
	ClosedAfterMs   float64     `json:"breakerClosedAfterMs"` // restart → breaker_state{closed}=1
	SlowDuring      int         `json:"slowRequestsDuring"`   // latency ≥ redis timeout while open
	SlowBefore      int         `json:"slowRequestsBefore"`   // the same, before the kill, for comparison
	SlowThresholdMs float64     `json:"slowThresholdMs"`
	RedisCallsOpen  float64     `json:"redisCallsWhileOpen"` // background probes
	// WaitedOpen is the requests that waited for Redis while the breaker
	// was open (the gateway's tollgate_gateway_redis_waits_total, from
	// openSettle after the breaker was seen open to the restart).
	WaitedOpen     float64 `json:"redisWaitsWhileOpen"`
	AdmittedDuring int     `json:"admittedDuring"`
	LimitDuring    float64 `json:"limitDuring"`
	AdmittedRatio  float64 `json:"admittedVsLimit"`
	Note           string  `json:"note,omitempty"`
	Series         *series `json:"-"`
}

// PropagationResult is scenario 6.
type PropagationResult struct {
	Gateways int       `json:"gateways"`
	Changes  int       `json:"changes"`
	DelaysMs []float64 `json:"delaysMs"` // API write → last gateway enforcing, per change
	P50      float64   `json:"p50Ms"`
	P99      float64   `json:"p99Ms"`
	Max      float64   `json:"maxMs"`
	PollMs   float64   `json:"pollIntervalMs"`
}

// ScaleResult is scenario 7.
type ScaleResult struct {
	Buckets           int     `json:"buckets"`
	RedisBytesPerBkt  float64 `json:"redisBytesPerBucket"` // used_memory delta / buckets
	MemoryUsageSample int64   `json:"memoryUsageSampleKey"`
	ExpiresCount      int64   `json:"keysWithExpiry"`
	Rules             int     `json:"rules"`
	Shards            int     `json:"shards"`
	SnapshotBytes     int     `json:"snapshotBytes"`
	RSS               int64   `json:"gatewayRss"`
	RSSIdle           int64   `json:"gatewayRssIdle"`
	RSSDelta          int64   `json:"gatewayRssDelta"`
	HeapInuse         float64 `json:"gatewayHeapInuse"`
	HeapInuseIdle     float64 `json:"gatewayHeapInuseIdle"`
	ReadySeconds      float64 `json:"gatewayReadySeconds"`
	ReadySecondsIdle  float64 `json:"gatewayReadySecondsIdle"`
	PublishBench      string  `json:"publishBenchmark"`
	PublishSeconds    float64 `json:"controllerPublishSeconds"`
	PublishOutput     string  `json:"publishOutput"`
	// Addresses: buckets keyed by client address.
	Addresses *AddressResult `json:"addresses,omitempty"`
}

// loadAvg is the 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var x float64
	fmt.Sscan(string(b), &x)
	return x
}

// redisVersion asks redis-server --version.
func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "not installed"
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(string(out))
}

// RLSResult is the rls scenario's: the Envoy rate limit service.
type RLSResult struct {
	Streams int    `json:"streams"`
	Mix     string `json:"mix"`
	Rule    string `json:"rule"`
	// The closed loops: each target driven as fast as it answers.
	RLSPass
	// Steady is the same targets again at steady rates (the same work per
	// second for each): the reference's rate, then a busy one near the
	// default mode's ceiling.
	Steady []RLSPass `json:"steady,omitempty"`
}

// RLSPass is one pass of the rls scenario over every target.
type RLSPass struct {
	Rate int `json:"rate,omitempty"` // calls per second; 0: closed loops
	// Busy, when set, is the share of the batched mode's closed-loop calls
	// per second that Rate was set to.
	Busy  float64  `json:"busy,omitempty"`
	Modes []RLSRun `json:"modes"`
	// Floor is a grpc-go server answering a constant OK under the same load.
	Floor *RLSRun `json:"floor,omitempty"`
}

// RLSRun is one limiter mode's run of the rls scenario.
type RLSRun struct {
	Mode                string      `json:"mode"`
	Calls               int64       `json:"calls"`
	Failed              int64       `json:"failed"`
	PerSecond           float64     `json:"decisionsPerSecond"`
	P50                 float64     `json:"p50Ms"`
	P99                 float64     `json:"p99Ms"`
	CPUPerDecision      float64     `json:"cpuMicrosPerDecision"`
	PerCPUSecond        float64     `json:"decisionsPerCPUSecond"`
	VsReference         float64     `json:"vsReference"` // decisions per CPU-second over Envoy's ratelimit service's
	ScriptCallsPerDec   float64     `json:"scriptCallsPerDecision"`
	RoundTripsPerDec    float64     `json:"roundTripsPerDecision"`
	RedisCPUPerDecision float64     `json:"redisCpuMicrosPerDecision"`
	VsFloor             float64     `json:"vsFloor,omitempty"` // CPU per decision over the floor's per call
	Profile             *RLSProfile `json:"profile,omitempty"`
}

// RegionsResult is scenario 12: region shares that follow the traffic.
type RegionsResult struct {
	Rule string `json:"rule"`
	// Shift: the same load moved to 90/10 under the static split and with
	// the rebalancer.
	Shift []RegionsShiftRun `json:"shift"`
	// ServedRatio is the adaptive run's served requests over the static
	// run's.
	ServedRatio float64 `json:"servedRatio"`
	// Overhead: decisions with and without demand recording, same run.
	Overhead []RegionsCostRun `json:"overhead"`
	// CPURatio is the gateway CPU per decision with recording over
	// without; RedisCPURatio the same for redis-server.
	CPURatio      float64 `json:"cpuRatio"`
	RedisCPURatio float64 `json:"redisCpuRatio"`
}

// RegionsShiftRun is one split mode under the shifted load.
type RegionsShiftRun struct {
	Mode      string  `json:"mode"` // static or adaptive
	Seconds   float64 `json:"seconds"`
	Sent      int     `json:"sent"`
	Served    int     `json:"served"`
	ServedEU  int     `json:"servedEU"`
	ServedUS  int     `json:"servedUS"`
	PerSecond float64 `json:"servedPerSecond"`
	// Split is the shares in force at the end.
	Split string `json:"split"`
}

// RegionsCostRun is one mode of the demand recording's overhead, over
// every round.
type RegionsCostRun struct {
	Mode                string  `json:"mode"` // "recording demand" or "not recording"
	Decisions           float64 `json:"decisions"`
	RoundTripsPerDec    float64 `json:"roundTripsPerDecision"`
	ServerCallsPerDec   float64 `json:"serverScriptCallsPerDecision"`
	CPUPerDecision      float64 `json:"gatewayCpuUsPerDecision"`
	RedisCPUPerDecision float64 `json:"redisCpuUsPerDecision"`
}
