package meta

import (
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestRetriedCommitAnswersTheFirstResult: a commit retried with its
// commit ID after another client replaced the key (and after a delete) is
// answered with the version the first try committed, changes nothing, and
// is not refused as INVALID (which it is without the ID: its blocks are
// consumed); it is forgotten after CommitIDRetention.
func TestRetriedCommitAnswersTheFirstResult(t *testing.T) {
	clk := newClock()
	c := newCluster(t, testConfig(t.TempDir(), clk), clk, 3)
	s := c.s
	must[*metaapi.Bucket](t)(s.CreateBucket("bkt"))
	alloc := func(key string) metaapi.KeyBlock {
		a := must[*metaapi.AllocateResponse](t)(s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: key}))
		c.write(a.Pipeline, a.Block.Container, 100)
		return metaapi.KeyBlock{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: 100}
	}
	first := metaapi.CommitKey{Size: 100, CRC32C: 1, Blocks: []metaapi.KeyBlock{alloc("k")}, CommitID: "id-1"}
	ki := must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k", &first))
	// Another client replaces the key.
	other := must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k", &metaapi.CommitKey{Size: 100, CRC32C: 2, Blocks: []metaapi.KeyBlock{alloc("k")}, CommitID: "id-2"}))
	deletes := s.NDeletes
	retry := first
	again, err := s.CommitKey("bkt", "k", &retry)
	if err != nil {
		t.Fatalf("commit retried after the key was replaced: %v", err)
	}
	if again.CRC32C != 1 || again.Blocks[0].BlockRef != first.Blocks[0].BlockRef || !again.Created.Equal(ki.Created) {
		t.Fatalf("retried commit answered %+v, want the first commit's version %+v", again, ki)
	}
	if now := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "k")); now.CRC32C != other.CRC32C || s.NDeletes != deletes {
		t.Fatalf("the retry changed the key (%+v) or scheduled deletions (%d, was %d)", now, s.NDeletes, deletes)
	}
	// After a delete too.
	mustNo(t, s.DeleteKey("bkt", "k"))
	if _, err := s.CommitKey("bkt", "k", &retry); err != nil {
		t.Fatalf("commit retried after the key was deleted: %v", err)
	}
	if _, err := s.GetKey("bkt", "k"); err == nil {
		t.Fatal("the retry brought a deleted key back")
	}
	// A first try costs no lookup: a commit whose blocks are claimable
	// commits, whatever its ID (IDs are random: the client's to keep
	// unique).
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k2", &metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{alloc("k2")}, CommitID: "id-3"}))
	// Forgotten after CommitIDRetention: the retry is then refused as
	// any commit of consumed blocks.
	clk.Advance(namespace.CommitIDRetention + time.Second)
	mustNo(t, s.Tick())
	_, err = s.CommitKey("bkt", "k", &retry)
	wantErr(t, err, metaapi.ErrInvalid, "a commit retried after its ID expired")
}
