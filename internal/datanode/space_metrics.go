package datanode

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spindle-store/spindle/internal/engine"
)

// spaceCollector exports, at each scrape, the volumes' space and the
// containers by state (an UNHEALTHY one is where the engine found corrupt
// data or failed to write): what an operator alerts on before a disk fills
// or a replica is lost. It reads the engine (statfs of each volume, the
// container list); it holds no state.
type spaceCollector struct {
	eng *engine.Engine
	log *slog.Logger
}

var (
	descCapacity   = prometheus.NewDesc("spindle_datanode_capacity_bytes", "Total size of the filesystems of this datanode's volumes.", nil, nil)
	descAvailable  = prometheus.NewDesc("spindle_datanode_available_bytes", "Bytes new data may still take on this datanode's volumes (free space above each volume's reserve).", nil, nil)
	descFull       = prometheus.NewDesc("spindle_datanode_full_volumes", "Volumes with no room above their reserve.", nil, nil)
	descUsed       = prometheus.NewDesc("spindle_datanode_used_bytes", "Bytes of the containers on this datanode's volumes.", nil, nil)
	descReplicas   = prometheus.NewDesc("spindle_datanode_container_replicas", "Containers on this datanode by state (OPEN, CLOSED, UNHEALTHY, ...).", []string{"state"}, nil)
	spaceStateList = []engine.ContainerState{engine.StateOpen, engine.StateClosed, engine.StateUnhealthy}
)

func (s spaceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCapacity, descAvailable, descFull, descUsed, descReplicas} {
		ch <- d
	}
}

func (s spaceCollector) Collect(ch chan<- prometheus.Metric) {
	if sp, err := s.eng.Space(); err != nil {
		s.log.Warn("metrics: reading the volumes' free space", "err", err)
	} else {
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(sp.CapacityBytes))
		ch <- prometheus.MustNewConstMetric(descAvailable, prometheus.GaugeValue, float64(sp.AvailableBytes))
		ch <- prometheus.MustNewConstMetric(descFull, prometheus.GaugeValue, float64(sp.FullVolumes))
	}
	byState := map[string]int{}
	for _, st := range spaceStateList {
		byState[st.String()] = 0 // present at 0: an alert on UNHEALTHY > 0 needs the series
	}
	var used uint64
	for _, c := range s.eng.ListContainers() {
		byState[c.State.String()]++
		used += c.UsedBytes
	}
	ch <- prometheus.MustNewConstMetric(descUsed, prometheus.GaugeValue, float64(used))
	for st, n := range byState {
		ch <- prometheus.MustNewConstMetric(descReplicas, prometheus.GaugeValue, float64(n), st)
	}
}
