package datanode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/transport"
)

// Block repairs (metaapi.CmdRepairBlocks): this node's damaged blocks of
// a CLOSED container are read again from another replica over the data
// path (ReadChunk, each piece verified by the client against the
// source's checksums) and written by engine.RepairBlock, which verifies
// every piece against this node's own record before the new file
// replaces the damaged one. At most maxRepairs containers are repaired at
// once, one command per container at a time; repeats of a command under
// way are ignored (the meta service repeats it in every heartbeat
// response).

const (
	// maxRepairs bounds the containers repaired at once.
	maxRepairs = 2
	// repairTimeout bounds the repair of one block from one source.
	repairTimeout = 2 * time.Minute
)

type repairer struct {
	eng *engine.Engine
	tls *tlsconf.Settings // the connections to the replicas read from (nil: plaintext)
	log *slog.Logger
	scr *scrubber // counts repairs in its report
	// wake is signalled when a repair ends (the next heartbeat reports it).
	wake chan struct{}

	mu      sync.Mutex
	running map[uint64]bool // container → a repair under way
}

func newRepairer(eng *engine.Engine, sec *tlsconf.Settings, scr *scrubber, log *slog.Logger) *repairer {
	return &repairer{eng: eng, tls: sec, log: log, scr: scr, wake: make(chan struct{}, 1), running: map[uint64]bool{}}
}

// submit starts the repair of c unless one of its container is under way
// or maxRepairs run already (the meta service repeats the command).
func (r *repairer) submit(ctx context.Context, wg *sync.WaitGroup, c metaapi.Command) {
	if c.Container == 0 || len(c.Blocks) == 0 || len(c.Sources) == 0 {
		return
	}
	r.mu.Lock()
	if r.running[c.Container] || len(r.running) >= maxRepairs {
		r.mu.Unlock()
		return
	}
	r.running[c.Container] = true
	r.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.running, c.Container)
			r.mu.Unlock()
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}()
		r.run(ctx, c)
	}()
}

// run repairs the blocks of c still damaged here, each from the first
// source that gives good bytes.
func (r *repairer) run(ctx context.Context, c metaapi.Command) {
	id := engine.ContainerID(c.Container)
	damaged, err := r.eng.DamagedBlocks(id)
	if err != nil {
		return
	}
	var pid uint64
	if c.Pipeline != nil {
		pid = c.Pipeline.ID
	}
	for _, local := range c.Blocks[:min(len(c.Blocks), metaapi.MaxRepairBlocks)] {
		if !slices.Contains(damaged, local) {
			continue
		}
		b := engine.BlockID{Container: id, Local: local}
		var errs []error
		ok := false
		for _, src := range c.Sources {
			if err := r.repairFrom(ctx, pid, src.Addr, b); err != nil {
				errs = append(errs, fmt.Errorf("from node %d: %w", src.NodeID, err))
				if errors.Is(err, engine.ErrNotFound) {
					break // deleted meanwhile
				}
				continue
			}
			ok = true
			break
		}
		r.scr.mu.Lock()
		if ok {
			r.scr.report.RepairedBlocks++
		} else {
			r.scr.report.RepairFailures++
		}
		r.scr.mu.Unlock()
		if !ok {
			r.log.Warn("repairing a damaged block failed from every source", "container", c.Container, "block", local, "err", errors.Join(errs...))
		}
	}
}

// repairFrom repairs block b with the bytes of the replica at addr.
func (r *repairer) repairFrom(ctx context.Context, pid uint64, addr string, b engine.BlockID) error {
	bd, err := r.eng.GetBlock(b)
	if err != nil {
		return err
	}
	cl, err := client.New([]string{addr}, pid, client.Options{Logger: r.log, Conn: transport.ConnConfig{TLS: r.tls}})
	if err != nil {
		return err
	}
	defer closeQuietly(cl)
	rctx, cancel := context.WithTimeout(ctx, repairTimeout)
	defer cancel()
	return r.eng.RepairBlock(bd, &chunkReader{ctx: rctx, cl: cl, addr: addr, bd: bd})
}

// chunkReader reads a block's bytes from a replica, one chunk (as this
// node's record cuts them) per ReadChunk.
type chunkReader struct {
	ctx  context.Context
	cl   *client.Client
	addr string
	bd   *engine.BlockData
	next int    // the next chunk to read
	buf  []byte // what is left of the chunk read last
}

func (cr *chunkReader) Read(p []byte) (int, error) {
	for len(cr.buf) == 0 {
		if cr.next == len(cr.bd.Chunks) {
			return 0, io.EOF
		}
		ch := cr.bd.Chunks[cr.next]
		cr.next++
		if ch.Length == 0 {
			continue
		}
		got, err := cr.cl.ReadChunk(cr.ctx, cr.addr, client.BlockID{Container: uint64(cr.bd.ID.Container), Local: cr.bd.ID.Local}, ch.Offset, ch.Length)
		if err != nil {
			return 0, err
		}
		cr.buf = got.Data
	}
	n := copy(p, cr.buf)
	cr.buf = cr.buf[n:]
	return n, nil
}
