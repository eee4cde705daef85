package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/transport"
)

// Limits of the replica check.
const (
	// replicaCheckTimeout bounds the whole check; keys not reached by
	// then are reported as not checked (a note, not a violation).
	replicaCheckTimeout = 3 * time.Minute
	// replicaCheckWorkers: keys checked at once.
	replicaCheckWorkers = 8
)

// replicaCheck is what checkReplicas found.
type replicaCheck struct {
	keys, blocks, replicas int64 // checked
	missing                int64 // block replicas absent or short
	skipped                int64 // acknowledged keys not reached in time
}

// checkReplicas asks every healthy replica (as the meta service counts
// them after the heal: OPEN or CLOSED, not behind) of every block of every
// acknowledged cold key for that block (GetBlock, addressed to the
// replica: its own engine's record), and counts those that do not hold it
// at the key's length with the same chunk checksums as the other
// replicas. Reads alone cannot see such a replica (a read that meets it
// goes on to another), nor can the meta service's counts (it reports the
// container like the others): a replica that acknowledged a write it
// failed to store (issue 12) is found only so.
func (r *run) checkReplicas(ctx context.Context) (replicaCheck, error) {
	var res replicaCheck
	ctx, cancel := context.WithTimeout(ctx, replicaCheckTimeout)
	defer cancel()
	m := r.cl.meta
	nodes, err := m.Nodes(ctx)
	if err != nil {
		return res, fmt.Errorf("replica check: %w", err)
	}
	addrOf := map[uint64]string{}
	var addrs []string
	for _, n := range nodes {
		addrOf[n.NodeID] = n.Addr
		addrs = append(addrs, n.Addr)
	}
	cs, err := m.Containers(ctx)
	if err != nil {
		return res, fmt.Errorf("replica check: %w", err)
	}
	healthy := map[uint64][]uint64{} // container → nodes of its healthy replicas
	for _, c := range cs {
		for _, rd := range c.ReplicaDetails {
			if healthyReplica(rd) { // run.go
				healthy[c.ID] = append(healthy[c.ID], rd.Node)
			}
		}
	}
	if len(addrs) == 0 {
		return res, errors.New("replica check: the meta service lists no datanode")
	}
	pc, err := client.New(addrs, 0, client.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxAttempts: 2, Conn: transport.ConnConfig{TLS: r.cl.tls}})
	if err != nil {
		return res, fmt.Errorf("replica check: %w", err)
	}
	defer closeQuietly(pc)

	w := r.w
	w.mu.Lock()
	var acked []int
	for i, c := range w.cold {
		if c.out == outAcked {
			acked = append(acked, i)
		}
	}
	w.mu.Unlock()
	r.log("asking every replica of the blocks of %d acknowledged keys for them", len(acked))
	var keys, blocks, replicas, missing atomic.Int64
	next := make(chan int)
	var wg sync.WaitGroup
	for range replicaCheckWorkers {
		wg.Go(func() {
			for i := range next {
				ki, err := w.kc.Stat(ctx, bucket, coldName(i))
				if err != nil {
					if ctx.Err() == nil {
						w.violation("replica check: %s (acknowledged): stat: %v", coldName(i), err)
					}
					continue
				}
				keys.Add(1)
				for _, kb := range ki.Blocks {
					blocks.Add(1)
					for _, why := range r.checkBlockReplicas(ctx, pc, addrOf, healthy[kb.Container], kb) {
						if ctx.Err() != nil {
							break
						}
						missing.Add(1)
						w.violation("replica check: %s (acknowledged) block %d/%d (%d bytes): %s", coldName(i), kb.Container, kb.Local, kb.Length, why)
					}
					replicas.Add(int64(len(healthy[kb.Container])))
				}
			}
		})
	}
	sent := 0
	for _, i := range acked {
		if ctx.Err() != nil {
			break
		}
		next <- i
		sent++
	}
	close(next)
	wg.Wait()
	res.keys, res.blocks, res.replicas, res.missing = keys.Load(), blocks.Load(), replicas.Load(), missing.Load()
	res.skipped = int64(len(acked) - sent)
	return res, nil
}

// checkBlockReplicas asks each of the nodes for block kb and says, for
// each that does not hold it as the others do, why.
func (r *run) checkBlockReplicas(ctx context.Context, pc *client.Client, addrOf map[uint64]string, nodes []uint64, kb metaapi.KeyBlock) []string {
	var whys []string
	if len(nodes) == 0 {
		return []string{fmt.Sprintf("container %d has no healthy replica", kb.Container)}
	}
	var ref []uint32 // the first replica's checksums over the key's length
	first := true
	for _, n := range slices.Sorted(slices.Values(nodes)) {
		addr := addrOf[n]
		bd, err := pc.GetBlock(ctx, addr, client.BlockID{Container: kb.Container, Local: kb.Local, Token: kb.Token})
		switch {
		case err != nil:
			whys = append(whys, fmt.Sprintf("replica on datanode %d (%s): %v", n, addr, err))
			continue
		case bd.Length < kb.Length:
			whys = append(whys, fmt.Sprintf("replica on datanode %d (%s) holds %d bytes of it", n, addr, bd.Length))
			continue
		}
		var sums []uint32
		for _, ch := range bd.Chunks {
			if ch.Offset >= kb.Length {
				break
			}
			sums = append(sums, ch.Checksums...)
		}
		if first {
			ref, first = sums, false
		} else if !slices.Equal(ref, sums) {
			whys = append(whys, fmt.Sprintf("replica on datanode %d (%s) has other chunk checksums than the first", n, addr))
		}
	}
	return whys
}
