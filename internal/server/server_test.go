package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/meta"
)

var spindleBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) (code int) {
	dir, err := os.MkdirTemp("", "spindle-server-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "removing the test directory: %v\n", err)
			code = max(code, 1)
		}
	}()
	spindleBin = filepath.Join(dir, "spindle")
	// go test puts its own GOROOT/bin first on the PATH of the tests.
	// The tag compiles in the datanode's test hooks (the copy pause of
	// rereplicate_test.go), which a release build leaves out.
	cmd := exec.Command("go", "build", "-tags", "spindle_testhooks", "-o", spindleBin, "github.com/spindle-store/spindle/cmd/spindle")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building spindle: %v\n", err)
		return 1
	}
	return m.Run()
}

func testConfig(dir string) Config {
	return Config{
		Dir: dir, MetaListen: "127.0.0.1:0", Binary: spindleBin,
		Meta:         meta.Config{HeartbeatInterval: 100 * time.Millisecond},
		DatanodeArgs: []string{"--heartbeat-interval", "100ms", "--tick", "50ms"},
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// TestServerStartsAndRestarts: the embedded cluster forms a pipeline with a
// leader; stopped and started again on its directory, it has the same
// datanodes (IDs and addresses), the same pipelines and its buckets.
func TestServerStartsAndRestarts(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Meta().CreateBucket(ctx, "photos"); err != nil {
		testutil.CloseT(t, s)
		t.Fatal(err)
	}
	nodes, err := s.Meta().Nodes(ctx)
	if err != nil || len(nodes) != 3 {
		testutil.CloseT(t, s)
		t.Fatalf("nodes %v %v", nodes, err)
	}
	before, _ := s.Meta().Pipelines(ctx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Start(ctx, testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, s)
	after, err := s.Meta().Nodes(ctx)
	if err != nil || len(after) != 3 {
		t.Fatalf("nodes after restart %v %v", after, err)
	}
	// Each datanode keeps its identity; it listens on a new port (bound
	// by itself, port 0), which it registers.
	for i := range nodes {
		if nodes[i].UUID != after[i].UUID || nodes[i].NodeID != after[i].NodeID {
			t.Fatalf("node %d changed: %+v then %+v", i, nodes[i], after[i])
		}
		if !slices.Contains(s.Cluster().Addrs(), after[i].Addr) {
			t.Errorf("node %d registered at %s; the datanodes listen on %v", i, after[i].Addr, s.Cluster().Addrs())
		}
	}
	pls, _ := s.Meta().Pipelines(ctx)
	if len(pls) < len(before) {
		t.Fatalf("pipelines before %v, after %v", before, pls)
	}
	bl, err := s.Meta().ListBuckets(ctx)
	if err != nil || len(bl.Buckets) != 1 || bl.Buckets[0].Name != "photos" {
		t.Fatalf("buckets after restart: %+v %v", bl, err)
	}
	if _, err := Start(ctx, Config{Dir: dir, Datanodes: 4, MetaListen: "127.0.0.1:0", Binary: spindleBin}); err == nil {
		t.Fatal("a server made with 3 datanodes started with 4")
	}
}
