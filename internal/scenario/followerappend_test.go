package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/syscallprof"
	"github.com/spindle-store/spindle/internal/transport"
)

func TestBlockPlanPlacesChunksAndExpiresOldest(t *testing.T) {
	const chunk = 10
	p := newBlockPlan(4*chunk, 3, 8*chunk) // 4 chunks a block, 3 blocks a container, 2 blocks kept
	type pos struct{ c, b, off uint64 }
	var got []pos
	var expired []blockRef
	for range 30 {
		c, b, off := p.next(chunk)
		got = append(got, pos{c, b, uint64(off)})
		expired = p.expire(expired)
	}
	for i, g := range got {
		blk := uint64(i/4) + 1
		want := pos{c: (blk-1)/3 + 1, b: blk, off: uint64(i%4) * chunk}
		if g != want {
			t.Fatalf("chunk %d placed at %+v, want %+v", i, g, want)
		}
	}
	if p.blocks != 8 || p.containers != 3 {
		t.Errorf("blocks %d containers %d, want 8 and 3", p.blocks, p.containers)
	}
	// Oldest first, never the current block, at most retain bytes live.
	for i, e := range expired {
		if e.local != uint64(i)+1 || e.bytes != 4*chunk {
			t.Errorf("expired[%d] = %+v, want block %d with %d bytes", i, e, i+1, 4*chunk)
		}
	}
	if p.liveBytes > 8*chunk || len(p.live) == 0 || p.live[len(p.live)-1].local != 8 {
		t.Errorf("live %v (%d bytes) after expiry", p.live, p.liveBytes)
	}
	if len(expired)+len(p.live) != 8 {
		t.Errorf("%d expired + %d live blocks, want 8", len(expired), len(p.live))
	}
}

func TestBlockPlanNeverExpiresCurrentBlock(t *testing.T) {
	p := newBlockPlan(100, 16, 1) // retain less than one chunk
	for i := range 5 {
		p.next(10)
		if got := p.expire(nil); len(got) != 0 {
			t.Fatalf("chunk %d: expired %v from the only block", i, got)
		}
	}
}

