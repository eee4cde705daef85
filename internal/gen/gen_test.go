package gen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/wal"
)

const testMiB = 1 << 20

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testConfig: 48 MiB of keys of 5 MiB (keys span containers; the last is
// 3 MiB) in containers of 8 MiB, blocks of 2 MiB, chunks that are not a
// whole number of checksum pieces (short pieces at every chunk's end).
func testConfig(dir string) Config {
	return Config{Dir: dir, SizeBytes: 48 * testMiB, ContainerSizeBytes: 8 * testMiB, KeySizeBytes: 5 * testMiB,
		BlockSizeBytes: 2 * testMiB, ChunkSizeBytes: testMiB - 4096, Seed: 7, Logger: quiet}
}

// TestRunWritesAReadableCluster generates a cluster and checks it with
// the engines and the meta service opened directly: every node's
// containers (CLOSED, 3 of every 4), every key's blocks on every replica
// byte for byte against Content, every key's CRC32C, the identities and
// logs the datanodes will start with.
func TestRunWritesAReadableCluster(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.MeasureBaseline = true
	cfg.Progress = io.Discard
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Keys != 10 || res.Containers != 6 || res.KeyBytes != 48*testMiB || res.ReplicaBytes != 3*48*testMiB {
		t.Fatalf("result %+v", res)
	}
	if res.Seconds <= 0 || res.MBPerS <= 0 || res.BaselineMBPerS <= 0 || res.Ratio <= 0 || res.Baseline.Bytes != 2*48*testMiB ||
		res.BaselineBeforeMBPerS <= 0 || res.BaselineAfterMBPerS <= 0 {
		t.Fatalf("figures %+v", res)
	}
	bj := res.Bench()
	if bj.Scenario != "gen" || bj.Ops != 10 || bj.Bytes != 3*48*testMiB || bj.RatioToBaseline == nil || bj.Baseline.MBPerS != res.BaselineMBPerS ||
		bj.Keys != 10 || bj.Containers != 6 || bj.KeyBytes != 48*testMiB {
		t.Fatalf("bench form %+v", bj)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"datanodes", "meta"}) {
		t.Fatalf("%s holds %v (the baseline file must be gone)", dir, names)
	}

	// The datanodes: an existing log, the identity, the containers.
	engines := make([]*engine.Engine, 4)
	uuids := make([]string, 4)
	for i := range engines {
		logDir := filepath.Join(dir, "datanodes", "log", fmt.Sprintf("dn%d", i+1))
		wl, err := wal.Open(wal.Config{Dir: logDir, MustExist: true, Logger: quiet})
		if err != nil {
			t.Fatalf("datanode %d: %v", i+1, err)
		}
		if err := wl.Close(); err != nil {
			t.Fatalf("datanode %d: %v", i+1, err)
		}
		b, err := os.ReadFile(filepath.Join(logDir, "DATANODE.json"))
		if err != nil {
			t.Fatal(err)
		}
		var id struct {
			UUID   string `json:"uuid"`
			NodeID uint64 `json:"node_id"`
		}
		if err := json.Unmarshal(b, &id); err != nil || id.NodeID != uint64(i+1) || len(id.UUID) != 32 {
			t.Fatalf("datanode %d identity %s: %v", i+1, b, err)
		}
		uuids[i] = id.UUID
		e, err := engine.Open(engine.Config{DataDirs: []string{filepath.Join(dir, "datanodes", fmt.Sprintf("dn%d", i+1))}, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer testutil.CloseT(t, e)
		engines[i] = e
		cs := e.ListContainers()
		var ids []uint64
		for _, c := range cs {
			if c.State != engine.StateClosed || c.UsedBytes != 8*testMiB {
				t.Fatalf("datanode %d container %+v", i+1, c)
			}
			// Its BCSID: its number of blocks, the same on every replica.
			if blocks, err := e.ListBlocks(c.ID, 0, true, 0); err != nil || c.BCSID == 0 || c.BCSID != uint64(len(blocks)) {
				t.Fatalf("datanode %d container %d: BCSID %d, %d blocks, %v", i+1, c.ID, c.BCSID, len(blocks), err)
			}
			ids = append(ids, uint64(c.ID))
		}
		slices.Sort(ids)
		// Container c is on nodes c, c+1, c+2 (mod 4).
		var want []uint64
		for c := 1; c <= 6; c++ {
			if slices.Contains([]int{(c-1)%4 + 1, c%4 + 1, (c+1)%4 + 1}, i+1) {
				want = append(want, uint64(c))
			}
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("datanode %d holds containers %v, want %v", i+1, ids, want)
		}
	}

	s, err := meta.Open(meta.Config{Dir: filepath.Join(dir, "meta"), TickInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, s)
	nodes, err := s.Nodes()
	if err != nil || len(nodes.Nodes) != 4 {
		t.Fatalf("nodes %+v %v", nodes, err)
	}
	for i, n := range nodes.Nodes {
		if n.NodeID != uint64(i+1) || n.UUID != uuids[i] || n.Addr != PlaceholderAddr {
			t.Fatalf("node %d: %+v, identity file UUID %s", i+1, n, uuids[i])
		}
	}
	pl, err := s.Pipelines()
	if err != nil || len(pl.Pipelines) != 4 {
		t.Fatalf("pipelines %+v %v", pl, err)
	}
	cl, err := s.Containers()
	if err != nil || len(cl.Containers) != 6 {
		t.Fatalf("containers %+v %v", cl, err)
	}
	for _, c := range cl.Containers {
		if c.State != "CLOSED" || c.Pipeline != uint64((c.ID-1)%4+1) {
			t.Fatalf("container %+v", c)
		}
	}
	kl, err := s.List(DefaultBucket, meta.ListOptions{})
	if err != nil || len(kl.Keys) != 10 {
		t.Fatalf("keys %+v %v", kl, err)
	}
	buckets, err := s.ListBuckets()
	if err != nil || len(buckets.Buckets) != 1 || buckets.Buckets[0].Keys != 10 || buckets.Buckets[0].Bytes != 48*testMiB {
		t.Fatalf("buckets %+v %v", buckets, err)
	}
	for k := range 10 {
		ki, err := s.GetKey(DefaultBucket, KeyName(k))
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, min(5*testMiB, 48*testMiB-k*5*testMiB))
		Content(cfg.Seed, k, 0, want)
		if ki.Size != uint64(len(want)) || ki.CRC32C != crc32c.Checksum(want) {
			t.Fatalf("key %d: size %d crc %08x, want %d %08x", k, ki.Size, ki.CRC32C, len(want), crc32c.Checksum(want))
		}
		var off uint64
		for _, b := range ki.Blocks {
			if len(b.Members) != 3 {
				t.Fatalf("key %d block %+v", k, b)
			}
			for _, m := range b.Members {
				got, err := engines[m.NodeID-1].ReadChunk(engine.BlockID{Container: engine.ContainerID(b.Container), Local: b.Local}, 0, b.Length, nil)
				if err != nil {
					t.Fatalf("key %d block %d/%d on node %d: %v", k, b.Container, b.Local, m.NodeID, err)
				}
				if !bytes.Equal(got, want[off:off+b.Length]) {
					t.Fatalf("key %d block %d/%d on node %d: wrong bytes", k, b.Container, b.Local, m.NodeID)
				}
			}
			off += b.Length
		}
	}
}

// TestRunRefusesAnExistingCluster: a directory holding a meta store,
// datanode data or server.json is refused before anything is written.
func TestRunRefusesAnExistingCluster(t *testing.T) {
	for _, name := range []string{"meta", "datanodes", "server.json"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Run(context.Background(), testConfig(dir))
		if err == nil || !strings.Contains(err.Error(), "already holds") {
			t.Fatalf("%s: %v", name, err)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Fatalf("%s: the refused run left %d entries", name, len(entries))
		}
	}
}

// TestRunCancelledLeavesNothing: a cancelled run fails and removes the
// meta store and datanode directories it made.
func TestRunCancelledLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, testConfig(dir)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("the cancelled run left %v", entries)
	}
}

