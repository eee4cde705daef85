package ec

import (
	"fmt"
	"strings"
)

// ChunkBytes is the unit of a shard's checksums: every 16 KiB of a
// shard's cells has its CRC32C.
const ChunkBytes = 16 << 10

// DefaultCellBytes is a cell's size unless a policy says otherwise.
const DefaultCellBytes = 1 << 20

// MaxCellBytes bounds a cell (a stripe is k cells in memory at once).
const MaxCellBytes = 16 << 20

// Policy is how a container is kept: replicated (Data == 0, "rep3") or
// Reed-Solomon with Data data and Parity parity shards of CellBytes cells.
type Policy struct {
	Name         string
	Data, Parity int
	CellBytes    int
}

// Policies are the erasure-coding policies Spindle offers (with rep3, the
// replicated default): name → data, parity shards.
var Policies = map[string][2]int{"rs-3-2": {3, 2}, "rs-6-3": {6, 3}, "rs-10-4": {10, 4}}

// ParsePolicy reads a policy name: rep3, rs-3-2, rs-6-3 or rs-10-4.
func ParsePolicy(name string) (Policy, error) {
	if name == "rep3" {
		return Policy{Name: name}, nil
	}
	km, ok := Policies[name]
	if !ok {
		return Policy{}, fmt.Errorf("ec: policy %q: want rep3, rs-3-2, rs-6-3 or rs-10-4", name)
	}
	return Policy{Name: name, Data: km[0], Parity: km[1], CellBytes: DefaultCellBytes}, nil
}

// Shards is the number of shards (k+m; 0 for a replicated policy).
func (p Policy) Shards() int { return p.Data + p.Parity }

// Coded says the policy erasure-codes.
func (p Policy) Coded() bool { return p.Data > 0 }

// Validate checks a coded policy's shape.
func (p Policy) Validate() error {
	switch {
	case p.Data < 1 || p.Parity < 1 || p.Data+p.Parity > 256:
		return fmt.Errorf("ec: %d data and %d parity shards: want at least 1 of each, at most 256 in all", p.Data, p.Parity)
	case p.CellBytes < ChunkBytes || p.CellBytes > MaxCellBytes || p.CellBytes%ChunkBytes != 0:
		return fmt.Errorf("ec: cell of %d bytes: want a multiple of %d up to %d", p.CellBytes, ChunkBytes, MaxCellBytes)
	}
	return nil
}

// StripeBytes is the logical bytes of one stripe.
func (p Policy) StripeBytes() int64 { return int64(p.Data) * int64(p.CellBytes) }

// ShardDataBytes is the bytes of cells each shard holds for a container
// of logical bytes.
func (p Policy) ShardDataBytes(logical int64) int64 {
	stripes := (logical + p.StripeBytes() - 1) / p.StripeBytes()
	return stripes * int64(p.CellBytes)
}

// RawOverLogical is the policy's space cost: shard bytes over logical.
func (p Policy) RawOverLogical() float64 {
	if !p.Coded() {
		return 3
	}
	return float64(p.Shards()) / float64(p.Data)
}

func (p Policy) String() string {
	if p.Name != "" && !strings.HasPrefix(p.Name, "rs-") || !p.Coded() {
		return p.Name
	}
	return fmt.Sprintf("rs-%d-%d/%dKiB", p.Data, p.Parity, p.CellBytes>>10)
}
