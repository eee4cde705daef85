package meta

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/checkpoint"
	"github.com/spindle-store/spindle/internal/meta/raftgroup"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/vfs"
)

// smallSnapshots makes members checkpoint every 16 entries and keep 4
// behind: a few dozen puts compact the log.
func smallSnapshots(c *state.Config) {
	if os.Getenv("METALOG") != "" {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	c.SnapshotEntries = 16
	c.LogRetainEntries = 4
}

// putKeys puts keys prefix0..prefixN-1 (one block of 100 bytes each).
func putKeys(t *testing.T, cl *metaapi.Client, bucket, prefix string, n int) []string {
	t.Helper()
	var keys []string
	for i := range n {
		k := fmt.Sprintf("%s%03d", prefix, i)
		if err := put(bg, cl, bucket, k, 100); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		keys = append(keys, k)
	}
	return keys
}

// addMember adds member ID len(g.srvs)+1 to the group (admin meta add)
// on a new address as a learner, starts it with Join and waits until the
// leader has promoted it; it returns its index.
func (g *rgroup) addMember(dir string) int {
	g.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	mustNo(g.t, err)
	return g.addMemberOn(ln, dir)
}

// addMemberOn is addMember on ln.
func (g *rgroup) addMemberOn(ln net.Listener, dir string) int {
	g.t.Helper()
	i := len(g.srvs)
	id := uint64(i + 1)
	g.srvs = append(g.srvs, nil)
	g.dirs = append(g.dirs, dir)
	g.addrs = append(g.addrs, ln.Addr().String())
	peers := maps.Clone(g.peers)
	peers[id] = ln.Addr().String()
	g.peers = peers
	if _, err := g.cl.ChangeMembers(bg, metaapi.MemberChange{Op: "add", ID: id, Addr: ln.Addr().String()}); err != nil {
		g.t.Fatalf("add member %d: %v", id, err)
	}
	prev := g.tweak
	g.tweak = func(c *state.Config) {
		if prev != nil {
			prev(c)
		}
		c.Join = c.ID == id
	}
	g.start(i, ln)
	waitFor(g.t, fmt.Sprintf("member %d promoted from learner to voter", id), func() bool {
		st, err := g.cl.ChangeMembers(bg, metaapi.MemberChange{Op: "add", ID: id, Addr: ln.Addr().String()})
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if m.ID == id {
				return !m.Learner
			}
		}
		return false
	})
	return i
}

// handOver makes member i the serving leader (asking whichever member
// leads to transfer the leadership).
func (g *rgroup) handOver(i int) {
	g.t.Helper()
	waitFor(g.t, fmt.Sprintf("member %d serving", i+1), func() bool {
		if g.srvs[i].Service().Serving() {
			return true
		}
		for _, s := range g.srvs {
			if s != nil {
				s.Service().rep.TransferLeader(uint64(i + 1))
			}
		}
		return false
	})
}