func TestFollowerAppendConfigValidation(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "spindle")
	for _, tc := range []struct {
		name string
		mod  func(*FollowerAppendConfig)
		want string
	}{
		{"batch", func(c *FollowerAppendConfig) { c.Batch = faMaxBatch + 1 }, "batch"},
		{"chunk", func(c *FollowerAppendConfig) { c.ChunkSizeBytes = engine.MaxChunkSizeBytes + 1 }, "chunk size"},
		{"payload", func(c *FollowerAppendConfig) { c.ChunkSizeBytes, c.Batch = 64<<20, 2 }, "payload limit"},
		{"block", func(c *FollowerAppendConfig) { c.BlockSizeBytes = 1 << 10 }, "block size"},
		{"window", func(c *FollowerAppendConfig) { c.Window = -1 }, "window"},
		{"messages", func(c *FollowerAppendConfig) { c.Messages = -5 }, "messages"},
		{"headers", func(c *FollowerAppendConfig) { c.ChunkSizeBytes, c.Batch = 1<<20, 1000 }, "payload limit"},
		{"entry", func(c *FollowerAppendConfig) { c.ChunkSizeBytes, c.Batch = 16<<10, 1024 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := FollowerAppendConfig{Binary: bin}
			tc.mod(&c)
			err := c.defaults()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
	c := FollowerAppendConfig{Binary: bin}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.Messages != 30000 || c.Batch != 1 || c.ChunkSizeBytes != 1<<20 || c.RetainBytes != 2<<30 || c.BlockSizeBytes != 256<<20 {
		t.Errorf("defaults %+v", c)
	}
	if n := maxEntryBytes(1024, 16<<10); n > faMaxEntryBytes {
		t.Errorf("a batch of 1024 16 KiB chunks needs %d entry bytes, over %d", n, faMaxEntryBytes)
	}
}

func TestSummarizeSyscallsSeed000(t *testing.T) {
	p, err := syscallprof.ParseFile("../syscallprof/testdata/seed000-batch1-repeat.txt")
	if err != nil {
		t.Fatal(err)
	}
	s := summarizeSyscalls(p, 30000, 30000)
	if s.Total != 2738788 {
		t.Errorf("total %d, want the printed 2738788", s.Total)
	}
	if s.PerMessage != round4(2738788.0/30000) || s.PerAppendEntries != s.PerMessage {
		t.Errorf("per message %v, per AppendEntries %v", s.PerMessage, s.PerAppendEntries)
	}
	if s.ThreadsCreated != 30215+2 { // clone + vfork
		t.Errorf("threads created %d", s.ThreadsCreated)
	}
	if s.FdatasyncPerMessage != round4(17333.0/30000) {
		t.Errorf("fdatasync per message %v", s.FdatasyncPerMessage)
	}
	if s.ByName["futex"] != 1101987 || s.ByName["rename"] != 30019 {
		t.Errorf("by name %v", s.ByName)
	}
	if len(s.Rows) != len(p.Syscalls) || s.Rows[0].Name != "futex" || s.Rows[0].Seconds != p.Syscalls[0].Seconds || s.Rows[0].Errors != p.Syscalls[0].Errors {
		t.Errorf("rows %d, first %+v; want strace's %d rows with their times and errors", len(s.Rows), s.Rows[0], len(p.Syscalls))
	}
	s10 := summarizeSyscalls(p, 30000, 3000)
	if s10.PerAppendEntries != round4(2738788.0/3000) {
		t.Errorf("per AppendEntries at batch 10: %v", s10.PerAppendEntries)
	}
}

// fakeFollower plays a follower datanode in-process, as the contract of
// `spindle datanode` says: it checks each MsgApp against its log, matches
// the WriteChunk records with the payload segments and their checksums,
// and acknowledges (possibly several MsgApps at once) by raft messages
// over its own connection to the leader's address.
type fakeFollower struct {
	ln         net.Listener
	leaderAddr string
	final      uint64 // the last index the leader will send: always acked
	ackEvery   int    // acknowledge every n-th MsgApp (coalescing)
	reject     bool   // reject the first MsgApp
	campaign   bool   // send a MsgPreVote instead of acknowledging

	mu        sync.Mutex
	last      uint64
	lastTerm  uint64
	chunks    int64
	bytes     int64
	deletes   []transport.GetBlock
	written   map[[2]uint64]uint64 // block → bytes written
	commit    uint64
	heartbeat int
}

func (f *fakeFollower) serve(ctx context.Context) (err error) {
	nc, err := f.ln.Accept()
	if err != nil {
		return err
	}
	in := transport.NewConn(nc, transport.ConnConfig{})
	defer func() { err = errors.Join(err, in.Close()) }()
	out, err := transport.DialConn(ctx, f.leaderAddr, transport.ConnConfig{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	f.last, f.lastTerm, f.written = faSnapIndex, faSnapTerm, map[[2]uint64]uint64{}
	send := func(m *raftpb.Message) error {
		m.From, m.Term = proto.Uint64(faFollowerID), proto.Uint64(faLeaderTerm)
		if m.To == nil {
			m.To = proto.Uint64(faLeaderID)
		}
		return out.Send(&transport.RaftMessage{GroupID: faGroupID, Message: m})
	}
	var rm transport.RaftMessage
	var segs [][]byte
	apps := 0
	for range 1 << 20 {
		fr, err := in.ReadFrame()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fr.Decode(&rm); err != nil {
			return err
		}
		m := rm.Message
		switch m.GetType() {
		case raftpb.MessageType_MsgHeartbeat:
			f.mu.Lock()
			f.heartbeat++
			f.commit = max(f.commit, m.GetCommit())
			f.mu.Unlock()
			if err := send(&raftpb.Message{Type: raftpb.MessageType_MsgHeartbeatResp.Enum()}); err != nil {
				return err
			}
			continue
		case raftpb.MessageType_MsgApp:
		default:
			return fmt.Errorf("follower: unexpected %s", m.GetType())
		}
		if f.campaign {
			return send(&raftpb.Message{Type: raftpb.MessageType_MsgPreVote.Enum(), To: proto.Uint64(faOtherID), Term: proto.Uint64(faLeaderTerm + 1)})
		}
		if f.reject {
			return send(&raftpb.Message{Type: raftpb.MessageType_MsgAppResp.Enum(), Index: proto.Uint64(m.GetIndex()), Reject: proto.Bool(true), RejectHint: proto.Uint64(0)})
		}
		if m.GetIndex() != f.last || m.GetLogTerm() != f.lastTerm || m.GetTerm() != faLeaderTerm {
			return fmt.Errorf("follower: MsgApp after (%d, %d) at term %d, log ends at (%d, %d)", m.GetIndex(), m.GetLogTerm(), m.GetTerm(), f.last, f.lastTerm)
		}
		if m.GetCommit() > f.last {
			return fmt.Errorf("follower: commit %d past the log's end %d", m.GetCommit(), f.last)
		}
		segs, err = rm.Segments(fr.Payload, segs[:0])
		if err != nil {
			return err
		}
		next := 0
		for _, e := range m.GetEntries() {
			if e.GetIndex() != f.last+1 || e.GetTerm() != faLeaderTerm || e.GetType() != raftpb.EntryType_EntryNormal {
				return fmt.Errorf("follower: entry (%d, %d) after %d", e.GetIndex(), e.GetTerm(), f.last)
			}
			err := pipeline.DecodeEntry(e.GetData(), func(c *pipeline.Command) error {
				f.mu.Lock()
				defer f.mu.Unlock()
				switch c.Kind {
				case pipeline.KindWriteChunk:
					wc := c.WriteChunk
					if next >= len(segs) || uint64(len(segs[next])) != wc.Length {
						return fmt.Errorf("follower: WriteChunk %d has no matching segment", next)
					}
					if got := engine.ComputeChecksums(nil, segs[next], wc.BytesPerChecksum); !slices.Equal(got, wc.Checksums) {
						return fmt.Errorf("follower: checksums of chunk %d do not match its bytes", next)
					}
					key := [2]uint64{wc.ContainerID, wc.LocalID}
					if f.written[key] != wc.Offset {
						return fmt.Errorf("follower: chunk at offset %d of block %v, which has %d bytes", wc.Offset, key, f.written[key])
					}
					for _, d := range f.deletes {
						if d.ContainerID == wc.ContainerID && d.LocalID == wc.LocalID {
							return fmt.Errorf("follower: write to deleted block %v", key)
						}
					}
					f.written[key] += wc.Length
					f.chunks++
					f.bytes += int64(wc.Length)
					next++
				case pipeline.KindDeleteBlock:
					f.deletes = append(f.deletes, c.Ref)
				default:
					return fmt.Errorf("follower: unexpected %s", c.Kind)
				}
				return nil
			})
			if err != nil {
				return err
			}
			f.last, f.lastTerm = e.GetIndex(), e.GetTerm()
		}
		if next != len(segs) {
			return fmt.Errorf("follower: %d segments for %d WriteChunks", len(segs), next)
		}
		f.commit = max(f.commit, m.GetCommit())
		apps++
		if apps%f.ackEvery == 0 || f.last == f.final {
			if err := send(&raftpb.Message{Type: raftpb.MessageType_MsgAppResp.Enum(), Index: proto.Uint64(f.last)}); err != nil {
				return err
			}
		}
	}
	return errors.New("follower: frame bound reached")
}

// runFakeLeader runs the leader against a fake follower.
func runFakeLeader(t *testing.T, cfg leaderConfig, f *fakeFollower) (leaderStats, error, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, fln)
	f.ln, f.leaderAddr = fln, ln.Addr().String()
	f.final = faSnapIndex + uint64(cfg.appendEntries())
	ferr := make(chan error, 1)
	go func() { ferr <- f.serve(ctx) }()
	out, err := transport.DialConn(ctx, fln.Addr().String(), transport.ConnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sess := startLeader(ctx, ln, out)
	st, lerr := sess.run(cfg, nil)
	sess.close()
	return st, lerr, <-ferr
}

func testLeaderConfig(messages int64, batch int) leaderConfig {
	chunk := make([]byte, 4096)
	bench.FillPseudoRandom(chunk, 7)
	const bpc = 1024
	return leaderConfig{
		Messages: messages, Batch: batch, Chunk: chunk, BPC: bpc,
		Checksums: engine.ComputeChecksums(nil, chunk, bpc),
		Window:    4, BlockSize: 4 * 4096, BlocksPerCont: 3, RetainBytes: 10 * 4096,
		Stall: time.Minute,
	}
}

func TestLeaderReplicatesToFollower(t *testing.T) {
	for _, tc := range []struct {
		messages int64
		batch    int
		ackEvery int
	}{
		{50, 1, 1},
		{50, 10, 1},
		{53, 10, 2}, // a short last AppendEntries; acknowledgements cover two at a time
		{40, 3, 3},
	} {
		t.Run(fmt.Sprintf("m%d-b%d-ack%d", tc.messages, tc.batch, tc.ackEvery), func(t *testing.T) {
			cfg := testLeaderConfig(tc.messages, tc.batch)
			f := &fakeFollower{ackEvery: tc.ackEvery}
			st, lerr, ferr := runFakeLeader(t, cfg, f)
			if lerr != nil || ferr != nil {
				t.Fatalf("leader: %v; follower: %v", lerr, ferr)
			}
			aes := (tc.messages + int64(tc.batch) - 1) / int64(tc.batch)
			if st.Messages != tc.messages || st.AppendEntries != aes || st.Bytes != tc.messages*4096 {
				t.Errorf("stats %+v, want %d messages in %d AppendEntries", st, tc.messages, aes)
			}
			if st.Latency.Count() != aes {
				t.Errorf("%d round trips timed, want %d", st.Latency.Count(), aes)
			}
			if st.LastIndex != faSnapIndex+uint64(aes) || st.Elapsed <= 0 {
				t.Errorf("last index %d, elapsed %v", st.LastIndex, st.Elapsed)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.chunks != tc.messages || f.last != st.LastIndex {
				t.Errorf("follower has %d chunks up to index %d", f.chunks, f.last)
			}
			// 4 chunks a block, 10 chunks retained: every block but the
			// last two or three is deleted, oldest first, once full.
			blocks := (tc.messages + 3) / 4
			if st.Blocks != blocks || int64(len(f.deletes)) != st.DeleteBlocks {
				t.Errorf("%d blocks, %d deletes sent, %d received", st.Blocks, st.DeleteBlocks, len(f.deletes))
			}
			if min := blocks - 3; int64(len(f.deletes)) < min {
				t.Errorf("%d blocks deleted of %d, want at least %d", len(f.deletes), blocks, min)
			}
			for i, d := range f.deletes {
				if d.LocalID != uint64(i)+1 || d.ContainerID != uint64(i)/3+1 || f.written[[2]uint64{d.ContainerID, d.LocalID}] != 4*4096 {
					t.Errorf("delete %d: %+v", i, d)
				}
			}
			if f.commit != st.LastIndex {
				t.Errorf("follower learned commit %d, want %d", f.commit, st.LastIndex)
			}
		})
	}
}

func TestLeaderReportsRejection(t *testing.T) {
	_, lerr, _ := runFakeLeader(t, testLeaderConfig(10, 1), &fakeFollower{ackEvery: 1, reject: true})
	if lerr == nil || !strings.Contains(lerr.Error(), "rejected") {
		t.Errorf("leader error %v, want a rejection", lerr)
	}
}

func TestLeaderReportsCampaign(t *testing.T) {
	_, lerr, _ := runFakeLeader(t, testLeaderConfig(10, 1), &fakeFollower{ackEvery: 1, campaign: true})
	if lerr == nil || !strings.Contains(lerr.Error(), "election timeout") {
		t.Errorf("leader error %v, want the campaign named", lerr)
	}
}

func TestDatanodeArgs(t *testing.T) {
	args := strings.Join(datanodeArgs(datanodeSpec{DataDir: "D", LogDir: "L", LeaderAddr: "127.0.0.1:9"}, "F"), " ")
	for _, want := range []string{"datanode", "--id 2", "--data-dir D", "--log-dir L", "--pipeline 3:1=127.0.0.1:9,2=", ",3=127.0.0.1:9", "--ready-file F", "--election-ticks 1000"} {
		if !strings.Contains(args, want) {
			t.Errorf("datanode args %q lack %q", args, want)
		}
	}
}
