package lifecycle

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/pflag"
)

// Defaults of Settings.
const (
	DefaultDay      = 24 * time.Hour
	DefaultInterval = time.Hour
	DefaultRate     = 250
	DefaultBatch    = 100
)

// Settings are the meta leader's lifecycle runner's knobs.
type Settings struct {
	// Day is the length of a lifecycle day (24 h; shorter only in tests).
	Day time.Duration
	// Interval is the time from a run's end to the next run's start.
	Interval time.Duration
	// Rate bounds the objects expired (and uploads aborted) a second. The
	// default is low: each expired block is a deletion on its datanodes
	// (delivered up to 1,000 a heartbeat), and at 1,000 objects a second
	// those bursts stalled a concurrent PUT workload for 2 s on a loaded
	// 2-core machine (0.4 s at 250; docs/OPERATIONS.md).
	Rate int
	// Batch is the keys scanned, and the expirations applied, in one step
	// (one read under the store's lock, one replicated batch).
	Batch int
}

// SetDefaults fills the zero fields.
func (s *Settings) SetDefaults() {
	if s.Day <= 0 {
		s.Day = DefaultDay
	}
	if s.Interval <= 0 {
		s.Interval = DefaultInterval
	}
	if s.Rate <= 0 {
		s.Rate = DefaultRate
	}
	if s.Batch <= 0 {
		s.Batch = DefaultBatch
	}
}

// AddFlags binds s to the --lifecycle-* flags of f.
func AddFlags(f *pflag.FlagSet, s *Settings) {
	f.DurationVar(&s.Day, "lifecycle-day", DefaultDay, "S3 lifecycle: the length of a day of the rules' Days (for tests only: shorter days expire objects sooner)")
	f.DurationVar(&s.Interval, "lifecycle-interval", DefaultInterval, "S3 lifecycle: the meta leader starts a run this long after the last one ended")
	f.IntVar(&s.Rate, "lifecycle-rate", DefaultRate, "S3 lifecycle: objects expired (and uploads aborted) a second, at most")
	f.IntVar(&s.Batch, "lifecycle-batch", DefaultBatch, "S3 lifecycle: keys scanned and expirations applied in one step (one replicated batch)")
}

// Counts are what lifecycle did.
type Counts struct {
	Expired        uint64 `json:"expired"`          // current versions expired (deleted, or hidden behind a delete marker)
	Noncurrent     uint64 `json:"noncurrent"`       // noncurrent versions removed
	MarkersRemoved uint64 `json:"markers_removed"`  // expired object delete markers removed
	UploadsAborted uint64 `json:"uploads_aborted"`  // incomplete multipart uploads aborted
	BytesFreed     uint64 `json:"bytes_freed"`      // bytes of the versions removed (their blocks go to the block GC)
	Locked         uint64 `json:"locked,omitempty"` // versions due that object lock keeps (a legal hold, a retention not expired)
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Expired += o.Expired
	c.Noncurrent += o.Noncurrent
	c.MarkersRemoved += o.MarkersRemoved
	c.UploadsAborted += o.UploadsAborted
	c.BytesFreed += o.BytesFreed
	c.Locked += o.Locked
}

// Status is the lifecycle runner's replicated account: the run under way
// (Running, its cursor and counts) and the last one completed.
type Status struct {
	Running    bool      `json:"running"`
	RunStarted time.Time `json:"run_started,omitzero"`
	// Cursor: the run has done every bucket before Bucket, and Bucket's
	// keys up to Key (Uploads: its keys all, its uploads up to Key).
	Bucket  string            `json:"bucket,omitempty"`
	Key     string            `json:"key,omitempty"`
	Uploads bool              `json:"uploads,omitempty"`
	Run     Counts            `json:"run"`
	Buckets map[string]Counts `json:"buckets,omitempty"` // of the run under way

	LastStarted time.Time         `json:"last_started,omitzero"`
	LastEnded   time.Time         `json:"last_ended,omitzero"`
	Last        Counts            `json:"last"`
	LastBuckets map[string]Counts `json:"last_buckets,omitempty"`
	Runs        uint64            `json:"runs"`  // runs completed
	Total       Counts            `json:"total"` // over every run
}

// StatusRoute is the meta service's route of the status (GET).
const StatusRoute = "/v1/lifecycle/status"

// Doer runs one meta service call (metaapi.Client.Do).
type Doer interface {
	Do(ctx context.Context, method, path string, in, out any, idempotent bool) error
}

// GetStatus reads the runner's status from the meta service.
func GetStatus(ctx context.Context, c Doer) (*Status, error) {
	var st Status
	if err := c.Do(ctx, http.MethodGet, StatusRoute, nil, &st, true); err != nil {
		return nil, fmt.Errorf("lifecycle status: %w", err)
	}
	return &st, nil
}
