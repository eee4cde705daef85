package bench

import (
	"fmt"
	"math"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram geometry. Values are recorded in nanoseconds from 1 ns so that the
// microsecond-scale latencies of tmpfs keep three significant digits; the
// tracked range ends at 60 s and longer values are recorded as 60 s.
const (
	latencyLowestNs  = 1
	latencyHighestNs = int64(60 * time.Second)
	latencySigDigits = 3
)

// Latency is an HDR histogram of operation latencies (1 ns .. 60 s, three
// significant digits). The zero value is ready to use. It is not safe for
// concurrent use: keep one per worker and Merge them at the end.
type Latency struct {
	h *hdrhistogram.Histogram
}

// NewLatency returns an empty histogram.
func NewLatency() *Latency {
	return &Latency{h: hdrhistogram.New(latencyLowestNs, latencyHighestNs, latencySigDigits)}
}

func (l *Latency) hist() *hdrhistogram.Histogram {
	if l.h == nil {
		l.h = hdrhistogram.New(latencyLowestNs, latencyHighestNs, latencySigDigits)
	}
	return l.h
}

// Record adds one observation. Negative durations count as 0, durations above
// 60 s as 60 s.
func (l *Latency) Record(d time.Duration) {
	ns := min(max(int64(d), 0), latencyHighestNs)
	if err := l.hist().RecordValue(ns); err != nil {
		panic(fmt.Sprintf("bench: latency %d ns out of the clamped histogram range: %v", ns, err))
	}
}

// Merge adds all observations of o to l. o is not modified.
func (l *Latency) Merge(o *Latency) {
	if o == nil || o.h == nil {
		return
	}
	if dropped := l.hist().Merge(o.h); dropped != 0 {
		panic(fmt.Sprintf("bench: merging histograms of equal geometry dropped %d values", dropped))
	}
}

// Count returns the number of observations.
func (l *Latency) Count() int64 { return l.hist().TotalCount() }

// PercentileUs returns the latency at percentile p (0 < p <= 100) in
// microseconds; 0 when empty.
func (l *Latency) PercentileUs(p float64) float64 {
	return nsToUs(l.hist().ValueAtQuantile(p))
}

// MaxUs returns the largest observation in microseconds; 0 when empty.
func (l *Latency) MaxUs() float64 {
	if l.Count() == 0 {
		return 0
	}
	return nsToUs(l.hist().Max())
}

// MeanUs returns the mean in microseconds; 0 when empty.
func (l *Latency) MeanUs() float64 {
	if l.Count() == 0 {
		return 0
	}
	return roundUs(l.hist().Mean() / 1e3)
}

// Summary returns the percentiles that results report.
func (l *Latency) Summary() LatencySummary {
	return LatencySummary{
		P50:  l.PercentileUs(50),
		P90:  l.PercentileUs(90),
		P99:  l.PercentileUs(99),
		P999: l.PercentileUs(99.9),
		Max:  l.MaxUs(),
		Mean: l.MeanUs(),
	}
}

// LatencySummary holds latency percentiles in microseconds (JSON latency_us).
type LatencySummary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func nsToUs(ns int64) float64 { return roundUs(float64(ns) / 1e3) }

// roundUs keeps nanosecond resolution (three decimals of a microsecond).
func roundUs(us float64) float64 {
	if math.IsNaN(us) || math.IsInf(us, 0) {
		return 0
	}
	return math.Round(us*1e3) / 1e3
}
