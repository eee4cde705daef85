package meta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// clock is a settable clock for the service (no sleeping in tests).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testConfig: defaults, the given clock, no background ticker.
func testConfig(dir string, clk *clock) state.Config {
	return state.Config{Dir: dir, Now: clk.Now, TickInterval: -1, Logger: quiet}
}

func open(t *testing.T, cfg state.Config) *Service {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustClose(t, s) })
	return s
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// mustClose closes c, failing the test on an error (a cleanup's or a
// deferred Close's too); a connection closed already is not one.
func mustClose(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("close: %v", err)
	}
}

func mustNo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

// fakeDN plays a datanode against a Service: it reports what it serves,
// carries out the commands (a pipeline's leader is its lowest member;
// closing and deleting through a pipeline applies on every member, as
// raft would) and acknowledges deletions.
type fakeDN struct {
	c         *fakeCluster
	uuid      string
	id        uint64
	addr      string
	pipelines map[uint64]*metaapi.Pipeline
	conts     map[uint64]*metaapi.ContainerReport
	deleted   []metaapi.BlockRef // to acknowledge
	got       []metaapi.Command  // every command received
	noAck     bool
	noClose   bool   // ignore close_container
	noTrim    bool   // ignore delete_container
	used      uint64 // reported Used (Capacity: 1 TB)
	full      uint64 // taken off Available (as by other files on its disks)
	// copy is what it does with replicate_container (default: copy at
	// once from the first source holding the container CLOSED).
	copy     copyMode
	copying  map[uint64]uint64     // container → source, copies held under way (copyHold)
	failures []metaapi.CopyFailure // to report
	copied   map[uint64][]uint64   // container → the sources it was told, per copy carried out
	// failedPipelines is reported in every heartbeat (a replica that
	// failed and left its pipeline).
	failedPipelines []metaapi.PipelineFailure
	// behind: pipeline → members it reports (as their leader) behind
	// its compacted log.
	behind map[uint64][]uint64
	// leaderless: it reports no leader for every pipeline (its raft
	// group lost its leader and elects none).
	leaderless bool
}

type copyMode int

const (
	copyNow    copyMode = iota // copy at once
	copyIgnore                 // ignore the command
	copyHold                   // list it in Copying; finish at finishCopies
	copyFail                   // report a failure from the first source
)

// fakeCluster is a set of fake datanodes around one Service.
type fakeCluster struct {
	t     *testing.T
	s     *Service
	clk   *clock
	nodes []*fakeDN
}

func (c *fakeCluster) add() *fakeDN {
	n := &fakeDN{c: c, uuid: fmt.Sprintf("uuid-%d", len(c.nodes)+1), addr: fmt.Sprintf("127.0.0.1:%d", 20001+len(c.nodes)),
		pipelines: map[uint64]*metaapi.Pipeline{}, conts: map[uint64]*metaapi.ContainerReport{}}
	c.nodes = append(c.nodes, n)
	n.beat()
	return n
}

func (c *fakeCluster) node(id uint64) *fakeDN {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no fake datanode %d", id)
	return nil
}

func (n *fakeDN) report() *metaapi.Heartbeat {
	hb := &metaapi.Heartbeat{UUID: n.uuid, NodeID: n.id, Addr: n.addr, DeletedBlocks: n.deleted, CopyFailures: n.failures,
		Copying: slices.Sorted(maps.Keys(n.copying)), Used: n.used, FailedPipelines: n.failedPipelines}
	if n.used > 0 {
		hb.Capacity = 1e12
		hb.Available = hb.Capacity - n.used - n.full
	}
	for _, id := range slices.Sorted(maps.Keys(n.conts)) {
		hb.Containers = append(hb.Containers, *n.conts[id])
	}
	for _, id := range slices.Sorted(maps.Keys(n.pipelines)) {
		p := n.pipelines[id]
		leader := p.Members[0].NodeID
		if n.leaderless {
			leader = 0
		}
		hb.Pipelines = append(hb.Pipelines, metaapi.PipelineReport{ID: id, LeaderID: leader, Term: 1, Behind: n.behind[id]})
	}
	return hb
}

// beat sends one heartbeat and carries out the commands.
func (n *fakeDN) beat() []metaapi.Command {
	n.c.t.Helper()
	resp, err := n.c.s.Heartbeat(n.report())
	if err != nil {
		n.c.t.Fatalf("heartbeat of %s: %v", n.uuid, err)
	}
	n.id = resp.NodeID
	n.deleted, n.failures = nil, nil
	n.got = append(n.got, resp.Commands...)
	for _, cmd := range resp.Commands {
		switch cmd.Kind {
		case metaapi.CmdJoinPipeline:
			n.pipelines[cmd.Pipeline.ID] = cmd.Pipeline
		case metaapi.CmdLeavePipeline:
			delete(n.pipelines, cmd.Pipeline.ID)
		case metaapi.CmdCloseContainer:
			if n.noClose {
				continue
			}
			if _, ok := n.pipelines[cmd.Pipeline.ID]; !ok {
				// Not serving the pipeline: it closes its own replica
				// (as the datanode does, outside raft).
				if r := n.conts[cmd.Container]; r != nil && r.State == metaapi.ContainerOpen {
					r.State = metaapi.ContainerClosed
				}
				continue
			}
			for _, m := range cmd.Pipeline.Members {
				// (an UNHEALTHY replica stays so: the engine refuses
				// to close it)
				r := n.c.nodeOrNil(m.NodeID)
				if r != nil {
					if _, serves := r.pipelines[cmd.Pipeline.ID]; !serves {
						continue // the raft close does not reach it
					}
				}
				if r != nil && r.conts[cmd.Container] != nil && r.conts[cmd.Container].State != metaapi.ContainerUnhealthy {
					r.conts[cmd.Container].State = metaapi.ContainerClosed
				}
			}
		case metaapi.CmdReplicateContainer:
			n.replicate(cmd)
		case metaapi.CmdDeleteContainer:
			// as a datanode: never a replica of a pipeline it serves
			if _, serves := n.pipelines[cmd.Pipeline.ID]; serves {
				n.c.t.Errorf("node %d told to delete container %d of pipeline %d, which it serves", n.id, cmd.Container, cmd.Pipeline.ID)
				continue
			}
			if !n.noTrim {
				delete(n.conts, cmd.Container)
			}
		case metaapi.CmdDeleteBlocks:
			if n.noAck {
				continue
			}
			for _, b := range cmd.Blocks {
				n.deleted = append(n.deleted, metaapi.BlockRef{Container: cmd.Container, Local: b})
			}
		}
	}
	return resp.Commands
}

