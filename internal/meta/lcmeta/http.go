package lcmeta

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spindle-store/spindle/internal/lifecycle"
)

// RouteStatus is the status route's name (package meta gives it its
// access class).
const RouteStatus = "lifecycle_status"

// Routes adds the route of the runner's Status, and registers its
// metrics in reg.
func (m *Manager) Routes(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error)), reg prometheus.Registerer) {
	route("GET "+lifecycle.StatusRoute, RouteStatus, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		st, err := m.Status()
		return st, http.StatusOK, err
	})
	counter := func(name, help string, f func(lifecycle.Status) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(m.cached()) })
	}
	gauge := func(name, help string, f func(lifecycle.Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(m.cached()) })
	}
	for _, c := range []prometheus.Collector{
		counter("spindle_lifecycle_expired_total", "S3 lifecycle: current versions expired (deleted, or hidden behind a delete marker), over every run (replicated; as this member last read it).",
			func(s lifecycle.Status) float64 { return float64(s.Total.Expired) }),
		counter("spindle_lifecycle_noncurrent_removed_total", "S3 lifecycle: noncurrent versions removed.",
			func(s lifecycle.Status) float64 { return float64(s.Total.Noncurrent) }),
		counter("spindle_lifecycle_delete_markers_removed_total", "S3 lifecycle: expired object delete markers removed.",
			func(s lifecycle.Status) float64 { return float64(s.Total.MarkersRemoved) }),
		counter("spindle_lifecycle_uploads_aborted_total", "S3 lifecycle: incomplete multipart uploads aborted.",
			func(s lifecycle.Status) float64 { return float64(s.Total.UploadsAborted) }),
		counter("spindle_lifecycle_freed_bytes_total", "S3 lifecycle: bytes of the versions removed (their blocks handed to the block deletion).",
			func(s lifecycle.Status) float64 { return float64(s.Total.BytesFreed) }),
		counter("spindle_lifecycle_locked_total", "S3 lifecycle: versions due to expire that object lock kept (a legal hold, a retention not expired), counted at each run that met them.",
			func(s lifecycle.Status) float64 { return float64(s.Total.Locked) }),
		counter("spindle_lifecycle_runs_total", "S3 lifecycle: runs completed.",
			func(s lifecycle.Status) float64 { return float64(s.Runs) }),
		gauge("spindle_lifecycle_running", "S3 lifecycle: 1 while a run is under way.",
			func(s lifecycle.Status) float64 { return map[bool]float64{true: 1}[s.Running] }),
		gauge("spindle_lifecycle_last_run_end_seconds", "S3 lifecycle: when the last run completed (Unix seconds; 0: none yet).",
			func(s lifecycle.Status) float64 {
				if s.LastEnded.IsZero() {
					return 0
				}
				return float64(s.LastEnded.UnixNano()) / 1e9
			}),
		gauge("spindle_lifecycle_last_run_duration_seconds", "S3 lifecycle: how long the last completed run took.",
			func(s lifecycle.Status) float64 { return s.LastEnded.Sub(s.LastStarted).Seconds() }),
	} {
		_ = reg.Register(c) // a second Routes (a second handler of the service) finds them registered
	}
}
