package ecmeta

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of erasure coding, read from memory at scrape time (the meta
// leader's: a follower's are zero).
var (
	descCoded         = prometheus.NewDesc("spindle_meta_ec_containers", "Erasure-coded containers.", nil, nil)
	descMissing       = prometheus.NewDesc("spindle_meta_ec_shards_missing", "Shards of EC containers whose datanode is DEAD or does not list them.", nil, nil)
	descMoving        = prometheus.NewDesc("spindle_meta_ec_shards_moving", "Shards of EC containers on a decommissioning datanode (to move).", nil, nil)
	descDegraded      = prometheus.NewDesc("spindle_meta_ec_degraded_containers", "EC containers with a shard missing.", nil, nil)
	descUnrecoverable = prometheus.NewDesc("spindle_meta_ec_unrecoverable_containers", "EC containers with fewer than k shards left.", nil, nil)
	descConversions   = prometheus.NewDesc("spindle_meta_ec_conversions_inflight", "Conversions of CLOSED containers in flight.", nil, nil)
	descRepairs       = prometheus.NewDesc("spindle_meta_ec_repairs_inflight", "Shard rebuilds in flight.", nil, nil)
	descRepaired      = prometheus.NewDesc("spindle_meta_ec_repairs_done_total", "Shards rebuilt and recorded (since this leader started).", nil, nil)
	descRepairFailed  = prometheus.NewDesc("spindle_meta_ec_repairs_failed_total", "Shard rebuilds that failed or timed out.", nil, nil)
	descRepairedBytes = prometheus.NewDesc("spindle_meta_ec_repaired_bytes_total", "Bytes of shards rebuilt and recorded.", nil, nil)
	descCompactions   = prometheus.NewDesc("spindle_meta_ec_compactions_inflight", "Compactions of EC containers in flight.", nil, nil)
	descCompacted     = prometheus.NewDesc("spindle_meta_ec_compactions_done_total", "EC containers compacted (a new generation recorded, since this leader started).", nil, nil)
	descCompactFailed = prometheus.NewDesc("spindle_meta_ec_compactions_failed_total", "Compactions of EC containers that failed or timed out.", nil, nil)
	descReclaimed     = prometheus.NewDesc("spindle_meta_ec_reclaimed_bytes_total", "Shard bytes freed by compactions (old generations' less new ones').", nil, nil)
	descDead          = prometheus.NewDesc("spindle_meta_ec_dead_bytes", "Bytes of blocks deleted from EC containers, not yet compacted away.", nil, nil)
)

// Describe is prometheus.Collector's.
func (m *Manager) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCoded, descMissing, descMoving, descDegraded, descUnrecoverable, descConversions, descRepairs, descRepaired, descRepairFailed, descRepairedBytes,
		descCompactions, descCompacted, descCompactFailed, descReclaimed, descDead} {
		ch <- d
	}
}

// Collect is prometheus.Collector's: the memory of the current stint
// (nothing when the service is closed or its memory cannot load).
func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	m.st.Mu.RLock()
	defer m.st.Mu.RUnlock()
	if m.st.Closed {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.loaded || m.stint != m.st.Stint {
		return // not serving this stint yet (loading would read the store from a scrape)
	}
	st := m.statusLocked(m.st.Cfg.Now())
	g := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	c := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g(descCoded, st.Coded)
	g(descMissing, st.ShardsMissing)
	g(descMoving, st.ShardsMoving)
	g(descDegraded, st.Degraded)
	g(descUnrecoverable, st.Unrecoverable)
	g(descConversions, len(st.Conversions))
	g(descRepairs, len(st.Repairs))
	c(descRepaired, st.RepairsDone)
	c(descRepairFailed, st.RepairsFailed)
	c(descRepairedBytes, st.RepairedBytes)
	g(descCompactions, len(st.Compactions))
	c(descCompacted, st.CompactionsDone)
	c(descCompactFailed, st.CompactionsFailed)
	c(descReclaimed, st.ReclaimedBytes)
	g(descDead, int(st.DeadBytes))
}
