package meta

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

func newMetrics(s *Service) *state.Metrics {
	m := &state.Metrics{
		Reg: prometheus.NewRegistry(),
		Heartbeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_heartbeats_total",
			Help: "Datanode heartbeats accepted."}),
		ReplicaFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_replica_failures_total",
			Help: "Pipelines closed because a member reported its replica failed."}),
		BacklogWaits: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_backlog_waits_total",
			Help: "Client writes held back while the meta leader's proposals not yet applied were at their bound."}),
		BacklogRefusals: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_backlog_refusals_total",
			Help: "Client writes refused BUSY after waiting for the meta leader's proposal backlog to drain."}),
		DegradedAllocations: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_degraded_allocations_total",
			Help: "Blocks allocated on a pipeline with a STALE member (a raft majority HEALTHY) because no pipeline had every member HEALTHY."}),
		MembersBehind: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_members_behind_total",
			Help: "Pipeline members reported by their leader as behind its compacted log (their replicas are replaced by copies)."}),
		Registrations: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_registrations_total",
			Help: "Datanodes registered (node IDs assigned)."}),
		Allocations: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_allocations_total",
			Help: "Blocks allocated."}),
		Commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_key_commits_total",
			Help: "Keys committed (new versions made visible)."}),
		Commands: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_commands_total",
			Help: "Commands sent to datanodes in heartbeat responses."}),
		DeletesScheduled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spindle_meta_deletes_scheduled_total",
			Help: "Blocks scheduled for deletion, by reason (replaced, deleted, expired)."}, []string{"reason"}),
		DeletesDelivered: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_deletes_delivered_total",
			Help: "Block deletions delivered to datanodes (redeliveries included)."}),
		DeletesAcked: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_deletes_completed_total",
			Help: "Block deletions completed (acknowledged)."}),
		DeletesDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_deletes_dropped_total",
			Help: "Block deletions given up after the maximum number of deliveries."}),
		Requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "spindle_meta_request_seconds",
			Help:    "Latency of the meta service's HTTP requests, by route and status code.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)}, []string{"route", "code"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spindle_meta_requests_refused_total",
			Help: "Requests refused with 403 because the caller's certificate does not allow them (auth.go), by route."}, []string{"route"}),
	}
	for _, r := range []string{"replaced", "deleted", "expired"} {
		m.DeletesScheduled.WithLabelValues(r)
	}
	m.Reg.MustRegister(m.BacklogWaits, m.BacklogRefusals, m.Heartbeats, m.ReplicaFailures, m.MembersBehind, m.DegradedAllocations, m.Registrations, m.Allocations, m.Commits, m.Commands,
		m.DeletesScheduled, m.DeletesDelivered, m.DeletesAcked, m.DeletesDropped, m.Requests, m.Refused,
		stateCollector{s},
		raftCollector{s}, // raft_metrics.go
		tlsconf.ExpiryGauge(s.Cfg.TLS),
		opsCollector{s}, s.ec, // ops_metrics.go; package ecmeta
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_meta_request_body_bytes_in_flight",
			Help: "Bytes of request bodies admitted now (admission.go; at most MaxBodyBytesInFlight, then requests wait and are refused BUSY)."},
			func() float64 { return float64(s.bodies.inFlightBytes.Load()) }),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

var (
	descNodes       = prometheus.NewDesc("spindle_meta_datanodes", "Registered datanodes by health.", []string{"health"}, nil)
	descPipelines   = prometheus.NewDesc("spindle_meta_pipelines", "Pipelines by state.", []string{"state"}, nil)
	descContainers  = prometheus.NewDesc("spindle_meta_containers", "Containers by state.", []string{"state"}, nil)
	descBuckets     = prometheus.NewDesc("spindle_meta_buckets", "Buckets.", nil, nil)
	descKeys        = prometheus.NewDesc("spindle_meta_keys", "Committed keys.", nil, nil)
	descKeyBytes    = prometheus.NewDesc("spindle_meta_key_bytes", "Bytes of committed keys.", nil, nil)
	descAllocs      = prometheus.NewDesc("spindle_meta_pending_allocations", "Blocks allocated and not committed yet.", nil, nil)
	descDeletes     = prometheus.NewDesc("spindle_meta_pending_deletes", "Blocks scheduled for deletion and not acknowledged yet.", nil, nil)
	descSafeMode    = prometheus.NewDesc("spindle_meta_safe_mode", "1 while the meta service is in safe mode (no replication decisions), else 0.", nil, nil)
	descUnder       = prometheus.NewDesc("spindle_meta_replication_under_replicated", "CLOSED containers with fewer healthy replicas than the replication factor, and OPEN or CLOSING ones of a pipeline with a DEAD member.", nil, nil)
	descUnderOpen   = prometheus.NewDesc("spindle_meta_replication_under_replicated_open", "OPEN or CLOSING containers of a pipeline with a DEAD member (kept OPEN while no replacement exists): writes acknowledged by fewer replicas than the pipeline has.", nil, nil)
	descUnrecov     = prometheus.NewDesc("spindle_meta_replication_unrecoverable", "CLOSED containers with no healthy replica reported.", nil, nil)
	descPending     = prometheus.NewDesc("spindle_meta_replication_pending_bytes", "Bytes of the container copies still needed (size × missing replicas).", nil, nil)
	descInflight    = prometheus.NewDesc("spindle_meta_replication_inflight", "Container copies in flight.", nil, nil)
	descCopiedBytes = prometheus.NewDesc("spindle_meta_replication_copied_bytes_total", "Bytes of the container copies completed.", nil, nil)
	descCopied      = prometheus.NewDesc("spindle_meta_replication_copied_containers_total", "Container copies completed.", nil, nil)
	descOver        = prometheus.NewDesc("spindle_meta_replication_over_replicated_containers", "CLOSED containers with more healthy replicas than wanted.", nil, nil)
	descTrimmed     = prometheus.NewDesc("spindle_meta_replication_trimmed_replicas_total", "Extra replicas deleted (over-replication).", nil, nil)
	descBehind      = prometheus.NewDesc("spindle_meta_replication_behind_replicas", "CLOSED replicas below their CLOSED container's highest BCSID (missed block commits; not counted healthy).", nil, nil)
	descCopyFailed  = prometheus.NewDesc("spindle_meta_replication_failed_copies_total", "Container copies failed, lost or timed out (each scheduled again).", nil, nil)
	stateCollectors = []*prometheus.Desc{descNodes, descPipelines, descContainers, descBuckets, descKeys, descKeyBytes, descAllocs, descDeletes,
		descSafeMode, descUnder, descUnderOpen, descUnrecov, descPending, descInflight, descCopiedBytes, descCopied, descCopyFailed, descOver, descTrimmed, descBehind}
)

