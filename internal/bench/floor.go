package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/vfs"
)

// The replication floor: the least work a three-replica write does on
// this machine, with none of Spindle's protocol, log or bookkeeping.
// Clients send each chunk over loopback TCP to a "leader", which checks
// its CRC32C pieces, writes it with one pwrite to a file of its own in Dir
// and forwards it to two "followers" over their own connections; each
// follower checks and writes it and answers one byte; the leader answers
// the client when both have. No raft, no log, no metadata, no fdatasync:
// every byte is received, checked and written three times and sent three
// times, as a replicated write must, and nothing else. Spindle's CPU per
// GB over the floor's is what its protocol, log and bookkeeping cost; a
// CPU budget below the floor's cannot be met on the machine
// (docs/BENCHES.md). The clients are a Loop: its bounds, progress,
// latency and CPU (this process's, where all five roles run).

// FloorConfig describes a replication floor run.
type FloorConfig struct {
	Dir            string // the replicas' files go in a new directory under it, removed at the end
	Clients        int    // writes in flight (1..MaxWorkers)
	ChunkSizeBytes int64  // bytes per write (1..MaxFloorChunkBytes)
	// BytesPerChecksum is the CRC32C piece size (default
	// engine.DefaultBytesPerChecksum).
	BytesPerChecksum uint32
	// Duration and MaxOps bound the run (whichever first); at least one
	// must be positive.
	Duration time.Duration
	MaxOps   int64
	// MaxBytesPerReplica bounds the bytes each replica keeps (default
	// 8 GiB, at most a quarter of the room on Dir's filesystem: a tmpfs
	// Dir is memory): past it, a replica's files are
	// written again from their start (then the floor is lower still: the
	// pages exist).
	MaxBytesPerReplica int64
	// Progress is as in LoopConfig (nil: stderr when it is a terminal).
	Progress io.Writer
}

// Floor limits.
const (
	MaxFloorChunkBytes = 64 << 20
	// floorDefaultMaxBytes bounds a replica's bytes when the config does
	// not, and the room of Dir allows it (floorMaxBytes).
	floorDefaultMaxBytes = 8 << 30
)

// floorMaxBytes is the default bound of a replica's bytes: at most
// floorDefaultMaxBytes, and a quarter of the room on Dir's filesystem, so
// that the three replicas leave a quarter free. On /dev/shm the room is
// memory: three replicas of 8 GiB, which a fast machine writes in a 15 s
// run, would take all of a 24 GiB machine's tmpfs.
func floorMaxBytes(availBytes uint64) int64 {
	return int64(min(floorDefaultMaxBytes, availBytes/4))
}

// loop is the clients' loop configuration.
func (c FloorConfig) loop() LoopConfig {
	return LoopConfig{Workers: c.Clients, Duration: c.Duration, MaxOps: c.MaxOps, Label: "floor", Progress: c.Progress}
}

func (c FloorConfig) withDefaults() (FloorConfig, error) {
	if c.BytesPerChecksum == 0 {
		c.BytesPerChecksum = engine.DefaultBytesPerChecksum
	}
	if c.MaxBytesPerReplica == 0 && c.Dir != "" {
		// Dir may not exist yet: the room is its nearest existing
		// ancestor's filesystem's.
		du, err := vfs.Default.GetDiskUsage(vfs.NearestExisting(c.Dir))
		if err != nil {
			return c, fmt.Errorf("bench: floor: room on %s: %w", c.Dir, err)
		}
		c.MaxBytesPerReplica = floorMaxBytes(du.AvailBytes)
	}
	if err := c.loop().check(); err != nil {
		return c, fmt.Errorf("bench: floor: %w", err)
	}
	switch {
	case c.Dir == "":
		return c, errors.New("bench: floor: no directory")
	case c.ChunkSizeBytes < 1 || c.ChunkSizeBytes > MaxFloorChunkBytes:
		return c, fmt.Errorf("bench: floor: chunk of %d bytes, want 1..%d", c.ChunkSizeBytes, MaxFloorChunkBytes)
	case c.MaxBytesPerReplica < c.ChunkSizeBytes:
		return c, fmt.Errorf("bench: floor: max bytes per replica %d below one chunk", c.MaxBytesPerReplica)
	}
	return c, nil
}

// floorReplica is one replica's end of one connection: read a chunk,
// check its pieces, forward it (a leader), write it, wait for the
// followers, answer.
type floorReplica struct {
	cfg     *FloorConfig
	conn    net.Conn
	file    *os.File
	fileMax int64 // bytes of file before it is written again from its start
	fwd     []net.Conn
	sums    []uint32 // the chunk's piece checksums, as a client sends them
}

