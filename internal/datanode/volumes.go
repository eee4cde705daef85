package datanode

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Failed volumes: every VolumeCheckInterval the datanode probes its
// volumes (engine.CheckVolumes: identity record, a synced write). A failed
// volume's containers leave the engine: the next heartbeat (sent at once)
// no longer reports them, and the meta service copies them again; the
// datanode goes on serving its other volumes. Once more volumes failed
// than FailedVolumesTolerated (negative: any number, while one works),
// or none is left, the datanode stops (Run returns an error).

const (
	// DefaultVolumeCheckInterval: how often the volumes are probed.
	DefaultVolumeCheckInterval = time.Minute
	// DefaultFailedVolumesTolerated: as Ozone's
	// hdds.datanode.failed.data.volumes.tolerated default (-1): a
	// datanode keeps serving while one volume works, since stopping it
	// would have every other volume's replicas copied too.
	DefaultFailedVolumesTolerated = -1
)

// volumeChecker probes the volumes and decides when the datanode stops.
type volumeChecker struct {
	eng       *engine.Engine
	interval  time.Duration
	tolerated int
	total     int // data directories configured
	log       *slog.Logger
	// found is signalled when a volume failed (the heartbeat leaves at
	// once); stop receives the error that stops the datanode.
	found chan struct{}
	stop  chan error
}

func newVolumeChecker(eng *engine.Engine, cfg Config, log *slog.Logger) *volumeChecker {
	iv := cfg.VolumeCheckInterval
	if iv <= 0 {
		iv = DefaultVolumeCheckInterval
	}
	return &volumeChecker{eng: eng, interval: iv, tolerated: cfg.FailedVolumesTolerated, total: len(cfg.DataDirs), log: log,
		found: make(chan struct{}, 1), stop: make(chan error, 1)}
}

func (v *volumeChecker) register(reg *prometheus.Registry) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_datanode_failed_volumes",
		Help: "Data directories out of use (failed at start or since)."},
		func() float64 { return float64(len(v.eng.FailedVolumes())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_datanode_read_only_volumes",
			Help: "Data directories full when the datanode started, served read-only (reads only, every write refused) until it restarts with room on them."},
			func() float64 { return float64(len(v.eng.ReadOnlyVolumes())) }))
}

// tooMany says why the datanode must stop with failed volumes failed, or "".
func (v *volumeChecker) tooMany(failed int) string {
	switch {
	case failed >= v.total:
		return fmt.Sprintf("all %d data directories failed", v.total)
	case v.tolerated >= 0 && failed > v.tolerated:
		return fmt.Sprintf("%d of %d data directories failed, %d tolerated (--failed-volumes-tolerated)", failed, v.total, v.tolerated)
	}
	return ""
}

// run probes every interval until ctx ends or too many volumes failed.
func (v *volumeChecker) run(ctx context.Context) {
	t := time.NewTicker(v.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if len(v.eng.CheckVolumes()) == 0 {
			continue
		}
		select {
		case v.found <- struct{}{}:
		default:
		}
		failed := v.eng.FailedVolumes()
		if why := v.tooMany(len(failed)); why != "" {
			v.stop <- fmt.Errorf("datanode: stopping: %s; last: %s: %s", why, failed[len(failed)-1].Dir, failed[len(failed)-1].Reason)
			return
		}
	}
}

// failedVolumeReports is the heartbeat's FailedVolumes (or
// ReadOnlyVolumes) of vols.
func failedVolumeReports(vols []engine.VolumeFailure) []metaapi.FailedVolume {
	var out []metaapi.FailedVolume
	for _, f := range vols {
		if len(out) == metaapi.MaxFailedVolumesReport {
			break
		}
		r := metaapi.FailedVolume{Dir: f.Dir, Reason: f.Reason, At: f.At}
		if len(r.Reason) > metaapi.MaxCopyErrorBytes {
			r.Reason = r.Reason[:metaapi.MaxCopyErrorBytes]
		}
		if len(r.Dir) > metaapi.MaxCopyErrorBytes {
			r.Dir = r.Dir[:metaapi.MaxCopyErrorBytes]
		}
		out = append(out, r)
	}
	return out
}
