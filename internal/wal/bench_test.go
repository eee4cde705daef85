package wal

import (
	"fmt"
	"os"
	"testing"
)

// BenchmarkAppendSync appends batches of 100-byte entries and waits for
// each batch to be durable, on the OS filesystem in os.TempDir(): one
// write and one fdatasync per batch (rolls aside). records/s and
// fdatasync/op are reported; compare batch sizes to see what group commit
// buys on the device holding $TMPDIR.
func BenchmarkAppendSync(b *testing.B) {
	for _, batch := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			dir, err := os.MkdirTemp(os.TempDir(), "spindle-wal-bench-*")
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := os.RemoveAll(dir); err != nil {
					b.Error(err)
				}
			}()
			l, err := Open(Config{Dir: dir, Logger: quietLogger})
			if err != nil {
				b.Fatal(err)
			}
			defer closeT(b, l)
			payload := make([]byte, 100)
			for i := range payload {
				payload[i] = byte(i)
			}
			recs := make([]Record, batch)
			next := uint64(1)
			const compactEveryRecords = 1 << 16 // bounds the index, cache and disk use
			compacted := uint64(0)
			before := l.Stats()
			b.SetBytes(int64(batch * len(payload)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range recs {
					recs[j] = EntryRecord(1, 1, next, 0, payload)
					next++
				}
				seq, err := l.Append(recs...)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.WaitDurable(seq); err != nil {
					b.Fatal(err)
				}
				if next-compacted > compactEveryRecords {
					compacted = next - 1
					if err := l.Compact(1, compacted); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			st := l.Stats()
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(st.SyncDatas-before.SyncDatas)/float64(b.N), "fdatasync/op")
		})
	}
}
