package ec

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/units"
)

// Spec is a policy as an operator names it for a bucket or the cluster:
// the policy with its cell size, and when a CLOSED container becomes
// eligible for conversion (its age since creation at least MinAge and its
// bytes at least MinBytes; zero: no bound).
type Spec struct {
	Policy
	MinAge   time.Duration
	MinBytes int64
}

// MaxSpecBytes bounds a spec's text.
const MaxSpecBytes = 256

// ParseSpec reads a spec: a policy name (rep3, rs-3-2, rs-6-3, rs-10-4),
// then optional comma-separated settings cell=SIZE (a multiple of 16 KiB,
// default 1 MiB), min-age=DURATION and min-bytes=SIZE, e.g.
// "rs-6-3,cell=512KiB,min-age=1h". rep3 takes no settings.
func ParseSpec(text string) (Spec, error) {
	if len(text) > MaxSpecBytes {
		return Spec{}, fmt.Errorf("ec: policy spec of %d bytes, at most %d", len(text), MaxSpecBytes)
	}
	parts := strings.Split(strings.TrimSpace(text), ",")
	p, err := ParsePolicy(strings.TrimSpace(parts[0]))
	if err != nil {
		return Spec{}, err
	}
	s := Spec{Policy: p}
	if !p.Coded() && len(parts) > 1 {
		return Spec{}, fmt.Errorf("ec: %q: rep3 takes no settings", text)
	}
	seen := map[string]bool{}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || seen[k] {
			return Spec{}, fmt.Errorf("ec: %q: want NAME=VALUE once each (cell, min-age, min-bytes), got %q", text, kv)
		}
		seen[k] = true
		switch k {
		case "cell":
			n, err := units.ParseBytes(v)
			if err != nil || n > MaxCellBytes {
				return Spec{}, fmt.Errorf("ec: cell=%s: want a size up to %d bytes", v, MaxCellBytes)
			}
			s.CellBytes = int(n)
		case "min-age":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return Spec{}, fmt.Errorf("ec: min-age=%s: want a duration ≥ 0", v)
			}
			s.MinAge = d
		case "min-bytes":
			n, err := units.ParseBytes(v)
			if err != nil || n > 1<<50 {
				return Spec{}, fmt.Errorf("ec: min-bytes=%s: want a size", v)
			}
			s.MinBytes = int64(n)
		default:
			return Spec{}, fmt.Errorf("ec: %q: unknown setting %q (cell, min-age, min-bytes)", text, k)
		}
	}
	if p.Coded() {
		if err := s.Validate(); err != nil {
			return Spec{}, err
		}
	}
	return s, nil
}

// String is the spec's canonical text (ParseSpec reads it back): the name,
// then the settings that differ from their defaults.
func (s Spec) String() string {
	if !s.Coded() {
		return "rep3"
	}
	b := strings.Builder{}
	b.WriteString(s.Name)
	if s.CellBytes != DefaultCellBytes {
		b.WriteString(",cell=" + strconv.Itoa(s.CellBytes))
	}
	if s.MinAge > 0 {
		b.WriteString(",min-age=" + s.MinAge.String())
	}
	if s.MinBytes > 0 {
		b.WriteString(",min-bytes=" + strconv.FormatInt(s.MinBytes, 10))
	}
	return b.String()
}

// ShardInfo is what a shard's header says.
type ShardInfo struct {
	Policy     Policy
	Index      int
	Container  uint64
	Generation uint32
	Logical    int64
}

// VerifyShard reads a whole shard of size bytes from r and checks its
// header, its checksum table and every 16 KiB of its cells against the
// table: what a datanode does before it keeps a shard it received.
func VerifyShard(r io.ReaderAt, size int64) (ShardInfo, error) {
	hb := make([]byte, headerBytes)
	if _, err := r.ReadAt(hb, 0); err != nil {
		return ShardInfo{}, fmt.Errorf("ec: read the shard header: %w", err)
	}
	h, err := decodeHeader(hb)
	if err != nil {
		return ShardInfo{}, err
	}
	if want := headerBytes + h.shardBytes + h.tableBytes(); size != want {
		return ShardInfo{}, fmt.Errorf("%w: shard of %d bytes, its header says %d", ErrCorrupt, size, want)
	}
	crcs, err := readTable(r, h)
	if err != nil {
		return ShardInfo{}, err
	}
	buf := make([]byte, 64*ChunkBytes)
	for off := int64(0); off < h.shardBytes; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), h.shardBytes-off)]
		if _, err := r.ReadAt(b, headerBytes+off); err != nil {
			return ShardInfo{}, fmt.Errorf("ec: read shard %d at %d: %w", h.index, off, err)
		}
		for k := 0; k < len(b); k += ChunkBytes {
			if crc32c.Checksum(b[k:k+ChunkBytes]) != crcs[(off+int64(k))/ChunkBytes] {
				return ShardInfo{}, fmt.Errorf("%w: shard %d of container %d: chunk at %d", ErrCorrupt, h.index, h.container, off+int64(k))
			}
		}
	}
	return ShardInfo{Policy: Policy{Data: h.data, Parity: h.parity, CellBytes: h.cellBytes}, Index: h.index, Container: h.container, Generation: h.generation, Logical: h.logical}, nil
}
