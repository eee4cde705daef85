package metaapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Block-granular damage, the scrubber and repairs (see the meta package
// comment, "Damage").

const (
	// CmdRepairBlocks: the node replaces the bytes of its damaged blocks
	// Blocks of the CLOSED container Container with a copy read from one
	// of Sources (preferred first; each verified against the checksums of
	// this node's record before it replaces anything), then reports the
	// container without those blocks in ContainerReport.DamagedBlocks.
	// Idempotent: a repair of a block already under way or no longer
	// damaged is ignored. Repeated in every heartbeat response while the
	// repair is scheduled.
	CmdRepairBlocks = "repair_blocks"
	// MaxDamagedBlocksReport bounds the damaged blocks of one heartbeat,
	// all containers together (a datanode reports the first ones, by
	// container and block ID; the rest in later heartbeats once those are
	// repaired).
	MaxDamagedBlocksReport = 4096
	// MaxRepairBlocks bounds the blocks of one repair_blocks command.
	MaxRepairBlocks = 64
	// MaxDamagedKeys bounds the keys GET /v1/damaged lists.
	MaxDamagedKeys = 10000
)

// MaxFailedVolumesReport bounds Heartbeat.FailedVolumes.
const MaxFailedVolumesReport = 256

// FailedVolume is a data directory a datanode took out of use.
type FailedVolume struct {
	Dir string `json:"dir"`
	// Reason, at most MaxCopyErrorBytes.
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// ScrubReport is a datanode's scrubber progress (Heartbeat.Scrub): it
// re-verifies the checksums of its CLOSED containers in the background.
type ScrubReport struct {
	// RateBytesPerS is the scrubber's bound (0: disabled).
	RateBytesPerS uint64 `json:"rate_bytes_per_s"`
	// Passes are the complete passes over the node's CLOSED containers.
	Passes uint64 `json:"passes"`
	// ScannedBytes and ScannedBlocks since the datanode started.
	ScannedBytes  uint64 `json:"scanned_bytes"`
	ScannedBlocks uint64 `json:"scanned_blocks"`
	// DamageFound: damaged blocks the scrubber found since the start.
	DamageFound uint64 `json:"damage_found"`
	// Container is the container being scrubbed (0: none, between passes).
	Container uint64 `json:"container,omitempty"`
	// LastPassEnded: the end of the last complete pass (zero: none yet).
	LastPassEnded time.Time `json:"last_pass_ended,omitzero"`
	// RepairedBlocks: blocks repaired on this node (repair_blocks) since
	// the start; RepairFailures the repairs that failed.
	RepairedBlocks uint64 `json:"repaired_blocks,omitempty"`
	RepairFailures uint64 `json:"repair_failures,omitempty"`
}

// DamagedBlock is one damaged block and the nodes whose replica of it is
// damaged.
type DamagedBlock struct {
	Container uint64   `json:"container"`
	Local     uint64   `json:"local"`
	Nodes     []uint64 `json:"nodes"`
}

// DamagedKey is a key holding a lost block: its value cannot be read
// whole. Blocks are its lost blocks.
type DamagedKey struct {
	Bucket string     `json:"bucket"`
	Key    string     `json:"key"`
	Blocks []BlockRef `json:"blocks"`
}

// NodeScrub is one datanode's scrubber report.
type NodeScrub struct {
	NodeID uint64 `json:"node_id"`
	ScrubReport
}

// DamageStatus is GET /v1/damaged: what the datanodes report damaged.
type DamageStatus struct {
	// Lost: blocks damaged on every replica the meta service can count (no
	// good copy is known); the keys holding them are in Keys.
	Lost []DamagedBlock `json:"lost"`
	// Keys: the keys holding a lost block (at most MaxDamagedKeys;
	// KeysTruncated says more exist).
	Keys          []DamagedKey `json:"keys"`
	KeysTruncated bool         `json:"keys_truncated,omitempty"`
	// Repairable: blocks damaged on some replicas only (a good one
	// exists); they are repaired block by block or their replica is
	// replaced by a copy.
	Repairable []DamagedBlock `json:"repairable"`
	// Repairs: repair_blocks commands in flight; RepairedBlocks and
	// FailedRepairs since the meta service started.
	Repairs        int    `json:"repairs"`
	RepairedBlocks uint64 `json:"repaired_blocks"`
	FailedRepairs  uint64 `json:"failed_repairs"`
	// Scrub: every datanode's scrubber, as its last heartbeat reported it.
	Scrub []NodeScrub `json:"scrub"`
}

// Damaged returns GET /v1/damaged.
func (c *Client) Damaged(ctx context.Context) (*DamageStatus, error) {
	var out DamageStatus
	if err := c.Do(ctx, http.MethodGet, "/v1/damaged", nil, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// validateDamage checks the damage part of a heartbeat.
func (hb *Heartbeat) validateDamage() error {
	n := 0
	for _, c := range hb.Containers {
		n += len(c.DamagedBlocks)
		if len(c.DamagedBlocks) > 0 && c.State != ContainerClosed {
			return fmt.Errorf("%w: heartbeat: container %d: damaged blocks reported for a %s replica (only CLOSED)", ErrInvalid, c.ID, c.State)
		}
		for i, b := range c.DamagedBlocks {
			if b == 0 || (i > 0 && b <= c.DamagedBlocks[i-1]) {
				return fmt.Errorf("%w: heartbeat: container %d: damaged blocks must ascend from 1", ErrInvalid, c.ID)
			}
		}
	}
	if len(hb.FailedVolumes) > MaxFailedVolumesReport {
		return fmt.Errorf("%w: heartbeat: %d failed volumes, at most %d", ErrInvalid, len(hb.FailedVolumes), MaxFailedVolumesReport)
	}
	if len(hb.ReadOnlyVolumes) > MaxFailedVolumesReport {
		return fmt.Errorf("%w: heartbeat: %d read-only volumes, at most %d", ErrInvalid, len(hb.ReadOnlyVolumes), MaxFailedVolumesReport)
	}
	for _, v := range append(slices.Clip(hb.FailedVolumes), hb.ReadOnlyVolumes...) {
		if len(v.Reason) > MaxCopyErrorBytes || len(v.Dir) > MaxCopyErrorBytes {
			return fmt.Errorf("%w: heartbeat: failed volume: directory or reason over %d bytes", ErrInvalid, MaxCopyErrorBytes)
		}
	}
	if n > MaxDamagedBlocksReport {
		return fmt.Errorf("%w: heartbeat: %d damaged blocks, at most %d", ErrInvalid, n, MaxDamagedBlocksReport)
	}
	return nil
}