// TestEmptiedMemberCatchesUpFromSnapshot: a member whose directory is
// deleted is restarted under its ID; the leader's log is compacted past
// anything it has, so it receives a snapshot stream, installs it, catches
// up and, made the leader, serves every key. It rejoins in a term past the
// group's (its lost votes cannot repeat); without that the leader, which
// remembers how far it had replicated to it, fails on it, and without the
// snapshot path it stops at the leader's MsgSnap.
func TestEmptiedMemberCatchesUpFromSnapshot(t *testing.T) {
	g := newRGroupWith(t, 3, smallSnapshots)
	ld := g.leader()
	g.dns()
	_, err := g.cl.CreateBucket(bg, "snapb")
	mustNo(t, err)
	keys := putKeys(t, g.cl, "snapb", "before-", 30)
	f := (ld + 1) % 3
	g.stop(f)
	mustNo(t, os.RemoveAll(g.dirs[f]))
	keys = append(keys, putKeys(t, g.cl, "snapb", "while-down-", 30)...)
	lr := g.srvs[ld].Service().rep
	first, err := lr.WAL.FirstIndex(raftgroup.WALGroup)
	mustNo(t, err)
	if first <= 2 || lr.SnapIndex.Load() == 0 {
		t.Fatalf("leader's log starts at %d, latest snapshot %d: want it compacted behind a snapshot", first, lr.SnapIndex.Load())
	}
	term := lr.Term.Load()
	g.restart(f)
	fr := g.srvs[f].Service().rep
	ld = g.leader()
	waitFor(t, "the emptied member caught up", func() bool {
		return fr.Installed.Load() >= 1 && fr.Applied.Load() >= g.srvs[ld].Service().rep.Applied.Load()
	})
	if st := g.srvs[f].Service().MetaStatus(); st.Term <= term || st.SnapshotIndex == 0 {
		t.Fatalf("emptied member's status %+v: want a term past %d and a snapshot", st, term)
	}
	// The leader knew it had held entries: it asked to be made a learner,
	// had no vote until promoted, and is a voter again (learners.go).
	waitFor(t, "the emptied member promoted after having been a learner", func() bool {
		st := g.srvs[f].Service().MetaStatus()
		return st.Role != "recovering" && st.Role != "learner"
	})
	if !fr.Rec.WasLearner() {
		t.Fatalf("the emptied member votes again without having been a learner")
	}
	if st := g.srvs[g.leader()].Service().MetaStatus(); len(st.Members) != 3 || slices.ContainsFunc(st.Members, func(m metaapi.MetaMember) bool { return m.Learner }) {
		t.Fatalf("members at the end: %+v, want three voters", st.Members)
	}
	g.handOver(f)
	fc, err := metaapi.NewClient(g.addrs[f], metaapi.ClientOptions{Attempts: 1})
	mustNo(t, err)
	for _, k := range keys {
		if _, err := fc.GetKey(bg, "snapb", k); err != nil {
			t.Fatalf("get %s from the caught-up member: %v", k, err)
		}
	}
	putKeys(t, fc, "snapb", "after-", 5)
}

// TestLostMemberRejoinsFromSnapshot: a member whose directory is deleted
// is removed and comes back empty under a new ID (admin meta remove, add,
// --join); the leader's log is compacted past anything it has, so it
// receives a snapshot stream, installs it, catches up and, made the
// leader, serves every key. Without the snapshot path the member fails
// at the leader's MsgSnap and never catches up.
func TestLostMemberRejoinsFromSnapshot(t *testing.T) {
	g := newRGroupWith(t, 3, smallSnapshots)
	ld := g.leader()
	g.dns()
	_, err := g.cl.CreateBucket(bg, "snapb")
	mustNo(t, err)
	keys := putKeys(t, g.cl, "snapb", "before-", 30)
	f := (ld + 1) % 3
	g.stop(f)
	mustNo(t, os.RemoveAll(g.dirs[f]))
	keys = append(keys, putKeys(t, g.cl, "snapb", "while-down-", 30)...)
	if _, err := g.cl.ChangeMembers(bg, metaapi.MemberChange{Op: "remove", ID: uint64(f + 1)}); err != nil {
		t.Fatalf("remove member %d: %v", f+1, err)
	}
	lr := g.srvs[ld].Service().rep
	first, err := lr.WAL.FirstIndex(raftgroup.WALGroup)
	mustNo(t, err)
	if first <= 2 || lr.SnapIndex.Load() == 0 {
		t.Fatalf("leader's log starts at %d, latest snapshot %d: want it compacted behind a snapshot", first, lr.SnapIndex.Load())
	}
	n := g.addMember(g.dirs[f])
	nr := g.srvs[n].Service().rep
	waitFor(t, "the new member caught up", func() bool {
		return nr.Installed.Load() >= 1 && nr.Applied.Load() >= lr.Applied.Load()
	})
	st := g.srvs[n].Service().MetaStatus()
	if st.SnapshotIndex == 0 || len(st.Members) != 3 {
		t.Fatalf("caught-up member's status %+v: want a snapshot index and 3 members", st)
	}
	// It serves: leadership handed to it, every key read through it alone.
	g.handOver(n)
	fc, err := metaapi.NewClient(g.addrs[n], metaapi.ClientOptions{Attempts: 1})
	mustNo(t, err)
	for _, k := range keys {
		if _, err := fc.GetKey(bg, "snapb", k); err != nil {
			t.Fatalf("get %s from the caught-up member: %v", k, err)
		}
	}
	putKeys(t, fc, "snapb", "after-", 5)
}

