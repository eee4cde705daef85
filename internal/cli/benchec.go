package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/klauspost/reedsolomon"
	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/units"
)

// benchECReadBytes is the size of each read of the read passes.
const benchECReadBytes = 1 << 20

// BenchECCmd is spindle bench ec: erasure coding's costs on this machine
// (issue 37 item 6), each beside its physical limit measured in the same
// run: the library's own encode and reconstruct speed on one core, the
// conversion of a container (read, encode, CRC, write and fsync k+m shard
// files), and reads of the coded data, healthy and with a data shard
// missing, against a replica's read of the same bytes (read + CRC32C per
// 16 KiB). asJSON reports whether --json was given.
func BenchECCmd(asJSON func(*cobra.Command) bool) *cobra.Command {
	var policy, dir string
	size := units.ByteSize(256 << 20)
	cell := units.ByteSize(ec.DefaultCellBytes)
	cmd := &cobra.Command{
		Use:   "ec",
		Short: "Erasure coding: encode and reconstruct speed against the library's, conversion GB/s, healthy and degraded reads against replicated reads, CPU-s per GB",
		Args:  ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := ec.ParsePolicy(policy)
			if err != nil {
				return UsageErr(err)
			}
			if !p.Coded() {
				return UsageErr(fmt.Errorf("--policy %s: want an erasure-coding policy (rs-3-2, rs-6-3, rs-10-4)", policy))
			}
			p.CellBytes = int(cell)
			if err := p.Validate(); err != nil {
				return UsageErr(err)
			}
			if size < units.ByteSize(p.StripeBytes()) || size > 64<<30 {
				return UsageErr(fmt.Errorf("--size %s: want one stripe (%s) to 64 GiB", size, units.ByteSize(p.StripeBytes())))
			}
			work, err := os.MkdirTemp(dir, "bench-ec-")
			if err != nil {
				return err
			}
			defer func() { _ = os.RemoveAll(work) }() // scratch
			res, err := runBenchEC(cmd, p, int64(size), work)
			if err != nil {
				return err
			}
			if asJSON(cmd) {
				return bench.WriteJSON(cmd.OutOrStdout(), res)
			}
			return res.WriteTable(cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&policy, "policy", "rs-6-3", "erasure-coding policy: rs-3-2, rs-6-3 or rs-10-4")
	cmd.Flags().Var(&size, "size", "logical bytes of the container coded (one stripe to 64 GiB)")
	cmd.Flags().Var(&cell, "cell-size", "cell size (a multiple of 16KiB, at most 16MiB)")
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the container and its shards (default: the system's temporary directory); needs about 2.5 × --size")
	return cmd
}

// measured is one pass: bytes, wall and CPU seconds.
type measured struct {
	bytes      int64
	wall, cpuS float64
}

func measure(bytes int64, f func() error) (measured, error) {
	c0, t0 := bench.SelfCPUSeconds(), time.Now()
	err := f()
	return measured{bytes: bytes, wall: time.Since(t0).Seconds(), cpuS: bench.SelfCPUSeconds() - c0}, err
}

func (m measured) mbPerS() float64          { return float64(m.bytes) / 1e6 / m.wall }
func (m measured) cpuSPerGB() float64       { return m.cpuS / (float64(m.bytes) / 1e9) }
func (m measured) coresUsed() float64       { return m.cpuS / m.wall }
func round(v float64, unit float64) float64 { return math.Round(v/unit) / math.Round(1/unit) }

func runBenchEC(cmd *cobra.Command, p ec.Policy, size int64, work string) (bench.Result, error) {
	progress := func(format string, a ...any) { _, _ = fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", a...) } // progress only
	src := filepath.Join(work, "container")
	if err := writeRandomFile(src, size); err != nil {
		return bench.Result{}, err
	}
	stripes := (size + p.StripeBytes() - 1) / p.StripeBytes()
	logical := stripes * p.StripeBytes()
	// 1. The library alone, one core: encode and reconstruct in memory.
	lib, err := reedsolomon.New(p.Data, p.Parity, reedsolomon.WithMaxGoroutines(1))
	if err != nil {
		return bench.Result{}, err
	}
	cells := make([][]byte, p.Shards())
	for i := range cells {
		cells[i] = make([]byte, p.CellBytes)
		for j := range cells[i] {
			cells[i][j] = byte(i*31 + j)
		}
	}
	progress("bench ec: %s, %s: the library alone (one core)", p, units.FormatBytes(size))
	libEnc, err := measure(logical, func() error {
		for range stripes {
			if err := lib.Encode(cells); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return bench.Result{}, err
	}
	libRec, err := measure(logical, func() error {
		for range stripes {
			cells[0] = cells[0][:0]
			if err := lib.ReconstructData(cells); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return bench.Result{}, err
	}
	// 2. Spindle's encode (stripes cut, padded, encoded, a CRC32C per
	// 16 KiB of every shard) from memory to nowhere: the library's work
	// plus Spindle's own, per CPU second.
	progress("bench ec: Spindle's encode from memory (CRC32C included)")
	mem, err := os.ReadFile(src)
	if err != nil {
		return bench.Result{}, err
	}
	discard := make([]io.Writer, p.Shards())
	for i := range discard {
		discard[i] = io.Discard
	}
	enc, err := measure(size, func() error { return ec.Encode(bytes.NewReader(mem), size, p, 1, discard) })
	if err != nil {
		return bench.Result{}, err
	}
	// The floor of that work, each part measured alone on one core: the
	// library's encode (above), a CRC32C per 16 KiB of the k+m shards (the
	// format's), and one copy of the input into a stripe buffer.
	crcOnly, err := measure(logical, func() error {
		for range stripes {
			for _, c := range cells {
				for j := 0; j+ec.ChunkBytes <= len(c); j += ec.ChunkBytes {
					_ = crc32c.Checksum(c[j : j+ec.ChunkBytes]) // the work, not the value
				}
			}
		}
		return nil
	})
	if err != nil {
		return bench.Result{}, err
	}
	stripeBuf := make([]byte, p.StripeBytes())
	copyOnly, _ := measure(size, func() error {
		for off := int64(0); off < size; off += int64(len(stripeBuf)) {
			copy(stripeBuf, mem[off:])
		}
		return nil
	})
	floorS := libEnc.cpuS + crcOnly.cpuS*float64(size)/float64(logical) + copyOnly.cpuS
	mem = nil
	// 3. Conversion: the container read, encoded, its shards written and
	// fsynced.
	progress("bench ec: conversion (read, encode, CRC32C, write, fsync %d shards)", p.Shards())
	paths := make([]string, p.Shards())
	conv, err := measure(size, func() error { return convert(src, size, p, work, paths) })
	if err != nil {
		return bench.Result{}, err
	}
	// 4. Reads: a replica's (read + CRC32C per 16 KiB), the coded set's
	// healthy, and with data shard 0 missing.
	progress("bench ec: reads: replicated, coded, coded with shard 0 missing")
	replica, err := os.Open(src)
	if err != nil {
		return bench.Result{}, err
	}
	defer closeAll([]*os.File{replica})
	repl, _, err := readPass(size, func(b []byte, off int64) (int, error) { return readReplica(replica, b, off) })
	if err != nil {
		return bench.Result{}, err
	}
	files, err := openAll(paths)
	if err != nil {
		return bench.Result{}, err
	}
	defer closeAll(files)
	rs := make([]io.ReaderAt, len(files))
	for i, f := range files {
		rs[i] = f
	}
	set, err := ec.Open(rs)
	if err != nil {
		return bench.Result{}, err
	}
	healthy, lat, err := readPass(size, set.ReadAt)
	if err != nil {
		return bench.Result{}, err
	}
	rs[0] = nil
	dset, err := ec.Open(rs)
	if err != nil {
		return bench.Result{}, err
	}
	degraded, _, err := readPass(size, dset.ReadAt)
	if err != nil {
		return bench.Result{}, err
	}
	// A lost shard rebuilt whole (repair, ec.Set.Rebuild): read k
	// shards verified, reconstruct, write the shard and its table, fsync.
	rebuilt := filepath.Join(work, "rebuilt.shard")
	shardBytes := ec.ShardBytes(p, size)
	rebuild, err := measure(shardBytes, func() (err error) {
		f, err := os.Create(rebuilt)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, f.Close(), os.Remove(rebuilt)) }()
		if err := dset.Rebuild(0, f); err != nil {
			return err
		}
		return f.Sync()
	})
	if err != nil {
		return bench.Result{}, err
	}
	var raw int64
	for _, pth := range paths {
		st, err := os.Stat(pth)
		if err != nil {
			return bench.Result{}, err
		}
		raw += st.Size()
	}
	ops := (size + benchECReadBytes - 1) / benchECReadBytes
	r := bench.Result{Scenario: "ec", Ops: ops, Seconds: healthy.wall, OpsPerS: float64(ops) / healthy.wall, Bytes: size,
		MBPerS: healthy.mbPerS(), LatencyUs: lat.Summary()}
	r.SetBaseline(bench.Baseline{Ops: ops, Bytes: size, Seconds: repl.wall, OpsPerS: float64(ops) / repl.wall, MBPerS: repl.mbPerS(), Dir: work})
	r.SetParam("policy", p.String())
	r.SetParam("size", units.FormatBytes(size))
	r.SetParam("cell_size", units.FormatBytes(int64(p.CellBytes)))
	r.Extra = map[string]any{
		"library_encode_mb_per_s_one_core":      round(libEnc.mbPerS(), 0.1),
		"library_encode_cpu_seconds_per_gb":     round(libEnc.cpuSPerGB(), 0.001),
		"library_reconstruct_mb_per_s_one_core": round(libRec.mbPerS(), 0.1),
		"encode_mb_per_s":                       round(enc.mbPerS(), 0.1),
		"encode_cpu_seconds_per_gb":             round(enc.cpuSPerGB(), 0.001),
		"encode_per_cpu_second_over_library":    round(libEnc.cpuSPerGB()/enc.cpuSPerGB(), 0.001),
		"crc32c_shards_cpu_seconds_per_gb":      round(crcOnly.cpuSPerGB(), 0.001),
		"copy_input_cpu_seconds_per_gb":         round(copyOnly.cpuSPerGB(), 0.001),
		"encode_floor_cpu_seconds_per_gb":       round(floorS/(float64(size)/1e9), 0.001),
		"encode_per_cpu_second_over_floor":      round(floorS/enc.cpuS, 0.001),
		"conversion_mb_per_s":                   round(conv.mbPerS(), 0.1),
		"conversion_cpu_seconds_per_gb":         round(conv.cpuSPerGB(), 0.001),
		"conversion_cores_used":                 round(conv.coresUsed(), 0.01),
		"replicated_read_mb_per_s":              round(repl.mbPerS(), 0.1),
		"replicated_read_cpu_seconds_per_gb":    round(repl.cpuSPerGB(), 0.001),
		"healthy_read_cpu_seconds_per_gb":       round(healthy.cpuSPerGB(), 0.001),
		"degraded_read_mb_per_s":                round(degraded.mbPerS(), 0.1),
		"degraded_read_cpu_seconds_per_gb":      round(degraded.cpuSPerGB(), 0.001),
		"degraded_over_replicated":              round(degraded.mbPerS()/repl.mbPerS(), 0.001),
		"degraded_stripes_rebuilt":              dset.Reconstructions(),
		"raw_over_logical":                      round(float64(raw)/float64(size), 0.001),
		"shard_rebuild_mb_per_s":                round(rebuild.mbPerS(), 0.1),
		"shard_rebuild_cpu_seconds_per_gb":      round(rebuild.cpuSPerGB(), 0.001),
	}
	r.AddNote("encode_per_cpu_second_over_floor: Spindle's encode (the library's, a CRC32C per 16 KiB of every shard, the input copied once) against those three measured alone on one core; the library alone cannot reach the format's work, whose CRC32C costs more than the encode")
	r.AddNote("ratio_to_baseline: healthy coded reads over a replica's reads of the same bytes (read + CRC32C per 16 KiB), one reader, page cache")
	return r, nil
}

// writeRandomFile writes size pseudo-random bytes to path.
func writeRandomFile(path string, size int64) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	b := make([]byte, 1<<20)
	x := uint64(0x9E3779B97F4A7C15)
	for off := int64(0); off < size; off += int64(len(b)) {
		for i := 0; i+8 <= len(b); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			b[i], b[i+1], b[i+2], b[i+3], b[i+4], b[i+5], b[i+6], b[i+7] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24), byte(x>>32), byte(x>>40), byte(x>>48), byte(x>>56)
		}
		if _, err := f.Write(b[:min(int64(len(b)), size-off)]); err != nil {
			return err
		}
	}
	return nil
}

// convert codes the container at src into shard files under dir (paths
// set), each written through a 1 MiB buffer and fsynced.
func convert(src string, size int64, p ec.Policy, dir string, paths []string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.Close()) }()
	files := make([]*os.File, p.Shards())
	bws := make([]*bufio.Writer, p.Shards())
	ws := make([]io.Writer, p.Shards())
	defer func() { closeAll(files) }() // after an error; else closed below
	for i := range files {
		paths[i] = filepath.Join(dir, fmt.Sprintf("shard-%02d", i))
		if files[i], err = os.Create(paths[i]); err != nil {
			return err
		}
		bws[i] = bufio.NewWriterSize(files[i], 1<<20)
		ws[i] = bws[i]
	}
	if err := ec.Encode(in, size, p, 1, ws); err != nil {
		return err
	}
	for i := range files {
		if err := bws[i].Flush(); err != nil {
			return err
		}
		if err := files[i].Sync(); err != nil {
			return err
		}
		err := files[i].Close()
		files[i] = nil
		if err != nil {
			return err
		}
	}
	return nil
}

