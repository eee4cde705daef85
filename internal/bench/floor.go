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
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/crc32c"
)

// The replication floor: the least work a three-replica write does on
// this machine, with none of Spindle's code. Clients send each chunk over
// loopback TCP to a "leader", which checks its CRC32C pieces, writes it
// with one pwrite to a file of its own in Dir and forwards it to two
// "followers" over their own connections; each follower checks and
// writes it and answers one byte; the leader answers the client when both
// have. No raft, no log, no metadata, no fdatasync: every byte is
// received, checked and written three times and sent three times, as a
// replicated write must, and nothing else. Spindle's CPU per GB over the
// floor's is what its protocol, log and bookkeeping cost; a CPU budget
// below the floor's cannot be met on the machine (docs/BENCHES.md).

// FloorConfig describes a replication floor run.
type FloorConfig struct {
	Dir            string // the replicas' files go in a new directory under it, removed at the end
	Clients        int    // writes in flight (1..MaxFloorClients)
	ChunkSizeBytes int64  // bytes per write (1..MaxFloorChunkBytes)
	// BytesPerChecksum is the CRC32C piece size (default 16 KiB).
	BytesPerChecksum int
	// Duration and MaxOps bound the run (whichever first); at least one
	// must be positive.
	Duration time.Duration
	MaxOps   int64
	// MaxBytesPerReplica bounds the bytes each replica keeps (default
	// 8 GiB; a tmpfs Dir is memory): past it, a replica's files are
	// written again from their start (then the floor is lower still: the
	// pages exist).
	MaxBytesPerReplica int64
}

// Floor limits.
const (
	MaxFloorClients    = 1024
	MaxFloorChunkBytes = 64 << 20
	// floorDefaultMaxBytes bounds a replica's bytes when the config does not.
	floorDefaultMaxBytes = 8 << 30
)

