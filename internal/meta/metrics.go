package meta

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// metrics are the service's Prometheus metrics, in a registry of its own
// (several services in one process, as in tests, do not collide).
type metrics struct {
	reg             *prometheus.Registry
	heartbeats      prometheus.Counter
	replicaFailures prometheus.Counter
	membersBehind   prometheus.Counter
	// degradedAllocations: blocks allocated on a pipeline with a member
	// STALE because no pipeline had every member HEALTHY.
	degradedAllocations prometheus.Counter
	registrations       prometheus.Counter
	allocations         prometheus.Counter
	commits             prometheus.Counter
	commands            prometheus.Counter
	deletesScheduled    *prometheus.CounterVec
	deletesDelivered    prometheus.Counter
	deletesAcked        prometheus.Counter
	deletesDropped      prometheus.Counter
	requests            *prometheus.HistogramVec
	refused             *prometheus.CounterVec
}

func newMetrics(s *Service) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_heartbeats_total",
			Help: "Datanode heartbeats accepted."}),
		replicaFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_replica_failures_total",
			Help: "Pipelines closed because a member reported its replica failed."}),
		degradedAllocations: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_degraded_allocations_total",
			Help: "Blocks allocated on a pipeline with a STALE member (a raft majority HEALTHY) because no pipeline had every member HEALTHY."}),
		membersBehind: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_members_behind_total",
			Help: "Pipeline members reported by their leader as behind its compacted log (their replicas are replaced by copies)."}),
		registrations: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_registrations_total",
			Help: "Datanodes registered (node IDs assigned)."}),
		allocations: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_allocations_total",
			Help: "Blocks allocated."}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_key_commits_total",
			Help: "Keys committed (new versions made visible)."}),
		commands: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_commands_total",
			Help: "Commands sent to datanodes in heartbeat responses."}),
		deletesScheduled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spindle_meta_deletes_scheduled_total",
			Help: "Blocks scheduled for deletion, by reason (replaced, deleted, expired)."}, []string{"reason"}),
		deletesDelivered: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_deletes_delivered_total",
			Help: "Block deletions delivered to datanodes (redeliveries included)."}),
		deletesAcked: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_deletes_completed_total",
			Help: "Block deletions completed (acknowledged)."}),
		deletesDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_meta_deletes_dropped_total",
			Help: "Block deletions given up after the maximum number of deliveries."}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "spindle_meta_request_seconds",
			Help:    "Latency of the meta service's HTTP requests, by route and status code.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)}, []string{"route", "code"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spindle_meta_requests_refused_total",
			Help: "Requests refused with 403 because the caller's certificate does not allow them (auth.go), by route."}, []string{"route"}),
	}
	for _, r := range []string{"replaced", "deleted", "expired"} {
		m.deletesScheduled.WithLabelValues(r)
	}
	m.reg.MustRegister(m.heartbeats, m.replicaFailures, m.membersBehind, m.degradedAllocations, m.registrations, m.allocations, m.commits, m.commands,
		m.deletesScheduled, m.deletesDelivered, m.deletesAcked, m.deletesDropped, m.requests, m.refused,
		stateCollector{s},
		opsCollector{s}, // ops_metrics.go
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
	descUnder       = prometheus.NewDesc("spindle_meta_replication_under_replicated", "CLOSED containers with fewer healthy replicas than the replication factor.", nil, nil)
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
		descSafeMode, descUnder, descUnrecov, descPending, descInflight, descCopiedBytes, descCopied, descCopyFailed, descOver, descTrimmed, descBehind}
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
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return
	}
	now := s.cfg.Now()
	health := map[string]int{metaapi.HealthHealthy: 0, metaapi.HealthStale: 0, metaapi.HealthDead: 0}
	for _, n := range s.nodes {
		health[s.healthOf(n, now)]++
	}
	for h, k := range health {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(k), h)
	}
	pipes := map[string]int{metaapi.PipelineOpen: 0, metaapi.PipelineClosed: 0}
	for _, p := range s.pipelines {
		if p.rec.State == pipelineOpen {
			pipes[metaapi.PipelineOpen]++
		} else {
			pipes[metaapi.PipelineClosed]++
		}
	}
	for st, k := range pipes {
		ch <- prometheus.MustNewConstMetric(descPipelines, prometheus.GaugeValue, float64(k), st)
	}
	conts := map[string]int{"OPEN": 0, "CLOSING": 0, "CLOSED": 0}
	for _, ct := range s.containers {
		conts[containerStateName(ct.rec.State)]++
	}
	for st, k := range conts {
		ch <- prometheus.MustNewConstMetric(descContainers, prometheus.GaugeValue, float64(k), st)
	}
	var keys, bytes uint64
	for _, b := range s.buckets {
		keys += b.Keys
		bytes += b.Bytes
	}
	ch <- prometheus.MustNewConstMetric(descBuckets, prometheus.GaugeValue, float64(len(s.buckets)))
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(keys))
	ch <- prometheus.MustNewConstMetric(descKeyBytes, prometheus.GaugeValue, float64(bytes))
	ch <- prometheus.MustNewConstMetric(descAllocs, prometheus.GaugeValue, float64(len(s.allocs)))
	ch <- prometheus.MustNewConstMetric(descDeletes, prometheus.GaugeValue, float64(s.nDeletes))
	safe := 0.0
	if s.repl.safeMode {
		safe = 1
	}
	idx := s.replicaIndex(now)
	under, unrecoverable, pending := s.underReplicated(idx)
	ch <- prometheus.MustNewConstMetric(descSafeMode, prometheus.GaugeValue, safe)
	ch <- prometheus.MustNewConstMetric(descUnder, prometheus.GaugeValue, float64(under))
	ch <- prometheus.MustNewConstMetric(descUnrecov, prometheus.GaugeValue, float64(unrecoverable))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(len(s.repl.tasks)))
	ch <- prometheus.MustNewConstMetric(descCopiedBytes, prometheus.CounterValue, float64(s.repl.copiedBytes))
	ch <- prometheus.MustNewConstMetric(descCopied, prometheus.CounterValue, float64(s.repl.copiedContainers))
	ch <- prometheus.MustNewConstMetric(descCopyFailed, prometheus.CounterValue, float64(s.repl.failedCopies))
	ch <- prometheus.MustNewConstMetric(descOver, prometheus.GaugeValue, float64(len(s.overReplicated(idx))))
	ch <- prometheus.MustNewConstMetric(descTrimmed, prometheus.CounterValue, float64(s.repl.trimmed))
	ch <- prometheus.MustNewConstMetric(descBehind, prometheus.GaugeValue, float64(s.behindReplicas(now)))
}
