package meta

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// BenchmarkListVersions is issue 35's listing figure: pages per second of
// ListObjectsV2 (the meta service's key listing, what the gateway's
// ListObjectsV2 pages are) and ListObjectVersions (its version listing),
// 1,000 entries a page, on a bucket of 1,000 keys × 1,000 versions next
// to a bucket of 1,000 keys × 1 version. The versions are written as the
// S3 gateway writes them (commits of a versioned bucket, 64 a batch), in
// a store on /dev/shm when there is one. The ratios (many versions over
// one) are logged: the layout keeps the current versions apart, so a
// listing of keys does not read the old versions, and a listing of
// versions reads them in order. BENCH_VERSIONS sets the versions a key
// of the deep bucket (default 1,000); BENCH_NO_FLUSH=1 leaves what the
// memtable holds there.
func BenchmarkListVersions(b *testing.B) {
	versions := 1000
	if v := os.Getenv("BENCH_VERSIONS"); v != "" {
		if _, err := fmt.Sscan(v, &versions); err != nil {
			b.Fatalf("BENCH_VERSIONS %q: %v", v, err)
		}
	}
	const keys = 1000
	dir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "spindle-bench-versions-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := os.RemoveAll(d); err != nil {
				b.Error(err)
			}
		})
		dir = d
	} else {
		dir = b.TempDir()
	}
	clk := newClock()
	s, err := Open(testConfig(dir, clk))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mustClose(b, s) })
	v := namespace.Versions{Namespace: s.Namespace}
	start := time.Now()
	for _, bk := range []struct {
		name string
		n    int
	}{{"flat", 1}, {"deep", versions}} {
		if _, err := s.CreateBucket(bk.name); err != nil {
			b.Fatal(err)
		}
		if err := v.SetVersioning(bk.name, versionapi.Enabled); err != nil {
			b.Fatal(err)
		}
		value := []byte("v")
		om := &metaapi.ObjectMeta{ETag: "9e3669d19b675bd57058fd4664205d2a", ContentType: "application/octet-stream"}
		var batch []metaapi.BatchedCommit
		flush := func() {
			res, err := s.CommitKeys(batch)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range res {
				if r.Error != nil {
					b.Fatal(r.Error)
				}
			}
			batch = batch[:0]
		}
		for round := range bk.n {
			for k := range keys {
				batch = append(batch, metaapi.BatchedCommit{Bucket: bk.name, Key: fmt.Sprintf("dir/key-%05d", k),
					CommitKey: metaapi.CommitKey{Size: 1, CRC32C: crc32c.Checksum(value), Inline: value, Object: om,
						CommitID: fmt.Sprintf("bench-%s-%d-%d", bk.name, round, k)}})
				if len(batch) == metaapi.MaxCommitBatch {
					flush()
				}
			}
		}
		if len(batch) > 0 {
			flush()
		}
	}
	// A store at rest: what the commits left in the memtable in sstables
	// (a long-running store's bucket is; a memtable's skiplist, written
	// key by key round after round, is iterated out of memory order).
	// BENCH_NO_FLUSH=1 lists right after the writes instead.
	if os.Getenv("BENCH_NO_FLUSH") == "" {
		if err := s.Store.DB.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("wrote %d + %d versions in %v", keys, keys*versions, time.Since(start).Round(time.Millisecond))

	rates := map[string]float64{}
	listKeys := func(bucket string) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				l, err := s.List(bucket, namespace.ListOptions{Limit: 1000})
				if err != nil || len(l.Keys) != keys {
					b.Fatalf("%d keys, %v", len(l.Keys), err)
				}
			}
			rates["keys "+bucket] = float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rates["keys "+bucket], "pages/s")
		}
	}
	listVersions := func(bucket string) func(b *testing.B) {
		return func(b *testing.B) {
			o := versionapi.ListOptions{Limit: 1000}
			for b.Loop() { // page through the bucket, from the start again at its end
				l, err := v.ListVersions(bucket, o)
				if err != nil || len(l.Versions) == 0 {
					b.Fatalf("%d versions, %v", len(l.Versions), err)
				}
				o.KeyMarker, o.VersionIDMarker = l.NextKeyMarker, l.NextVersionIDMarker
			}
			rates["versions "+bucket] = float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rates["versions "+bucket], "pages/s")
		}
	}
	b.Run("ListObjectsV2/1x1000", listKeys("flat"))
	b.Run(fmt.Sprintf("ListObjectsV2/%dx1000", versions), listKeys("deep"))
	b.Run("ListObjectVersions/1x1000", listVersions("flat"))
	b.Run(fmt.Sprintf("ListObjectVersions/%dx1000", versions), listVersions("deep"))
	b.Logf("ratio of the runs above (%d versions a key over 1): ListObjectsV2 %.2f, ListObjectVersions %.2f", versions,
		rates["keys deep"]/rates["keys flat"], rates["versions deep"]/rates["versions flat"])
	// The same, robust to a machine whose load drifts between the runs:
	// one page of each bucket in turn, the median times compared.
	const rounds = 400
	var kf, kd, vf, vd []time.Duration
	var of, od versionapi.ListOptions
	of.Limit, od.Limit = 1000, 1000
	timed := func(to *[]time.Duration, fn func() error) {
		t0 := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		*to = append(*to, time.Since(t0))
	}
	page := func(o *versionapi.ListOptions, bucket string) func() error {
		return func() error {
			l, err := v.ListVersions(bucket, *o)
			if err == nil {
				o.KeyMarker, o.VersionIDMarker = l.NextKeyMarker, l.NextVersionIDMarker
			}
			return err
		}
	}
	for range rounds {
		timed(&kf, func() error { _, err := s.List("flat", namespace.ListOptions{Limit: 1000}); return err })
		timed(&kd, func() error { _, err := s.List("deep", namespace.ListOptions{Limit: 1000}); return err })
		timed(&vf, page(&of, "flat"))
		timed(&vd, page(&od, "deep"))
	}
	b.Logf("interleaved, median page: ListObjectsV2 %v (1 version a key) vs %v (%d): ratio %.2f; ListObjectVersions %v vs %v: ratio %.2f",
		median(kf), median(kd), versions, float64(median(kf))/float64(median(kd)), median(vf), median(vd), float64(median(vf))/float64(median(vd)))
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