// serve ends at the end of its connection's stream (nil) or at the first
// error; either way it closes its followers' connections, so that they
// end too.
func (r *floorReplica) serve() error {
	defer func() {
		for _, f := range r.fwd {
			closeQuietly(f)
		}
	}()
	buf := make([]byte, r.cfg.ChunkSizeBytes)
	var ack [1]byte
	errs := make(chan error, len(r.fwd))
	for off := int64(0); ; off += int64(len(buf)) {
		if _, err := io.ReadFull(r.conn, buf); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if bad := engine.VerifyPieces(buf, r.sums, r.cfg.BytesPerChecksum); bad >= 0 {
			return fmt.Errorf("bench: floor: piece %d does not match its checksum", bad)
		}
		for _, f := range r.fwd {
			go func(f net.Conn) {
				var a [1]byte
				_, err := f.Write(buf)
				if err == nil {
					_, err = io.ReadFull(f, a[:])
				}
				errs <- err
			}(f)
		}
		if off+int64(len(buf)) > r.fileMax {
			off = 0
		}
		_, werr := r.file.WriteAt(buf, off)
		for range r.fwd {
			if err := <-errs; err != nil && werr == nil {
				werr = err
			}
		}
		if werr != nil {
			return werr
		}
		if _, err := r.conn.Write(ack[:]); err != nil {
			return err
		}
	}
}

// RunReplicationFloor runs the floor (see FloorConfig): Clients writers,
// each with its connection to the leader and the leader's two connections
// to the followers, for Duration or MaxOps writes in all. The result's
// bytes count each write once, as the replicated benches count them.
func RunReplicationFloor(ctx context.Context, cfg FloorConfig) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	dir, err := os.MkdirTemp(cfg.Dir, "floor-")
	if err != nil {
		return Result{}, fmt.Errorf("bench: floor: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }() // best effort: a temporary directory (cfg.Dir)
	data := make([]byte, cfg.ChunkSizeBytes)
	FillPseudoRandom(data, 1)
	sums := engine.ComputeChecksums(nil, data, cfg.BytesPerChecksum)

	var conns []net.Conn
	var files []*os.File
	defer func() {
		for _, c := range conns {
			closeQuietly(c)
		}
		for _, f := range files {
			closeQuietly(f)
		}
	}()
	// pair returns the two ends of a new loopback TCP connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, fmt.Errorf("bench: floor: %w", err)
	}
	defer closeQuietly(ln)
	pair := func() (net.Conn, net.Conn, error) {
		d := net.Dialer{Timeout: tcpDialTimeout}
		a, err := d.DialContext(ctx, "tcp", ln.Addr().String())
		if err != nil {
			return nil, nil, err
		}
		conns = append(conns, a)
		b, err := ln.Accept()
		if err != nil {
			return nil, nil, err
		}
		conns = append(conns, b)
		return a, b, nil
	}
	newFile := func(name string) (*os.File, error) {
		f, err := os.Create(filepath.Join(dir, name))
		if err == nil {
			files = append(files, f)
		}
		return f, err
	}
	var serving sync.WaitGroup
	serveErrs := make(chan error, 3*cfg.Clients)
	serve := func(r *floorReplica) {
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := r.serve(); err != nil {
				serveErrs <- err
			}
		}()
	}
	// A replica's bytes are spread over its Clients files.
	fileMax := max(cfg.ChunkSizeBytes, cfg.MaxBytesPerReplica/int64(cfg.Clients))
	clientConns := make([]net.Conn, cfg.Clients)
	for i := range clientConns {
		cl, ld, err := pair()
		if err != nil {
			return Result{}, fmt.Errorf("bench: floor: %w", err)
		}
		clientConns[i] = cl
		leader := &floorReplica{cfg: &cfg, conn: ld, fileMax: fileMax, sums: sums}
		if leader.file, err = newFile(fmt.Sprintf("leader-%d", i)); err != nil {
			return Result{}, fmt.Errorf("bench: floor: %w", err)
		}
		for f := 1; f <= 2; f++ {
			lf, fl, err := pair()
			if err != nil {
				return Result{}, fmt.Errorf("bench: floor: %w", err)
			}
			leader.fwd = append(leader.fwd, lf)
			follower := &floorReplica{cfg: &cfg, conn: fl, fileMax: fileMax, sums: sums}
			if follower.file, err = newFile(fmt.Sprintf("follower%d-%d", f, i)); err != nil {
				return Result{}, fmt.Errorf("bench: floor: %w", err)
			}
			serve(follower)
		}
		serve(leader)
	}

	st, loopErr := Loop(ctx, cfg.loop(), func(_ context.Context, worker int, _ int64) (int, error) {
		c := clientConns[worker]
		var ack [1]byte
		if _, err := c.Write(data); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			return 0, err
		}
		return len(data), nil
	})
	for _, c := range clientConns {
		closeQuietly(c) // the replicas see EOF and end
	}
	serving.Wait()
	close(serveErrs)
	if err, ok := <-serveErrs; ok {
		return Result{}, fmt.Errorf("bench: floor: replica: %w", err)
	}
	if loopErr != nil {
		return Result{}, fmt.Errorf("bench: floor: %w", loopErr)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if st.Ops == 0 {
		return Result{}, errors.New("bench: floor: no write completed")
	}
	return st.Result("replication-floor"), nil
}