// TestSnapshotStreamRoundTripAndCorruption: a checkpoint streamed and
// received is the same store; a flipped byte anywhere in the stream is
// refused (checksum), a cut stream too.
func TestSnapshotStreamRoundTripAndCorruption(t *testing.T) {
	fs := vfs.NewMem()
	stream := snapshotStreamOf(t, fs, 9)
	info, err := checkpoint.Read(bytes.NewReader(stream), fs, "/recv", 5)
	idx := info.Index
	mustNo(t, err)
	if idx != 9 {
		t.Fatalf("stream index %d, want 9", idx)
	}
	if got := appliedIndexAt(t, fs, "/recv"); got != 9 {
		t.Fatalf("received store applied to %d, want 9", got)
	}
	if _, err := checkpoint.Read(bytes.NewReader(stream), fs, "/recv-min", 10); err == nil {
		t.Fatal("a stream older than asked for was accepted")
	}
	for _, off := range []int{len(stream) / 3, len(stream) / 2, len(stream) - 6, len(stream) - 1} {
		bad := bytes.Clone(stream)
		bad[off] ^= 0x40
		if _, err := checkpoint.Read(bytes.NewReader(bad), fs, fmt.Sprintf("/bad%d", off), 0); err == nil {
			t.Fatalf("stream with byte %d of %d flipped accepted", off, len(stream))
		}
	}
	if _, err := checkpoint.Read(bytes.NewReader(stream[:len(stream)-2]), fs, "/cut", 0); err == nil {
		t.Fatal("cut stream accepted")
	}
}

// TestSnapshotInstallCrashLeavesOldOrNew: a crash at every file operation
// of receiving and installing a snapshot (each with half of the unsynced
// changes kept at random) leaves, once the store is opened again, the old
// store (applied to 5) or the new one (9), never anything else; the
// install run to its end leaves the new one.
func TestSnapshotInstallCrashLeavesOldOrNew(t *testing.T) {
	stream := snapshotStreamOf(t, vfs.NewMem(), 9)
	const dir = "/m"
	install := func(fs *vfs.MemFS) error {
		if _, err := checkpoint.Read(bytes.NewReader(stream), fs, filepath.Join(dir, state.RecvDirName), 0); err != nil {
			return err
		}
		if err := fs.Rename(filepath.Join(dir, state.RecvDirName), filepath.Join(dir, state.StoreNewName)); err != nil {
			return err
		}
		if err := fs.SyncDir(dir); err != nil {
			return err
		}
		return state.InstallStore(fs, dir)
	}
	crashes := 0
	for k := int64(1); ; k++ {
		fs := vfs.NewMem()
		writeApplied(t, fs, dir, 5)
		fs.CrashAtOp(k, 50, k)
		mustNo(t, install(fs))
		crashed := fs.Crashed()
		if crashed == nil {
			if got := appliedIndexOf(t, fs, dir); got != 9 {
				t.Fatalf("after a whole install the store is applied to %d, want 9", got)
			}
			break
		}
		crashes++
		if got := appliedIndexOf(t, crashed, dir); got != 5 && got != 9 {
			t.Fatalf("crash at operation %d: store applied to %d, want 5 (old) or 9 (new)", k, got)
		}
	}
	if crashes < 10 {
		t.Fatalf("only %d crash points", crashes)
	}
}

// writeApplied makes a store in dir whose applied state is at index,
// synced, closed.
func writeApplied(t *testing.T, fs vfs.FS, dir string, index uint64) {
	t.Helper()
	db, err := state.OpenStore(fs, dir, quiet)
	mustNo(t, err)
	mustNo(t, db.Set(raftgroup.AppliedKey, raftgroup.AppliedState{Index: index, Term: 2, Seq: 3}.Encode(), pebble.Sync))
	mustNo(t, db.Set([]byte("bfiller"), bytes.Repeat([]byte{7}, 10000), pebble.Sync))
	mustNo(t, db.Close())
}

// appliedIndexOf reads the applied index of the store of a meta Dir
// (opened as Open does: an interrupted install settled first).
func appliedIndexOf(t *testing.T, fs vfs.FS, dir string) uint64 {
	t.Helper()
	db, err := state.OpenStore(fs, dir, quiet)
	mustNo(t, err)
	defer mustClose(t, db)
	st, _, _, err := raftgroup.ReadState(db)
	mustNo(t, err)
	return st.Index
}

