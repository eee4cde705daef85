package bench

import (
	"testing"
	"time"
)

func TestLatencyPercentiles(t *testing.T) {
	var l Latency // zero value is usable
	for i := 1; i <= 1000; i++ {
		l.Record(time.Duration(i) * time.Microsecond)
	}
	if l.Count() != 1000 {
		t.Fatalf("Count = %d", l.Count())
	}
	within := func(name string, got, want float64) {
		t.Helper()
		if d := got - want; d > want/1000 || d < -want/1000 {
			t.Errorf("%s = %v µs, want %v µs within 0.1%%", name, got, want)
		}
	}
	within("p50", l.PercentileUs(50), 500)
	within("p99", l.PercentileUs(99), 990)
	within("max", l.MaxUs(), 1000)
	within("mean", l.MeanUs(), 500.5)
	s := l.Summary()
	if s.P50 != l.PercentileUs(50) || s.P99 != l.PercentileUs(99) || s.Max != l.MaxUs() {
		t.Errorf("Summary %+v disagrees with the accessors", s)
	}
}

func TestLatencySubMicrosecondResolution(t *testing.T) {
	l := NewLatency()
	l.Record(2300 * time.Nanosecond)
	if got := l.PercentileUs(50); got < 2.29 || got > 2.31 {
		t.Errorf("2.3 µs recorded as %v µs", got)
	}
}

func TestLatencyClamps(t *testing.T) {
	l := NewLatency()
	l.Record(-time.Second)
	l.Record(10 * time.Minute)
	if l.Count() != 2 {
		t.Fatalf("Count = %d, want 2 (clamped values are still counted)", l.Count())
	}
	if got := l.MaxUs(); got < 59.9e6 || got > 60.1e6 {
		t.Errorf("10 minutes recorded as max %v µs, want ~60 s", got)
	}
}

func TestLatencyMerge(t *testing.T) {
	a, b := NewLatency(), NewLatency()
	for i := 0; i < 100; i++ {
		a.Record(10 * time.Microsecond)
		b.Record(1 * time.Millisecond)
	}
	a.Merge(b)
	a.Merge(nil)
	a.Merge(&Latency{})
	if a.Count() != 200 || b.Count() != 100 {
		t.Fatalf("counts after merge: a %d b %d", a.Count(), b.Count())
	}
	if got := a.MaxUs(); got < 999 || got > 1001 {
		t.Errorf("merged max %v µs, want 1000", got)
	}
	var empty Latency
	if s := empty.Summary(); s != (LatencySummary{}) {
		t.Errorf("empty summary %+v, want zeros", s)
	}
}

func BenchmarkLatencyRecord(b *testing.B) {
	l := NewLatency()
	d := 3 * time.Microsecond
	for b.Loop() {
		l.Record(d)
	}
}
