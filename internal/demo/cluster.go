package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/server"
	"github.com/spindle-store/spindle/internal/teragen"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/units"
)

// The cluster part's key client writes small chunks and blocks, so that
// files of a few MiB span many blocks.
const (
	fileChunkBytes = 64 << 10
	fileBlockBytes = 256 << 10
	demoBucket     = "demo"
	// serverStartWait bounds the wait for the server's first pipeline.
	serverStartWait = 60 * time.Second
)

// fileSizes are the files put and got: empty, one byte, one chunk, inside
// a block, exactly a block, and many blocks.
var fileSizes = []int64{0, 1, fileChunkBytes, 200<<10 + 7, fileBlockBytes, 1<<20 + 13, 5<<20 + 3}

// runCluster is part 2 and the benches that need a running cluster.
func (d *demo) runCluster(ctx context.Context) (err error) {
	dir := filepath.Join(d.tmp, "server")
	d.say("2. spindle server (meta service + 3 datanodes on 127.0.0.1, mutual TLS) in %s", dir)
	start := time.Now()
	srv, err := server.Start(ctx, server.Config{
		Dir: dir, MetaListen: "127.0.0.1:0", Binary: d.cfg.Binary, ReadyTimeout: serverStartWait, Logger: d.log,
	})
	if err != nil {
		return fmt.Errorf("demo: spindle server: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			if cerr := srv.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("demo: stopping the server: %w", cerr)
			}
		}
	}()
	nodes, err := srv.Meta().Nodes(ctx)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	pls, err := srv.Meta().Pipelines(ctx)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.add("server: start", fmt.Sprintf("meta %s (%s), %d datanodes, %d pipelines, ready in %.2fs", srv.MetaAddr(), srv.ClientTLS().Mode(), len(nodes), len(pls), time.Since(start).Seconds()))

	kc, err := keyclient.New(srv.Meta(), keyclient.Options{ChunkSize: fileChunkBytes, BlockSize: fileBlockBytes, Logger: d.log})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() { _ = kc.Close() }() // always nil (keyclient.Client.Close)
	if err := d.putGetFiles(ctx, kc); err != nil {
		return err
	}
	if err := d.clusterBenches(ctx, srv.MetaAddr(), srv.ClientTLS()); err != nil {
		return err
	}

	d.say("   stopping the server ...")
	start = time.Now()
	stopped = true
	if err := srv.Close(); err != nil {
		return fmt.Errorf("demo: stopping the server: %w", err)
	}
	d.add("server: stop", fmt.Sprintf("datanodes and meta service stopped in %.2fs", time.Since(start).Seconds()))
	return nil
}

// putGetFiles puts files of fileSizes from disk, checks their metadata,
// gets them back into files and compares, reads a range across blocks,
// and deletes one.
func (d *demo) putGetFiles(ctx context.Context, kc *keyclient.Client) error {
	if _, err := kc.CreateBucket(ctx, demoBucket); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fdir := filepath.Join(d.tmp, "files")
	if err := os.MkdirAll(fdir, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.say("   putting and getting %d files (0 B .. %s) in blocks of %s, chunks of %s ...",
		len(fileSizes), units.FormatBytes(fileSizes[len(fileSizes)-1]), units.FormatBytes(fileBlockBytes), units.FormatBytes(fileChunkBytes))
	start := time.Now()
	var total int64
	maxBlocks, inline := 0, 0
	for _, size := range fileSizes {
		key := fmt.Sprintf("files/size-%d", size)
		in := filepath.Join(fdir, fmt.Sprintf("in-%d", size))
		want := make([]byte, size)
		bench.FillPseudoRandom(want, uint64(size)+1)
		if err := os.WriteFile(in, want, 0o644); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		f, err := os.Open(in)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		res, err := kc.Put(ctx, demoBucket, key, f, keyclient.PutOptions{})
		_ = f.Close() // read-only: the put's error is the one
		if err != nil {
			return fmt.Errorf("demo: put %s: %w", in, err)
		}
		ki, err := kc.Stat(ctx, demoBucket, key)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		minBlocks := int((size + fileBlockBytes - 1) / fileBlockBytes)
		if res.Inline { // small: the value is in the key's record in the meta service
			minBlocks = 0
			inline++
		}
		if int64(res.Key.Size) != size || int64(ki.Size) != size || ki.CRC32C != crc32c.Checksum(want) || len(ki.Blocks) < minBlocks ||
			(res.Inline && len(ki.Blocks) != 0) {
			return fmt.Errorf("demo: %s/%s: size %d (stat %d), CRC32C %08x, %d blocks; wrote %d bytes, CRC32C %08x, at least %d blocks",
				demoBucket, key, res.Key.Size, ki.Size, ki.CRC32C, len(ki.Blocks), size, crc32c.Checksum(want), minBlocks)
		}
		maxBlocks = max(maxBlocks, len(ki.Blocks))
		out := filepath.Join(fdir, fmt.Sprintf("out-%d", size))
		of, err := os.Create(out)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		_, err = kc.Get(ctx, demoBucket, key, of, keyclient.GetOptions{})
		if cerr := of.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("demo: get %s/%s: %w", demoBucket, key, err)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("demo: %s/%s: the %d bytes got back differ from the %d put", demoBucket, key, len(got), len(want))
		}
		total += size
	}
	d.add("keys: put + stat + get files", fmt.Sprintf("%d files, 0 B .. %s (up to %d blocks; %d stored inline in the meta service), %s in %.2fs, every byte compared, CRC32C checked",
		len(fileSizes), units.FormatBytes(fileSizes[len(fileSizes)-1]), maxBlocks, inline, units.FormatBytes(total), time.Since(start).Seconds()))

	// A range across block boundaries, and the listing.
	big := fileSizes[len(fileSizes)-1]
	want := make([]byte, big)
	bench.FillPseudoRandom(want, uint64(big)+1)
	off, n := int64(fileBlockBytes-1000), int64(2*fileBlockBytes+2000)
	var got bytes.Buffer
	if _, err := kc.GetRange(ctx, demoBucket, fmt.Sprintf("files/size-%d", big), off, n, &got, keyclient.GetOptions{}); err != nil {
		return fmt.Errorf("demo: ranged get: %w", err)
	}
	if !bytes.Equal(got.Bytes(), want[off:off+n]) {
		return fmt.Errorf("demo: ranged get [%d, +%d): %d bytes differ from those put", off, n, got.Len())
	}
	var listed int
	if err := kc.List(ctx, demoBucket, "files/", func(metaapi.KeyInfo) error { listed++; return nil }); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if listed != len(fileSizes) {
		return fmt.Errorf("demo: listed %d keys, put %d", listed, len(fileSizes))
	}
	d.add("keys: ranged get + list", fmt.Sprintf("%s across 3 blocks from offset %d compared; %d keys listed", units.FormatBytes(n), off, listed))

	// Delete: the key is gone.
	gone := fmt.Sprintf("files/size-%d", fileSizes[1])
	if err := kc.Delete(ctx, demoBucket, gone); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if _, err := kc.Get(ctx, demoBucket, gone, &bytes.Buffer{}, keyclient.GetOptions{}); !errors.Is(err, metaapi.ErrNotFound) {
		return fmt.Errorf("demo: get of the deleted key %s: %v, want not found", gone, err)
	}
	d.add("keys: delete", fmt.Sprintf("%s deleted; a get says not found", gone))
	return nil
}

