package datanode

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/wal"
)

// fakeMeta is an in-memory meta service: it assigns node IDs by UUID and,
// once three datanodes have registered, puts them in pipeline 5.
type fakeMeta struct {
	mu      sync.Mutex
	ids     map[string]uint64
	addrs   map[uint64]string
	reports map[uint64]*metaapi.Heartbeat
	down    bool // answer every heartbeat with ErrUnavailable
	silent  bool // no commands
	// send: commands for a node, sent in its next heartbeat response
	send map[uint64][]metaapi.Command
}

func newFakeMeta() *fakeMeta {
	return &fakeMeta{ids: map[string]uint64{}, addrs: map[uint64]string{}, reports: map[uint64]*metaapi.Heartbeat{},
		send: map[uint64][]metaapi.Command{}}
}

func (f *fakeMeta) Heartbeat(_ context.Context, hb *metaapi.Heartbeat) (*metaapi.HeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, metaapi.ErrUnavailable
	}
	id := f.ids[hb.UUID]
	if id == 0 {
		if hb.NodeID != 0 {
			return nil, metaapi.ErrInvalid
		}
		id = uint64(len(f.ids) + 1)
		f.ids[hb.UUID] = id
	}
	f.addrs[id] = hb.Addr
	f.reports[id] = hb
	resp := &metaapi.HeartbeatResponse{NodeID: id}
	resp.Commands, f.send[id] = f.send[id], nil
	if f.silent || len(f.addrs) < 3 || hb.NodeID == 0 {
		return resp, nil
	}
	for _, p := range hb.Pipelines {
		if p.ID == 5 {
			return resp, nil
		}
	}
	if len(resp.Commands) > 0 {
		return resp, nil
	}
	pl := &metaapi.Pipeline{ID: 5}
	for i := uint64(1); i <= 3; i++ {
		pl.Members = append(pl.Members, metaapi.Member{NodeID: i, Addr: f.addrs[i]})
	}
	resp.Commands = []metaapi.Command{{Kind: metaapi.CmdJoinPipeline, Pipeline: pl}}
	return resp, nil
}

// leaders returns how many nodes report pipeline 5 with a leader.
func (f *fakeMeta) withLeader() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.reports {
		for _, p := range r.Pipelines {
			if p.ID == 5 && p.LeaderID != 0 {
				n++
			}
		}
	}
	return n
}

type runningNode struct {
	cancel context.CancelFunc
	errc   chan error
}

