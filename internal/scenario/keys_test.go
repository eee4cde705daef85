package scenario

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/teragen"
)

// The plan covers every row once, in row order by key name, in contiguous
// shares per writer, with keys of about the key size.
func TestPlanTeraGen(t *testing.T) {
	for _, tc := range []struct {
		rows     uint64
		writers  int
		keyBytes int64
		keys     int
	}{
		{107374182, 2, 1 << 30, 10}, // 10 GiB, 2 writers: 5 keys each, none of one row
		{107374182, 16, 1 << 30, 16},
		{1000, 3, 100 * 100, 12}, // 333/334 rows a writer: 4 keys each
		{5, 8, 1 << 30, 5},       // more writers than rows: some write nothing
		{1, 1, 100, 1},
	} {
		plan := planTeraGen(tc.rows, tc.writers, tc.keyBytes, "p/")
		next := uint64(0)
		var names []string
		keys := 0
		for w, ks := range plan {
			for _, k := range ks {
				if k.first != next || k.rows == 0 {
					t.Fatalf("%+v: writer %d key %s starts at %d with %d rows, want start %d", tc, w, k.name, k.first, k.rows, next)
				}
				if int64(k.rows-1)*teragen.RowSize >= tc.keyBytes {
					t.Errorf("%+v: key %s has %d rows, over %d bytes by more than a row", tc, k.name, k.rows, tc.keyBytes)
				}
				next += k.rows
				names = append(names, k.name)
				keys++
			}
		}
		if next != tc.rows || keys != tc.keys {
			t.Errorf("%+v: %d rows in %d keys, want %d in %d", tc, next, keys, tc.rows, tc.keys)
		}
		for i := 1; i < len(names); i++ {
			if names[i-1] >= names[i] || !strings.HasPrefix(names[i], "p/part-m-") {
				t.Errorf("key names out of order: %s, %s", names[i-1], names[i])
			}
		}
	}
}

func TestTeraGenConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  TeraGenConfig
		want string
	}{
		{TeraGenConfig{SizeBytes: 99}, "at least one row"},
		{TeraGenConfig{SizeBytes: 1000, Writers: -1}, "writers"},
		{TeraGenConfig{SizeBytes: 1000, Writers: MaxTeraGenWriters + 1}, "writers"},
		{TeraGenConfig{SizeBytes: 1000, KeyBytes: 50}, "key size"},
		{TeraGenConfig{SizeBytes: 1 << 40, KeyBytes: 100}, "keys"},
	} {
		if err := tc.cfg.defaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
}

// Values stream without being held, differ per key, and the checker finds
// a changed byte at its offset.
func TestValueReaderAndChecker(t *testing.T) {
	const size = 3*patternBytes + 777
	read := func(i int, bufSize int) []byte {
		var out bytes.Buffer
		r := newValueReader(i, size)
		buf := make([]byte, bufSize)
		for range size + 1 {
			n, err := r.Read(buf)
			out.Write(buf[:n])
			if err == io.EOF {
				break
			}
		}
		return out.Bytes()
	}
	a, b := read(1, 4096), read(1, 1<<20+3)
	if len(a) != size || !bytes.Equal(a, b) {
		t.Fatalf("value 1 depends on the read size (%d, %d bytes)", len(a), len(b))
	}
	if bytes.Equal(a[:4096], read(2, 4096)[:4096]) {
		t.Fatal("values 1 and 2 start alike")
	}
	c := newValueChecker(1)
	for off := 0; off < len(a); off += 65536 {
		if _, err := c.Write(a[off:min(off+65536, len(a))]); err != nil {
			t.Fatalf("checker refused the value: %v", err)
		}
	}
	if c.n != size {
		t.Fatalf("checked %d bytes", c.n)
	}
	bad := bytes.Clone(a)
	bad[2*patternBytes+5] ^= 1
	c = newValueChecker(1)
	_, err := c.Write(bad)
	if !errors.Is(err, errValueMismatch) || !strings.Contains(err.Error(), "offset 2097183") {
		t.Fatalf("changed byte: %v", err)
	}
	if n, err := newValueReader(0, 0).Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Errorf("empty value: %d, %v", n, err)
	}
}

func TestKeyBenchConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  KeyBenchConfig
		want string
	}{
		{KeyBenchConfig{Keys: -1}, "keys"},
		{KeyBenchConfig{SizeBytes: -1}, "size"},
		{KeyBenchConfig{Concurrency: -2}, "concurrency"},
		{KeyBenchConfig{Duration: -1}, "duration"},
	} {
		if err := tc.cfg.defaults("key-write"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
	c := KeyBenchConfig{}
	if err := c.defaults("key-write"); err != nil || c.Keys != 1000 || c.Concurrency != 16 || c.Bucket != "bench" || !strings.HasPrefix(c.Prefix, "key-write-") {
		t.Errorf("defaults %+v, %v", c, err)
	}
}