// replicate carries out a replicate_container as n.copy says.
func (n *fakeDN) replicate(cmd metaapi.Command) {
	if _, ok := n.conts[cmd.Container]; ok || n.copying[cmd.Container] != 0 || len(cmd.Sources) == 0 {
		return // idempotent: held or under way already
	}
	src := cmd.Sources[0].NodeID
	switch n.copy {
	case copyIgnore:
	case copyHold:
		if n.copying == nil {
			n.copying = map[uint64]uint64{}
		}
		n.copying[cmd.Container] = src
	case copyFail:
		n.failures = append(n.failures, metaapi.CopyFailure{Container: cmd.Container, Source: src, Error: "injected"})
	default:
		n.finishCopy(cmd.Container, src)
	}
	if n.copied == nil {
		n.copied = map[uint64][]uint64{}
	}
	var ids []uint64
	for _, m := range cmd.Sources {
		ids = append(ids, m.NodeID)
	}
	n.copied[cmd.Container] = ids
}

// finishCopy makes n hold container cid as source src holds it (CLOSED).
func (n *fakeDN) finishCopy(cid, src uint64) {
	delete(n.copying, cid)
	r := n.c.nodeOrNil(src)
	if r == nil || r.conts[cid] == nil || r.conts[cid].State != metaapi.ContainerClosed {
		n.failures = append(n.failures, metaapi.CopyFailure{Container: cid, Source: src, Error: "source lacks it"})
		return
	}
	cp := *r.conts[cid]
	n.conts[cid] = &cp
}

// finishCopies completes every copy n holds under way.
func (n *fakeDN) finishCopies() {
	for _, cid := range slices.Sorted(maps.Keys(n.copying)) {
		n.finishCopy(cid, n.copying[cid])
	}
}

func (c *fakeCluster) nodeOrNil(id uint64) *fakeDN {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// write pretends a block was written to container cid on every member of
// pipeline p: the container appears in their reports.
func (c *fakeCluster) write(p metaapi.Pipeline, cid, bytes uint64) {
	for _, m := range p.Members {
		n := c.node(m.NodeID)
		r := n.conts[cid]
		if r == nil {
			r = &metaapi.ContainerReport{ID: cid, State: metaapi.ContainerOpen}
			n.conts[cid] = r
		}
		r.UsedBytes += bytes
		r.Blocks++
	}
}

// round: every listed node beats, then a tick.
func (c *fakeCluster) round(nodes ...*fakeDN) {
	c.t.Helper()
	for _, n := range nodes {
		n.beat()
	}
	mustNo(c.t, c.s.Tick())
}

// settle runs rounds of the given nodes (default all) until no command
// is sent (bounded).
func (c *fakeCluster) settle(nodes ...*fakeDN) {
	c.t.Helper()
	if len(nodes) == 0 {
		nodes = c.nodes
	}
	for range 20 {
		sent := 0
		for _, n := range nodes {
			sent += len(n.beat())
		}
		mustNo(c.t, c.s.Tick())
		if sent == 0 {
			return
		}
	}
	c.t.Fatal("the cluster keeps sending commands after 20 rounds")
}

func newCluster(t *testing.T, cfg state.Config, clk *clock, nodes int) *fakeCluster {
	c := &fakeCluster{t: t, s: open(t, cfg), clk: clk}
	for range nodes {
		c.add()
	}
	mustNo(t, c.s.Tick())
	c.settle()
	return c
}

func (c *fakeCluster) pipelines() []metaapi.Pipeline {
	return must[*metaapi.PipelineList](c.t)(c.s.Pipelines()).Pipelines
}

func (c *fakeCluster) containers() map[uint64]metaapi.ContainerInfo {
	m := map[uint64]metaapi.ContainerInfo{}
	for _, ci := range must[*metaapi.ContainerList](c.t)(c.s.Containers()).Containers {
		m[ci.ID] = ci
	}
	return m
}

func (c *fakeCluster) health() map[uint64]string {
	m := map[uint64]string{}
	for _, n := range must[*metaapi.NodeList](c.t)(c.s.Nodes()).Nodes {
		m[n.NodeID] = n.Health
	}
	return m
}

// put allocates n blocks of size each for bucket/key, "writes" them and
// commits the key.
func (c *fakeCluster) put(bucket, key string, n int, size uint64) *metaapi.KeyInfo {
	c.t.Helper()
	ck := &metaapi.CommitKey{CRC32C: 7}
	for range n {
		a := must[*metaapi.AllocateResponse](c.t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: bucket, Key: key}))
		c.write(a.Pipeline, a.Block.Container, size)
		ck.Blocks = append(ck.Blocks, metaapi.KeyBlock{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: size})
		ck.Size += size
	}
	return must[*metaapi.KeyInfo](c.t)(c.s.CommitKey(bucket, key, ck))
}

var bg = context.Background()