// clusterBenches runs the key benches against the demo's server, their
// baselines in the demo's directory.
func (d *demo) clusterBenches(ctx context.Context, metaAddr string, metaTLS *tlsconf.Settings) error {
	base := filepath.Join(d.tmp, "baseline")
	// The server's three datanodes write to this disk: so does the
	// baseline, with one writer each.
	cc := scenario.ClusterConfig{Meta: metaAddr, MetaTLS: metaTLS, BaselineDir: base, BaselineWriters: server.DefaultDatanodes}
	quiet := d.log

	d.say("3. benches: teragen --size %s --writers 2 --validate ...", units.FormatBytes(d.cfg.TeraGenBytes))
	tg, err := scenario.RunTeraGen(ctx, scenario.TeraGenConfig{
		ClusterConfig: cc, SizeBytes: d.cfg.TeraGenBytes, Writers: 2, KeyBytes: d.cfg.TeraGenBytes/4 + teragen.RowSize,
		Validate: true, BaselineDuration: d.cfg.BenchDuration, Progress: io.Discard, Logger: quiet,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.results = append(d.results, tg.Result)
	d.add("bench teragen x2 (validated)", fmt.Sprintf("%d rows in %d keys, %.0f MB/s (writers %.0f + %.0f MB/s), checksum %s read back in %.2fs; disk %.0f MB/s, ratio %s",
		tg.Rows, tg.Keys, tg.MBPerS, tg.Writers[0].MBPerS, tg.Writers[1].MBPerS, tg.Checksum, tg.Validation.Seconds, baselineMBPerS(tg.Result), ratioText(tg.RatioToBaseline)))

	for _, kb := range []struct {
		read        bool
		keys        int
		size        int64
		concurrency int
	}{{false, 200, 64 << 10, 8}, {true, 100, 1 << 20, 4}} {
		name := "key-write"
		if kb.read {
			name = "key-read"
		}
		d.say("   %s --keys %d --size %s --concurrency %d ...", name, kb.keys, units.FormatBytes(kb.size), kb.concurrency)
		cfg := scenario.KeyBenchConfig{
			ClusterConfig: cc, Keys: kb.keys, SizeBytes: kb.size, Concurrency: kb.concurrency,
			BaselineDuration: d.cfg.BenchDuration, Progress: io.Discard, Logger: quiet,
		}
		run := scenario.RunKeyWrite
		if kb.read {
			run = scenario.RunKeyRead
		}
		res, err := run(ctx, cfg)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		d.results = append(d.results, res.Result)
		what := fmt.Sprintf("%d puts/s, %.1f MB/s, p99 %.0f ms; disk %.0f MB/s, ratio %s", int(res.OpsPerS), res.MBPerS, res.LatencyUs.P99/1e3, baselineMBPerS(res.Result), ratioText(res.RatioToBaseline))
		if kb.read {
			what = fmt.Sprintf("%d gets/s, %.1f MB/s, p99 %.0f ms, every byte compared", int(res.OpsPerS), res.MBPerS, res.LatencyUs.P99/1e3)
		}
		d.add(fmt.Sprintf("bench %s %s x%d", name, units.FormatBytes(kb.size), kb.concurrency), what)
	}
	return nil
}

func baselineMBPerS(r bench.Result) float64 {
	if r.Baseline == nil {
		return 0
	}
	return r.Baseline.MBPerS
}
