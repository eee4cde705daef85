package datanode

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spindle-store/spindle/internal/engine"
)

// The space metrics say the volumes' capacity and what is left, the bytes
// of the containers, and the containers by state, UNHEALTHY included at 0.
func TestSpaceMetrics(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.Open(engine.Config{DataDirs: []string{t.TempDir()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, e)
	for _, cid := range []engine.ContainerID{1, 2} {
		if err := e.CreateContainer(cid); err != nil {
			t.Fatal(err)
		}
	}
	b := engine.BlockID{Container: 1, Local: 1}
	data := make([]byte, 1000)
	sums := engine.ComputeChecksums(nil, data, 512)
	if err := e.WriteChunk(b, 0, data, 512, sums); err != nil {
		t.Fatal(err)
	}
	if err := e.PutBlock(&engine.BlockData{ID: b, Length: 1000, BytesPerChecksum: 512, Chunks: []engine.ChunkInfo{{Length: 1000, Checksums: sums}}}, 1); err != nil {
		t.Fatal(err)
	}
	if err := e.CloseContainer(1); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(spaceCollector{eng: e, log: quiet})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"spindle_datanode_used_bytes":                    1000,
		"spindle_datanode_container_replicas{OPEN}":      1,
		"spindle_datanode_container_replicas{CLOSED}":    1,
		"spindle_datanode_container_replicas{UNHEALTHY}": 0,
		"spindle_datanode_full_volumes":                  0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if got["spindle_datanode_capacity_bytes"] <= 0 || got["spindle_datanode_available_bytes"] > got["spindle_datanode_capacity_bytes"] {
		t.Errorf("capacity %v, available %v", got["spindle_datanode_capacity_bytes"], got["spindle_datanode_available_bytes"])
	}
}