// readReplica reads b at off from a replica's file and computes the
// CRC32C of each 16 KiB (what a replica's read verifies).
func readReplica(f *os.File, b []byte, off int64) (int, error) {
	n, err := f.ReadAt(b, off)
	for i := 0; i < n; i += ec.ChunkBytes {
		_ = crc32c.Checksum(b[i:min(n, i+ec.ChunkBytes)]) // the work, not the value
	}
	return n, err
}

// readPass reads size bytes with read, benchECReadBytes at a time.
func readPass(size int64, read func([]byte, int64) (int, error)) (measured, *bench.Latency, error) {
	lat := bench.NewLatency()
	b := make([]byte, benchECReadBytes)
	m, err := measure(size, func() error {
		for off := int64(0); off < size; off += int64(len(b)) {
			t := time.Now()
			n, err := read(b[:min(int64(len(b)), size-off)], off)
			if err != nil && !(errors.Is(err, io.EOF) && int64(n) == min(int64(len(b)), size-off)) {
				return fmt.Errorf("read at %d: %w", off, err)
			}
			lat.Record(time.Since(t))
		}
		return nil
	})
	return m, lat, err
}

func openAll(paths []string) ([]*os.File, error) {
	files := make([]*os.File, len(paths))
	for i, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files[i] = f
	}
	return files, nil
}

// closeAll closes files opened for reading (or whose writes failed
// already: the first error is the one reported).
func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close() // read-only, or synced before
		}
	}
}
