package ecmeta_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/meta/ecmeta"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestRecordRoundTrip(t *testing.T) {
	r := ecmeta.Record{Container: 7, Converted: time.UnixMilli(1234), Policy: "rs-3-2", Logical: 30, Nodes: []uint64{1, 2, 3, 4, 5},
		Blocks: []ecapi.Block{{Local: 1, Offset: 0, Length: 10, CRC32C: 9}, {Local: 3, Offset: 10, Length: 20, CRC32C: 8}}}
	b := r.Encode()
	got, err := ecmeta.DecodeRecord(b)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(r) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 1
		if _, err := ecmeta.DecodeRecord(c); !errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	bad := r
	bad.Nodes = []uint64{1, 2, 3, 4, 4}
	if _, err := ecmeta.DecodeRecord(bad.Encode()); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("two shards on one datanode decoded: %v", err)
	}
}

// TestPolicies: the default, a bucket's own, its tag; a coded policy the
// cluster has too few datanodes for is refused, clearly.
func TestPolicies(t *testing.T) {
	srv, err := meta.Start(state.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	mc, err := metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := mc.CreateBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	if p, err := ecapi.GetBucket(ctx, mc, "bkt"); err != nil || p.Policy != "rep3" || p.Source != "" {
		t.Fatalf("a new bucket: %+v %v", p, err)
	}
	err = ecapi.SetBucket(ctx, mc, "bkt", "rs-3-2")
	if !errors.Is(err, metaapi.ErrInvalid) || !contains(err.Error(), "5 shards on 5 different datanodes; the cluster has 0") {
		t.Fatalf("rs-3-2 with no datanode: %v", err)
	}
	for i := range 5 {
		if _, err := mc.Heartbeat(ctx, &metaapi.Heartbeat{UUID: fmt.Sprintf("00000000-0000-4000-8000-00000000000%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1000+i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ecapi.SetBucket(ctx, mc, "bkt", "rs-6-3"); !errors.Is(err, metaapi.ErrInvalid) {
		t.Fatalf("rs-6-3 with 5 datanodes: %v", err)
	}
	if err := ecapi.SetBucket(ctx, mc, "bkt", "rs-3-2,cell=256KiB,min-age=1h"); err != nil {
		t.Fatal(err)
	}
	if p, err := ecapi.GetBucket(ctx, mc, "bkt"); err != nil || p.Policy != "rs-3-2,cell=262144,min-age=1h0m0s" || p.Source != "bucket" {
		t.Fatalf("bucket's own: %+v %v", p, err)
	}
	if err := ecapi.SetDefault(ctx, mc, "rs-3-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.CreateBucket(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if p, err := ecapi.GetBucket(ctx, mc, "other"); err != nil || p.Policy != "rs-3-2" || p.Source != "default" {
		t.Fatalf("default: %+v %v", p, err)
	}
	if err := s3meta.PutBucketConf(ctx, mc, "other", s3meta.ConfTagging, []byte(s3meta.EncodeTags(map[string]string{ecapi.TagName: "rep3"}))); err != nil {
		t.Fatal(err)
	}
	if p, err := ecapi.GetBucket(ctx, mc, "other"); err != nil || p.Policy != "rep3" || p.Source != "tag" {
		t.Fatalf("tag: %+v %v", p, err)
	}
	if err := ecapi.SetBucket(ctx, mc, "bkt", ""); err != nil {
		t.Fatal(err)
	}
	if p, err := ecapi.GetBucket(ctx, mc, "bkt"); err != nil || p.Source != "default" {
		t.Fatalf("bucket's own removed: %+v %v", p, err)
	}
	if err := ecapi.SetDefault(ctx, mc, "rs-4-2"); !errors.Is(err, metaapi.ErrInvalid) {
		t.Fatalf("an unknown policy: %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// FuzzDecodeRecord: whatever the bytes, DecodeRecord does not panic, and
// what it accepts encodes back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(ecmeta.Record{Container: 7, Converted: time.UnixMilli(1234), Policy: "rs-3-2", Logical: 30, Nodes: []uint64{1, 2, 3, 4, 5},
		Blocks: []ecapi.Block{{Local: 1, Offset: 0, Length: 10, CRC32C: 9}, {Local: 3, Offset: 10, Length: 20, CRC32C: 8}}}.Encode())
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ecmeta.DecodeRecord(b)
		if err != nil {
			return
		}
		if got := r.Encode(); !bytes.Equal(got, b) {
			t.Fatalf("decoded %+v encodes to %x, was %x", r, got, b)
		}
	})
}

// TestWorkBoundToCertificate: over TLS a datanode asks for its own
// erasure-coding work and reports its own conversions only: another
// datanode's certificate is refused (FORBIDDEN), as for heartbeats.
func TestWorkBoundToCertificate(t *testing.T) {
	pki, err := tlsconf.EnsureLocal(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := tlsconf.LoadCA(filepath.Join(pki.Dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	issue := func(name string, r tlsconf.Role) *tlsconf.Settings {
		c, k, err := ca.Issue(tlsconf.IssueRequest{Name: name, Role: r, Hosts: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		cp, kp, err := tlsconf.WritePair(certDir, name, c, k)
		if err != nil {
			t.Fatal(err)
		}
		s, err := tlsconf.NewSettings(tlsconf.Files{Cert: cp, Key: kp, CA: pki.CA})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	srv, err := meta.Start(state.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1, Logger: quiet, TLS: issue("meta-1", tlsconf.RoleMeta)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx := context.Background()
	clients := map[string]*metaapi.Client{}
	ids := map[string]uint64{}
	for i, name := range []string{"dn-a", "dn-b"} {
		mc, err := metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{TLS: issue(name, tlsconf.RoleDatanode), Timeout: 5 * time.Second, Attempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := mc.Heartbeat(ctx, &metaapi.Heartbeat{UUID: fmt.Sprintf("00000000-0000-4000-8000-00000000000%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1000+i)})
		if err != nil {
			t.Fatal(err)
		}
		clients[name], ids[name] = mc, resp.NodeID
	}
	if _, err := ecapi.GetWork(ctx, clients["dn-a"], ecapi.WorkRequest{Node: ids["dn-a"]}); err != nil {
		t.Fatalf("a datanode's own work: %v", err)
	}
	if _, err := ecapi.GetWork(ctx, clients["dn-b"], ecapi.WorkRequest{Node: ids["dn-a"]}); !errors.Is(err, metaapi.ErrForbidden) {
		t.Fatalf("dn-b asking for dn-a's work: %v, want forbidden", err)
	}
	rep := ecapi.Converted{Node: ids["dn-a"], Container: 1, Policy: "rs-3-2", Nodes: []uint64{1, 2, 3, 4, 5}}
	if err := ecapi.ReportConverted(ctx, clients["dn-b"], rep); !errors.Is(err, metaapi.ErrForbidden) {
		t.Fatalf("dn-b reporting dn-a's conversion: %v", err)
	}
}

// TestReportsNeedWorkInFlight: a conversion or rebuild report the meta
// service did not schedule (this leader term) is refused, so that a shard
// dropped as a leftover is never named afterwards; a leftover shard and
// a quarantined copy no record names are listed to drop; the status of a
// cluster without EC containers is empty.
func TestReportsNeedWorkInFlight(t *testing.T) {
	srv, err := meta.Start(state.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	mc, err := metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{Timeout: 5 * time.Second, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []uint64
	for i := range 5 {
		resp, err := mc.Heartbeat(ctx, &metaapi.Heartbeat{UUID: fmt.Sprintf("00000000-0000-4000-8000-00000000000%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1000+i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.NodeID)
	}
	rep := ecapi.Converted{Node: ids[0], Container: 1, Policy: "rs-3-2", Nodes: ids}
	if err := ecapi.ReportConverted(ctx, mc, rep); !errors.Is(err, metaapi.ErrInvalid) {
		t.Fatalf("a conversion not in flight reported: %v, want invalid", err)
	}
	rb := ecapi.Rebuilt{Node: ids[1], ShardRef: ecapi.ShardRef{Container: 1, Index: 2}}
	if err := ecapi.ReportRebuilt(ctx, mc, rb); !errors.Is(err, metaapi.ErrInvalid) {
		t.Fatalf("a rebuild not in flight reported: %v, want invalid", err)
	}
	st, err := ecapi.GetStatus(ctx, mc)
	if err != nil || st.Coded != 0 || len(st.Repairs) != 0 || st.ShardsMissing != 0 {
		t.Fatalf("status: %+v %v", st, err)
	}
	// A leftover shard of a container no conversion is running for is
	// listed to drop (with its mtime), one of a coded container's too.
	w, err := ecapi.GetWork(ctx, mc, ecapi.WorkRequest{Node: ids[0], Inventory: true,
		Shards: []ecapi.HeldShard{{ShardRef: ecapi.ShardRef{Container: 9, Index: 1}, MTime: 77}}})
	if err != nil || len(w.DropShards) != 1 || w.DropShards[0].MTime != 77 {
		t.Fatalf("work with a leftover shard: %+v %v", w, err)
	}
	// A quarantined copy of a shard no record names on the node (rebuilt
	// elsewhere) is listed to drop.
	w, err = ecapi.GetWork(ctx, mc, ecapi.WorkRequest{Node: ids[0], Inventory: true,
		Quarantined: []ecapi.ShardRef{{Container: 9, Index: 2}}})
	if err != nil || len(w.DropQuarantined) != 1 || w.DropQuarantined[0] != (ecapi.ShardRef{Container: 9, Index: 2}) {
		t.Fatalf("work with a quarantined shard no record names: %+v %v", w, err)
	}
}

// TestCompactedNeedsCompactionInFlight: a compaction report the meta
// service did not schedule is refused (the record keeps its generation);
// a stored shard of another generation than the record's is listed to
// drop, the record's own is not; the status shows the container's
// generation and bytes.
func TestCompactedNeedsCompactionInFlight(t *testing.T) {
	srv, err := meta.Start(state.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	mc, err := metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{Timeout: 5 * time.Second, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	svc := srv.Service()
	rec := ecmeta.Record{Container: 4, Generation: 2, Converted: time.UnixMilli(1), Policy: "rs-3-2", Logical: 30, Nodes: []uint64{1, 2, 3, 4, 5},
		Blocks: []ecapi.Block{{Local: 1, Length: 10, CRC32C: 9}, {Local: 3, Offset: 10, Length: 20, CRC32C: 8}}}
	if _, err := state.Mutate(svc.State, func() (struct{}, *pebble.Batch, error) {
		b := svc.Store.NewBatch()
		state.Set(b, ecmeta.ContainerKey(4), rec.Encode())
		return struct{}{}, b, nil
	}); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for i := range 5 {
		resp, err := mc.Heartbeat(ctx, &metaapi.Heartbeat{UUID: fmt.Sprintf("00000000-0000-4000-8000-00000000000%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1000+i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.NodeID)
	}
	if !slices.Equal(ids, rec.Nodes) {
		t.Skipf("node IDs %v, the record names %v", ids, rec.Nodes)
	}
	rep := ecapi.Compacted{Node: ids[0], Container: 4, From: 2, Generation: 3, Logical: 10, Nodes: ids, Blocks: []ecapi.Block{{Local: 1, Length: 10, CRC32C: 9}}}
	if err := ecapi.ReportCompacted(ctx, mc, rep); !errors.Is(err, metaapi.ErrInvalid) {
		t.Fatalf("a compaction not in flight reported: %v, want invalid", err)
	}
	l, err := ecapi.GetLayout(ctx, mc, 4)
	if err != nil || l.Generation != 2 || l.Logical != 30 || len(l.Blocks) != 2 {
		t.Fatalf("layout after a refused report: %+v %v", l, err)
	}
	w, err := ecapi.GetWork(ctx, mc, ecapi.WorkRequest{Node: ids[0], Inventory: true, Shards: []ecapi.HeldShard{
		{ShardRef: ecapi.ShardRef{Container: 4, Generation: 2, Index: 0}, MTime: 5},
		{ShardRef: ecapi.ShardRef{Container: 4, Generation: 1, Index: 0}, MTime: 6},
		{ShardRef: ecapi.ShardRef{Container: 4, Generation: 3, Index: 0}, MTime: 7},
	}})
	if err != nil || len(w.DropShards) != 2 || w.DropShards[0].Generation == 2 || w.DropShards[1].Generation == 2 {
		t.Fatalf("work with shards of three generations: %+v %v", w, err)
	}
	st, err := ecapi.GetStatus(ctx, mc)
	if err != nil || len(st.Containers) != 1 || st.Containers[0].Generation != 2 || st.Containers[0].Logical != 30 || st.Containers[0].DeadBytes != 0 ||
		st.CompactionsDone != 0 || len(st.Compactions) != 0 {
		t.Fatalf("status: %+v %v", st, err)
	}
}