// stateCollector reads the gauges from the service's state at scrape time.
type stateCollector struct{ s *Service }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range stateCollectors {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.Mu.RLock()
	defer s.Mu.RUnlock()
	if s.Closed {
		return
	}
	now := s.Cfg.Now()
	health := map[string]int{metaapi.HealthHealthy: 0, metaapi.HealthStale: 0, metaapi.HealthDead: 0}
	for _, n := range s.NodeByID {
		health[s.HealthOf(n, now)]++
	}
	for h, k := range health {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(k), h)
	}
	pipes := map[string]int{metaapi.PipelineOpen: 0, metaapi.PipelineClosed: 0}
	for _, p := range s.PipelineByID {
		if p.Rec.State == state.PipelineOpen {
			pipes[metaapi.PipelineOpen]++
		} else {
			pipes[metaapi.PipelineClosed]++
		}
	}
	for st, k := range pipes {
		ch <- prometheus.MustNewConstMetric(descPipelines, prometheus.GaugeValue, float64(k), st)
	}
	conts := map[string]int{"OPEN": 0, "CLOSING": 0, "CLOSED": 0}
	for _, ct := range s.ContainerByID {
		conts[state.ContainerStateName(ct.Rec.State)]++
	}
	for st, k := range conts {
		ch <- prometheus.MustNewConstMetric(descContainers, prometheus.GaugeValue, float64(k), st)
	}
	var keys, bytes uint64
	for _, b := range s.Buckets {
		keys += b.Keys
		bytes += b.Bytes
	}
	ch <- prometheus.MustNewConstMetric(descBuckets, prometheus.GaugeValue, float64(len(s.Buckets)))
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(keys))
	ch <- prometheus.MustNewConstMetric(descKeyBytes, prometheus.GaugeValue, float64(bytes))
	ch <- prometheus.MustNewConstMetric(descAllocs, prometheus.GaugeValue, float64(len(s.Allocs)))
	ch <- prometheus.MustNewConstMetric(descDeletes, prometheus.GaugeValue, float64(s.NDeletes))
	safe := 0.0
	if s.Repair.SafeMode {
		safe = 1
	}
	idx := s.ReplicaIndex(now)
	under, unrecoverable, pending := s.UnderReplicated(idx)
	ch <- prometheus.MustNewConstMetric(descSafeMode, prometheus.GaugeValue, safe)
	ch <- prometheus.MustNewConstMetric(descUnder, prometheus.GaugeValue, float64(under))
	ch <- prometheus.MustNewConstMetric(descUnderOpen, prometheus.GaugeValue, float64(len(s.UnderReplicatedOpen(now))))
	ch <- prometheus.MustNewConstMetric(descUnrecov, prometheus.GaugeValue, float64(unrecoverable))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(len(s.Repair.Tasks)))
	ch <- prometheus.MustNewConstMetric(descCopiedBytes, prometheus.CounterValue, float64(s.Repair.CopiedBytes))
	ch <- prometheus.MustNewConstMetric(descCopied, prometheus.CounterValue, float64(s.Repair.CopiedContainers))
	ch <- prometheus.MustNewConstMetric(descCopyFailed, prometheus.CounterValue, float64(s.Repair.FailedCopies))
	ch <- prometheus.MustNewConstMetric(descOver, prometheus.GaugeValue, float64(len(s.OverReplicated(idx))))
	ch <- prometheus.MustNewConstMetric(descTrimmed, prometheus.CounterValue, float64(s.Repair.Trimmed))
	ch <- prometheus.MustNewConstMetric(descBehind, prometheus.GaugeValue, float64(s.BehindReplicas(now)))
}
