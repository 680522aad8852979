package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	publishDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tollgate_controller_publish_duration_seconds",
		Help:    "Time of one snapshot pass: compile every rule, write changed shards, delete stale ones.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	rulesByState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_controller_rules",
		Help: "RateLimitRules seen by the last publish, by state (accepted, conflict, invalid, not_allowed, expired: spec.expiresAt has passed).",
	}, []string{"state"})
	snapshotShards = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_controller_snapshot_shards",
		Help: "Number of shard ConfigMaps in the published snapshot.",
	})
	snapshotFormat = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_controller_snapshot_format",
		Help: "Format the controller writes the snapshot in (--snapshot-format; 1: placed by tenant, read by every gateway; 2: by tenant and route).",
	})
	buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_build_info",
		Help: "1, labelled with the running binary's version, commit and Go version (tollgate version).",
	}, []string{"version", "commit", "goversion"})
	snapshotVersion = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_controller_snapshot_version",
		Help: "Highest shard version of the published snapshot.",
	})
	configMapWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_controller_configmap_writes_total",
		Help: "Shard ConfigMap writes, by operation (create, update, adopt, delete).",
	}, []string{"op"})
	publishFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_controller_publish_failures_total",
		Help: "Snapshot passes that failed to publish (the rules' status says why: reason PublishFailed).",
	})
	publishFailing = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_controller_publish_failing",
		Help: "1 while the last snapshot pass failed to publish, else 0.",
	})
	foreignConfigMaps = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_controller_foreign_configmaps",
		Help: "ConfigMaps carrying the snapshot label that the controller does not manage (left alone, see the ForeignConfigMap events).",
	})
	regionShare = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_region_share_percent",
		Help: "The region share in force of a rule split between regions whose shares follow the traffic, by rule (namespace/name) and region, as the region rebalancer last published it.",
	}, []string{"rule", "region"})
	regionDemand = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_region_demand_tokens_per_second",
		Help: "The smoothed demand (tokens asked for, admitted and refused, cost included, per second) of a rule in a region, as the region rebalancer measured it.",
	}, []string{"rule", "region"})
	regionChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_region_share_changes_total",
		Help: "Steps of region share changes: Lowered (the first step, the shrinking regions), Raised (the growing ones).",
	}, []string{"kind"})
	regionReadFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_region_read_failures_total",
		Help: "Passes of the region rebalancer that could not read a region's Redis (its shares stayed), by region.",
	}, []string{"region"})
	statusPatches = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_controller_status_patches_total",
		Help: "RateLimitRule status patches.",
	})
)

func init() {
	metrics.Registry.MustRegister(buildInfo, snapshotFormat, publishDuration, rulesByState, snapshotShards, snapshotVersion, configMapWrites, statusPatches,
		publishFailures, publishFailing, foreignConfigMaps, regionShare, regionDemand, regionChanges, regionReadFailures)
}