// appliedIndexAt reads the applied index of the Pebble store in dbDir.
func appliedIndexAt(t *testing.T, fs vfs.FS, dbDir string) uint64 {
	t.Helper()
	db, err := pebble.Open(dbDir, &pebble.Options{FS: vfs.ToPebble(fs), Logger: state.PebbleLogger{L: quiet}})
	mustNo(t, err)
	defer mustClose(t, db)
	st, _, _, err := raftgroup.ReadState(db)
	mustNo(t, err)
	return st.Index
}

// snapshotStreamOf is the stream of a checkpoint of a store applied to
// index.
func snapshotStreamOf(t *testing.T, fs vfs.FS, index uint64) []byte {
	t.Helper()
	writeApplied(t, fs, "/src", index)
	db, err := state.OpenStore(fs, "/src", quiet)
	mustNo(t, err)
	mustNo(t, db.Checkpoint("/ckpt", pebble.WithFlushedWAL()))
	mustNo(t, db.Close())
	var buf bytes.Buffer
	_, err = checkpoint.Write(&buf, fs, "/ckpt", index)
	mustNo(t, err)
	return buf.Bytes()
}

// TestMembersChangeWhileClientsPut: four clients put keys the whole time
// while a fourth member is added (it catches up) and the first member
// (the leader or not) removed and stopped; every acknowledged put reads
// back, and the group ends with members 2, 3, 4.
func TestMembersChangeWhileClientsPut(t *testing.T) {
	g := newRGroupWith(t, 3, smallSnapshots)
	g.leader()
	g.dns()
	_, err := g.cl.CreateBucket(bg, "members")
	mustNo(t, err)
	const clients, maxPuts = 4, 2000
	// The clients know the fourth member's address from the start (a
	// client follows the leader among the addresses it was given).
	ln4, err := net.Listen("tcp", "127.0.0.1:0")
	mustNo(t, err)
	addrs := strings.Join(append(slices.Clone(g.addrs), ln4.Addr().String()), ",")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	acked := make([][]string, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := metaapi.NewClient(addrs, metaapi.ClientOptions{Timeout: 5 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			for i := range maxPuts {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("c%d-%04d", c, i)
				if put(bg, cl, "members", k, 100) == nil {
					acked[c] = append(acked[c], k)
				}
			}
		}()
	}
	// Each step waits for 40 more entries applied on the leader (the
	// clients' puts: nothing else writes).
	progress := func(what string) {
		t.Helper()
		before := int(g.srvs[g.leader()].Service().rep.Applied.Load())
		waitFor(t, what, func() bool {
			for _, s := range g.srvs {
				if s != nil && s.Service().Serving() {
					return int(s.Service().rep.Applied.Load()) >= before+40
				}
			}
			return false
		})
	}
	progress("puts before the changes")
	n := g.addMemberOn(ln4, filepath.Join(t.TempDir(), "meta4"))
	nr := g.srvs[n].Service().rep
	waitFor(t, "member 4 caught up", func() bool {
		l := g.srvs[g.leader()].Service().rep
		return nr.Applied.Load() > 0 && nr.Applied.Load()+50 >= l.Applied.Load()
	})
	progress("puts with four members")
	if _, err := g.cl.ChangeMembers(bg, metaapi.MemberChange{Op: "remove", ID: 1}); err != nil {
		t.Fatalf("remove member 1: %v", err)
	}
	waitFor(t, "member 1 knows it was removed", func() bool { return g.srvs[0].Service().MetaStatus().Role == "removed" })
	g.stop(0)
	progress("puts after member 1 left")
	close(stop)
	wg.Wait()
	st := g.srvs[g.leader()].Service().MetaStatus()
	var ids []uint64
	for _, m := range st.Members {
		ids = append(ids, m.ID)
	}
	if fmt.Sprint(ids) != "[2 3 4]" {
		t.Fatalf("members %v, want [2 3 4]", ids)
	}
	total := 0
	cl, err := metaapi.NewClient(addrs, metaapi.ClientOptions{})
	mustNo(t, err)
	for c := range clients {
		for _, k := range acked[c] {
			if _, err := cl.GetKey(bg, "members", k); err != nil {
				t.Fatalf("acknowledged put %s: %v", k, err)
			}
			total++
		}
	}
	t.Logf("%d acknowledged puts, all read back", total)
}