func runNode(t *testing.T, f *fakeMeta, dir, listen string) *runningNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runningNode{cancel: cancel, errc: make(chan error, 1)}
	go func() {
		rn.errc <- Run(ctx, Config{ListenAddr: listen, DataDirs: []string{filepath.Join(dir, "data")}, LogDir: filepath.Join(dir, "log"),
			Meta: f, HeartbeatInterval: 20 * time.Millisecond, TickInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	return rn
}

func (rn *runningNode) stop(t *testing.T) {
	t.Helper()
	rn.cancel()
	if err := <-rn.errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("datanode: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDatanodesJoinPipelinesFromTheMetaService: datanodes register (node IDs
// from the meta service), join the pipeline they are told to and elect a
// leader; a restarted datanode keeps its node ID and serves its pipeline
// again even while the meta service is down.
func TestDatanodesJoinPipelinesFromTheMetaService(t *testing.T) {
	f := newFakeMeta()
	var dirs []string
	var nodes []*runningNode
	for range 3 {
		d := t.TempDir()
		dirs = append(dirs, d)
		nodes = append(nodes, runNode(t, f, d, "127.0.0.1:0"))
	}
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	waitFor(t, "3 nodes reporting pipeline 5 with a leader", func() bool { return f.withLeader() == 3 })

	// Restart node 1 with the meta service down: same identity, and
	// pipeline 5 served from PIPELINES.json.
	id, err := loadIdentity(filepath.Join(dirs[0], "log"))
	if err != nil || id.NodeID == 0 {
		t.Fatalf("identity after registration: %+v %v", id, err)
	}
	nodes[0].stop(t)
	f.mu.Lock()
	f.down = true
	delete(f.reports, id.NodeID)
	addr := f.addrs[id.NodeID]
	f.mu.Unlock()
	// A datanode comes back on its address (its peers know it by it).
	nodes[0] = runNode(t, f, dirs[0], addr)
	pcs, err := loadPipelines(filepath.Join(dirs[0], "log"))
	if err != nil || len(pcs) != 1 || pcs[0].ID != 5 || len(pcs[0].Members) != 3 {
		t.Fatalf("saved pipelines %+v %v", pcs, err)
	}
	f.mu.Lock()
	f.down, f.silent = false, true
	f.mu.Unlock()
	waitFor(t, "the restarted node reporting pipeline 5 with a leader", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		r := f.reports[id.NodeID]
		return r != nil && r.NodeID == id.NodeID && len(r.Pipelines) == 1 && r.Pipelines[0].LeaderID != 0
	})
}

// reported returns the state node id's last report gives container cid
// ("" when it lacks it).
func (f *fakeMeta) reported(id, cid uint64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.reports[id]; r != nil {
		for _, c := range r.Containers {
			if c.ID == cid {
				return c.State
			}
		}
	}
	return ""
}

// TestDeleteContainerCommand: delete_container deletes a CLOSED replica
// of a pipeline the node does not serve, and only that: a replica of a
// pipeline it serves and an OPEN one stay, and a repeat (or a container
// never held) is harmless.
func TestDeleteContainerCommand(t *testing.T) {
	f := newFakeMeta()
	dir := t.TempDir()
	// Node 0's disk holds containers 7 and 9 CLOSED and 8 OPEN (and the
	// log a node holding containers has).
	wl, err := wal.Open(wal.Config{Dir: filepath.Join(dir, "log")})
	if err != nil {
		t.Fatal(err)
	}
	closeT(t, wl)
	e, err := engine.Open(engine.Config{DataDirs: []string{filepath.Join(dir, "data")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cid := range []engine.ContainerID{7, 8, 9} {
		if err := e.CreateContainer(cid); err != nil {
			t.Fatal(err)
		}
		if cid != 8 {
			if err := e.CloseContainer(cid); err != nil {
				t.Fatal(err)
			}
		}
	}
	closeT(t, e)
	nodes := []*runningNode{runNode(t, f, dir, "127.0.0.1:0"), runNode(t, f, t.TempDir(), "127.0.0.1:0"), runNode(t, f, t.TempDir(), "127.0.0.1:0")}
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	waitFor(t, "3 nodes reporting pipeline 5 with a leader", func() bool { return f.withLeader() == 3 })
	id, err := loadIdentity(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	me := id.NodeID
	for cid, want := range map[uint64]string{7: metaapi.ContainerClosed, 8: metaapi.ContainerOpen, 9: metaapi.ContainerClosed} {
		if got := f.reported(me, cid); got != want {
			t.Fatalf("container %d reported %q, want %q", cid, got, want)
		}
	}
	del := func(cid, pipeline uint64) metaapi.Command {
		return metaapi.Command{Kind: metaapi.CmdDeleteContainer, Container: cid, Pipeline: &metaapi.Pipeline{ID: pipeline}}
	}
	f.mu.Lock()
	f.send[me] = []metaapi.Command{del(9, 5), del(8, 99), del(7, 99), del(7, 99), del(42, 99)}
	f.mu.Unlock()
	waitFor(t, "container 7 gone from the reports", func() bool { return f.reported(me, 7) == "" })
	// The commands ran in order in one heartbeat: once 7 is gone, 9 and 8
	// were refused already.
	if got := f.reported(me, 9); got != metaapi.ContainerClosed {
		t.Fatalf("container 9 of pipeline 5, which the node serves: reported %q, want it kept CLOSED", got)
	}
	if got := f.reported(me, 8); got != metaapi.ContainerOpen {
		t.Fatalf("OPEN container 8: reported %q, want it kept", got)
	}
}