// TestConfigChecks: malformed configurations are refused.
func TestConfigChecks(t *testing.T) {
	ok := testConfig("d")
	for name, mut := range map[string]func(*Config){
		"no dir":            func(c *Config) { c.Dir = "" },
		"no size":           func(c *Config) { c.SizeBytes = 0 },
		"2 datanodes":       func(c *Config) { c.Datanodes = 2 },
		"10 datanodes":      func(c *Config) { c.Datanodes = 10 },
		"block > container": func(c *Config) { c.BlockSizeBytes = 16 * testMiB },
		"chunk > block":     func(c *Config) { c.ChunkSizeBytes = 4 * testMiB },
		"bad bucket":        func(c *Config) { c.Bucket = "No" },
		"too many workers":  func(c *Config) { c.Workers = MaxWorkers + 1 },
		"tiny pieces":       func(c *Config) { c.BytesPerChecksum = 16 },
		"block header": func(c *Config) {
			c.ContainerSizeBytes, c.BlockSizeBytes, c.ChunkSizeBytes, c.BytesPerChecksum = 16*testMiB, 16*testMiB, 512, 512
		},
		"too many keys": func(c *Config) { c.KeySizeBytes = 1 },
	} {
		c := ok
		mut(&c)
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c, err := Config{Dir: "d", SizeBytes: 1}.withDefaults()
	if err != nil || c.Datanodes != 4 || c.Workers != 8 || c.ContainerSizeBytes != 256*testMiB || c.BlockSizeBytes != 256*testMiB ||
		c.ChunkSizeBytes != 4*testMiB || c.KeySizeBytes != 64*testMiB || c.Bucket != "gen" || c.BytesPerChecksum != 16<<10 {
		t.Fatalf("defaults %+v %v", c, err)
	}
}
