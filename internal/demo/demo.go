// Package demo is `spindle demo`: Spindle end to end on its embedded
// default, in one temporary directory, in about a minute:
//
//  1. the storage engine alone: blocks written durably, read back and
//     verified, containers closed and scanned, the engine reopened and
//     everything verified again;
//  2. the cluster: `spindle server` (the meta service in this process, three
//     datanode processes on 127.0.0.1), files of several sizes (0 bytes to
//     many blocks, with small blocks) put, stat-ed, listed, got back and
//     compared byte for byte, a ranged get across blocks, a delete;
//  3. short runs of every bench: teragen (with read-back validation),
//     key-write and key-read against that server; then, the server stopped,
//     the raw baseline, chunk-write (engine only and through a 3-replica
//     pipeline), follower-append and queue-dirs, each starting what it
//     needs;
//
// then a summary table of every step and the benches' results.
//
// Invariants: everything it creates is under one temporary directory,
// removed at the end (also on failure); every process it starts is stopped
// before Run returns; every figure it prints was measured in this run; any
// mismatch (bytes, sizes, checksums, a key that should or should not be
// there) is an error, so `spindle demo` exits non-zero.
//
// Concurrency: Run starts and joins its own goroutines and processes; one
// Run at a time.
package demo

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
)

// Config sizes the demo.
type Config struct {
	// Dir is where the temporary directory goes ("" = os.TempDir()).
	Dir string
	// Binary is the spindle executable run as the datanodes (required for
	// the cluster and the multi-process benches).
	Binary string
	// DataBytes is what the engine part writes and reads back (default
	// 64 MiB).
	DataBytes int64
	// Writers write in parallel in the engine part (default 4).
	Writers int
	// BenchDuration is the length of each short timed bench (default 1 s).
	BenchDuration time.Duration
	// TeraGenBytes is the short teragen's size (default 512 MiB).
	TeraGenBytes int64
	// EngineOnly skips the cluster and the multi-process benches.
	EngineOnly bool
	// Out receives progress and the summary table.
	Out io.Writer
	// Logger receives the components' logs (nil: discarded).
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultDataBytes     = 64 << 20
	DefaultTeraGenBytes  = 512 << 20
	DefaultBenchDuration = time.Second
)

type row struct{ step, figures, result string }

// demo is one run's state.
type demo struct {
	cfg     Config
	tmp     string
	out     io.Writer
	log     *slog.Logger
	rows    []row
	results []bench.Result
	outErr  error // say's first write error
}

// say prints a line of the demo's progress. The first write error is kept
// in outErr, which Run returns: the demo goes on, its steps' errors first.
func (d *demo) say(format string, args ...any) {
	if _, err := fmt.Fprintf(d.out, format+"\n", args...); err != nil && d.outErr == nil {
		d.outErr = err
	}
}

func (d *demo) add(step, figures string) { d.rows = append(d.rows, row{step, figures, "ok"}) }

// Run runs the demo.
func Run(ctx context.Context, cfg Config) (err error) {
	if cfg.DataBytes <= 0 {
		cfg.DataBytes = DefaultDataBytes
	}
	if cfg.Writers <= 0 {
		cfg.Writers = 4
	}
	if cfg.BenchDuration <= 0 {
		cfg.BenchDuration = DefaultBenchDuration
	}
	if cfg.TeraGenBytes <= 0 {
		cfg.TeraGenBytes = DefaultTeraGenBytes
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if !cfg.EngineOnly && cfg.Binary == "" {
		return errors.New("demo: no spindle binary to run the datanodes")
	}
	tmp, err := os.MkdirTemp(cfg.Dir, "spindle-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil && err == nil {
			err = fmt.Errorf("demo: %w", rerr)
		}
	}()
	d := &demo{cfg: cfg, tmp: tmp, out: cfg.Out, log: cfg.Logger}
	start := time.Now()
	d.say("spindle demo in %s", tmp)
	defer func() {
		if serr := d.summary(time.Since(start), err); err == nil {
			err = cmp.Or(d.outErr, serr)
		}
	}()

	if err := d.runEngine(ctx); err != nil {
		return err
	}
	if cfg.EngineOnly {
		return nil
	}
	if err := d.runCluster(ctx); err != nil {
		return err
	}
	return d.runBenches(ctx)
}

// summary prints the table of steps (those that ran) and the benches'
// results, and returns the error of writing them.
func (d *demo) summary(el time.Duration, err error) error {
	out := bufio.NewWriter(d.out)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "summary (figures measured in this run; MB = 10^6 bytes):")
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  step\tfigures\tresult")
	for _, r := range d.rows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.step, r.figures, r.result)
	}
	if err != nil {
		fmt.Fprintf(tw, "  FAILED\t%v\t\n", err)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.results) > 0 {
		fmt.Fprintln(out)
		if err := bench.WriteTable(out, d.results...); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	if err != nil {
		fmt.Fprintf(out, "spindle demo FAILED after %.1fs\n", el.Seconds())
	} else {
		fmt.Fprintf(out, "spindle demo: every step ok in %.1fs; everything stopped and removed\n", el.Seconds())
	}
	return out.Flush()
}

func ratioText(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *r)
}
