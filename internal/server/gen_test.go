package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/gen"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestServerStartsOnGeneratedData: the embedded server starts on what
// `spindle gen` wrote; its datanodes come up as the nodes the generated
// meta store knows (IDs 1..4, their UUIDs, real addresses once they have
// sent a heartbeat, no new registration), and every key reads back byte
// for byte through the key client.
func TestServerStartsOnGeneratedData(t *testing.T) {
	dir := t.TempDir()
	const datanodes = 4
	gcfg := gen.Config{Dir: dir, Datanodes: datanodes, SizeBytes: 24 << 20, ContainerSizeBytes: 4 << 20,
		KeySizeBytes: 3<<20 + 12345, BlockSizeBytes: 1 << 20, ChunkSizeBytes: 256 << 10, Seed: 99,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	res, err := gen.Run(context.Background(), gcfg)
	if err != nil {
		t.Fatal(err)
	}
	uuids := map[uint64]string{}
	for i := 1; i <= datanodes; i++ {
		b, err := os.ReadFile(filepath.Join(dir, "datanodes", "log", fmt.Sprintf("dn%d", i), "DATANODE.json"))
		if err != nil {
			t.Fatal(err)
		}
		var id struct {
			UUID   string `json:"uuid"`
			NodeID uint64 `json:"node_id"`
		}
		if err := json.Unmarshal(b, &id); err != nil {
			t.Fatal(err)
		}
		uuids[id.NodeID] = id.UUID
	}

	s := startServer(t, dir, func(c *Config) { c.Datanodes = datanodes })
	defer testutil.CloseT(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Bounded wait until every datanode has replaced its placeholder
	// address with its own.
	var nodes []metaapi.NodeInfo
	for deadline := time.Now().Add(30 * time.Second); ; {
		nodes, err = s.Meta().Nodes(ctx)
		ready := err == nil && len(nodes) == datanodes
		for _, n := range nodes {
			ready = ready && n.Addr != gen.PlaceholderAddr
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("datanodes not all heard from: %+v %v", nodes, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, n := range nodes {
		if n.NodeID != uint64(i+1) || n.UUID != uuids[n.NodeID] {
			t.Fatalf("node %d: %+v; identity files %v", i+1, n, uuids)
		}
	}

	kc, err := keyclient.New(s.Meta(), keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, kc)
	var listed int
	if err := kc.List(ctx, gen.DefaultBucket, "", func(metaapi.KeyInfo) error { listed++; return nil }); err != nil {
		t.Fatal(err)
	}
	if listed != res.Keys || res.Keys != 8 {
		t.Fatalf("%d keys listed, %d generated", listed, res.Keys)
	}
	var got bytes.Buffer
	for k := range res.Keys {
		got.Reset()
		ki, err := kc.Get(ctx, gen.DefaultBucket, gen.KeyName(k), &got, keyclient.GetOptions{})
		if err != nil {
			t.Fatalf("key %d: %v", k, err)
		}
		want := make([]byte, min(gcfg.KeySizeBytes, gcfg.SizeBytes-uint64(k)*gcfg.KeySizeBytes))
		gen.Content(gcfg.Seed, k, 0, want)
		if ki.Size != uint64(len(want)) || !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("key %d: %d bytes read, %d generated, equal %v", k, got.Len(), len(want), bytes.Equal(got.Bytes(), want))
		}
	}
}
