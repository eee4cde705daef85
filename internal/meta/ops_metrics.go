package meta

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Metrics of damage, repairs and datanode operations, read from the
// state at scrape time.
var (
	descLostBlocks       = prometheus.NewDesc("spindle_meta_damage_lost_blocks", "Blocks damaged on every replica (no good copy known); spindle admin damaged names their keys.", nil, nil)
	descRepairableBlocks = prometheus.NewDesc("spindle_meta_damage_repairable_blocks", "Damaged blocks a good replica holds (repaired, or their replica replaced).", nil, nil)
	descRepairs          = prometheus.NewDesc("spindle_meta_damage_repairs_inflight", "Block repairs (repair_blocks) in flight.", nil, nil)
	descRepaired         = prometheus.NewDesc("spindle_meta_damage_repaired_blocks_total", "Damaged blocks repaired from a good replica.", nil, nil)
	descRepairFailed     = prometheus.NewDesc("spindle_meta_damage_failed_repairs_total", "Block repairs that made no progress in time.", nil, nil)
	descOpNodes          = prometheus.NewDesc("spindle_meta_datanodes_op_state", "Registered datanodes by operational state.", []string{"state"}, nil)
	descFailedVolumes    = prometheus.NewDesc("spindle_meta_failed_volumes", "Failed data directories the datanodes report.", nil, nil)
)

type opsCollector struct{ s *Service }

func (c opsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLostBlocks, descRepairableBlocks, descRepairs, descRepaired, descRepairFailed, descOpNodes, descFailedVolumes} {
		ch <- d
	}
}

func (c opsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.Mu.RLock()
	defer s.Mu.RUnlock()
	if s.Closed {
		return
	}
	now := s.Cfg.Now()
	repairable := 0
	for _, d := range s.DamagedReplicas(now) {
		repairable += len(d.Blocks)
	}
	states := map[string]int{metaapi.NodeInService: 0, metaapi.NodeDecommissioning: 0, metaapi.NodeDecommissioned: 0, metaapi.NodeInMaintenance: 0}
	failed := 0
	for id := range s.NodeByID {
		states[s.Repair.Ops[id].Name()]++
		failed += len(s.Repair.Damage.Volumes[id])
	}
	ch <- prometheus.MustNewConstMetric(descLostBlocks, prometheus.GaugeValue, float64(len(s.LostBlocks(s.ReplicaIndex(now)))))
	ch <- prometheus.MustNewConstMetric(descRepairableBlocks, prometheus.GaugeValue, float64(repairable))
	ch <- prometheus.MustNewConstMetric(descRepairs, prometheus.GaugeValue, float64(len(s.Repair.Damage.Repairs)))
	ch <- prometheus.MustNewConstMetric(descRepaired, prometheus.CounterValue, float64(s.Repair.Damage.RepairedBlocks))
	ch <- prometheus.MustNewConstMetric(descRepairFailed, prometheus.CounterValue, float64(s.Repair.Damage.FailedRepairs))
	for st, k := range states {
		ch <- prometheus.MustNewConstMetric(descOpNodes, prometheus.GaugeValue, float64(k), st)
	}
	ch <- prometheus.MustNewConstMetric(descFailedVolumes, prometheus.GaugeValue, float64(failed))
}