// Floor is what a floor run measured: writes, bytes (once per write, as
// the replicated benches count them), and this process's CPU time (all
// five roles run in it) over the timed loop.
type Floor struct {
	Ops             int64   `json:"ops"`
	Bytes           int64   `json:"bytes"`
	Seconds         float64 `json:"seconds"`
	OpsPerS         float64 `json:"ops_per_s"`
	MBPerS          float64 `json:"mb_per_s"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	CPUUsPerOp      float64 `json:"cpu_us_per_op"`
	CPUSecondsPerGB float64 `json:"cpu_seconds_per_gb"`
}

func (c FloorConfig) withDefaults() (FloorConfig, error) {
	if c.BytesPerChecksum == 0 {
		c.BytesPerChecksum = 16 << 10
	}
	if c.MaxBytesPerReplica == 0 {
		c.MaxBytesPerReplica = floorDefaultMaxBytes
	}
	switch {
	case c.Dir == "":
		return c, errors.New("bench: floor: no directory")
	case c.Clients < 1 || c.Clients > MaxFloorClients:
		return c, fmt.Errorf("bench: floor: %d clients, want 1..%d", c.Clients, MaxFloorClients)
	case c.ChunkSizeBytes < 1 || c.ChunkSizeBytes > MaxFloorChunkBytes:
		return c, fmt.Errorf("bench: floor: chunk of %d bytes, want 1..%d", c.ChunkSizeBytes, MaxFloorChunkBytes)
	case c.BytesPerChecksum < 1:
		return c, fmt.Errorf("bench: floor: %d bytes per checksum", c.BytesPerChecksum)
	case c.Duration < 0 || c.MaxOps < 0 || (c.Duration == 0 && c.MaxOps == 0):
		return c, fmt.Errorf("bench: floor: bounds duration %v and max ops %d: want at least one positive and none negative", c.Duration, c.MaxOps)
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
			f.Close()
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
		bpc := r.cfg.BytesPerChecksum
		for i, p := 0, 0; p < len(buf); i, p = i+1, p+bpc {
			if crc32c.Checksum(buf[p:min(p+bpc, len(buf))]) != r.sums[i] {
				return fmt.Errorf("bench: floor: piece %d does not match its checksum", i)
			}
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
// to the followers, for Duration or MaxOps writes in all.
func RunReplicationFloor(ctx context.Context, cfg FloorConfig) (Floor, error) {
	var out Floor
	cfg, err := cfg.withDefaults()
	if err != nil {
		return out, err
	}
	dir, err := os.MkdirTemp(cfg.Dir, "floor-")
	if err != nil {
		return out, fmt.Errorf("bench: floor: %w", err)
	}
	defer os.RemoveAll(dir)
	data := make([]byte, cfg.ChunkSizeBytes)
	FillPseudoRandom(data, 1)
	sums := checksumsOf(data, cfg.BytesPerChecksum)

	var conns []net.Conn
	var files []*os.File
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		for _, f := range files {
			f.Close()
		}
	}()
	// pair returns the two ends of a new loopback TCP connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return out, fmt.Errorf("bench: floor: %w", err)
	}
	defer ln.Close()
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
			return out, fmt.Errorf("bench: floor: %w", err)
		}
		clientConns[i] = cl
		leader := &floorReplica{cfg: &cfg, conn: ld, fileMax: fileMax, sums: sums}
		if leader.file, err = newFile(fmt.Sprintf("leader-%d", i)); err != nil {
			return out, fmt.Errorf("bench: floor: %w", err)
		}
		for f := 1; f <= 2; f++ {
			lf, fl, err := pair()
			if err != nil {
				return out, fmt.Errorf("bench: floor: %w", err)
			}
			leader.fwd = append(leader.fwd, lf)
			follower := &floorReplica{cfg: &cfg, conn: fl, fileMax: fileMax, sums: sums}
			if follower.file, err = newFile(fmt.Sprintf("follower%d-%d", f, i)); err != nil {
				return out, fmt.Errorf("bench: floor: %w", err)
			}
			serve(follower)
		}
		serve(leader)
	}

	var ops atomic.Int64
	var stop atomic.Bool
	if cfg.Duration > 0 {
		t := time.AfterFunc(cfg.Duration, func() { stop.Store(true) })
		defer t.Stop()
	}
	context.AfterFunc(ctx, func() { stop.Store(true) })
	var writers sync.WaitGroup
	writeErrs := make(chan error, cfg.Clients)
	cpu0, start := selfCPUSeconds(), time.Now()
	for _, c := range clientConns {
		writers.Add(1)
		go func(c net.Conn) {
			defer writers.Done()
			var ack [1]byte
			for !stop.Load() && (cfg.MaxOps == 0 || ops.Add(1) <= cfg.MaxOps) {
				if _, err := c.Write(data); err != nil {
					writeErrs <- err
					return
				}
				if _, err := io.ReadFull(c, ack[:]); err != nil {
					writeErrs <- err
					return
				}
				if cfg.MaxOps == 0 {
					ops.Add(1)
				}
			}
		}(c)
	}
	writers.Wait()
	elapsed, cpu := time.Since(start), selfCPUSeconds()-cpu0
	for _, c := range clientConns {
		c.Close() // the replicas see EOF and end
	}
	serving.Wait()
	close(writeErrs)
	close(serveErrs)
	if err, ok := <-serveErrs; ok {
		return out, fmt.Errorf("bench: floor: replica: %w", err)
	}
	if err, ok := <-writeErrs; ok {
		return out, fmt.Errorf("bench: floor: client: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	n := ops.Load()
	if cfg.MaxOps > 0 {
		n = min(n, cfg.MaxOps)
	}
	if n == 0 {
		return out, errors.New("bench: floor: no write completed")
	}
	out.Ops, out.Bytes, out.Seconds = n, n*cfg.ChunkSizeBytes, elapsed.Seconds()
	out.OpsPerS = float64(n) / out.Seconds
	out.MBPerS = float64(out.Bytes) / 1e6 / out.Seconds
	out.CPUSeconds = cpu
	out.CPUUsPerOp = cpu / float64(n) * 1e6
	out.CPUSecondsPerGB = cpu / (float64(out.Bytes) / 1e9)
	return out, nil
}

// checksumsOf returns the CRC32C of every bpc-byte piece of data.
func checksumsOf(data []byte, bpc int) []uint32 {
	var sums []uint32
	for p := 0; p < len(data); p += bpc {
		sums = append(sums, crc32c.Checksum(data[p:min(p+bpc, len(data))]))
	}
	return sums
}
