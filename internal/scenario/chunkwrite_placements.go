package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spindle-store/spindle/internal/bench"
)

// Seed 002's placement experiment in one command: `spindle bench
// chunk-write --placements tmpfs:tmpfs,disk:disk,disk:tmpfs,tmpfs:disk`
// runs the replicated chunk-write bench once per placement of the
// datanodes' data and Raft log, one after the other with the same
// settings, and prints them in one table beside the seed's Ozone figures,
// each with its ratio to the tmpfs:tmpfs run of the same invocation.

// Placement kinds of a --placements spec side.
const (
	PlaceTmpfs = "tmpfs" // a directory under PlacementsConfig.TmpfsDir
	PlaceDisk  = "disk"  // a directory under PlacementsConfig.DiskDir
)

// MaxPlacements bounds the placements of one run.
const MaxPlacements = 16

// PlacementSpec is one DATA:LOG pair of a --placements list. Each side is
// "tmpfs", "disk" or an absolute directory (e.g. a second disk's).
type PlacementSpec struct {
	Data, Log string
}

func (p PlacementSpec) String() string { return p.Data + ":" + p.Log }

// ParsePlacements parses a comma-separated list of DATA:LOG placements.
func ParsePlacements(spec string) ([]PlacementSpec, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("--placements: empty list (want e.g. tmpfs:tmpfs,disk:disk,disk:tmpfs)")
	}
	var out []PlacementSpec
	seen := map[PlacementSpec]bool{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		data, log, ok := strings.Cut(item, ":")
		if !ok || data == "" || log == "" || strings.Contains(log, ":") {
			return nil, fmt.Errorf("--placements: %q is not DATA:LOG (each side tmpfs, disk or an absolute directory)", item)
		}
		for _, side := range []string{data, log} {
			if side != PlaceTmpfs && side != PlaceDisk && !filepath.IsAbs(side) {
				return nil, fmt.Errorf("--placements: %q in %q: want tmpfs, disk or an absolute directory", side, item)
			}
		}
		p := PlacementSpec{Data: data, Log: log}
		if seen[p] {
			return nil, fmt.Errorf("--placements: %s listed twice", p)
		}
		seen[p] = true
		out = append(out, p)
	}
	if len(out) > MaxPlacements {
		return nil, fmt.Errorf("--placements: %d placements, at most %d", len(out), MaxPlacements)
	}
	return out, nil
}

// SeedFigure is seed 002's Ozone figure for a placement (1 KiB chunk
// writes/s on one pipeline, 2020).
type SeedFigure struct {
	OpsPerS   float64 `json:"ops_per_s"`
	Placement string  `json:"placement"`
}

// seed002 are the seed's four measurements, by the placement kinds that
// reproduce them here. Its third (HDD data, log on another HDD: 520/s)
// needs a second disk: an absolute directory on another device than the
// disk side (seedFor).
var seed002 = map[PlacementSpec]SeedFigure{
	{PlaceTmpfs, PlaceTmpfs}: {8900, "memdisk/memdisk"},
	{PlaceDisk, PlaceDisk}:   {420, "hdd/same hdd"},
	{PlaceDisk, PlaceTmpfs}:  {1400, "hdd/memdisk"},
}

var seed002OtherDisk = SeedFigure{520, "hdd/different hdd"}

// PlacementsConfig configures RunChunkWritePlacements.
type PlacementsConfig struct {
	// Pipeline is the bench's configuration for every placement; its
	// DataDir and LogDir are set per placement.
	Pipeline ChunkWritePipelineConfig
	// Placements to run, in order.
	Placements []PlacementSpec
	// TmpfsDir and DiskDir are where "tmpfs" and "disk" placements make
	// their directories (default /dev/shm and os.TempDir()). Each
	// placement's directories are new and removed at the end.
	TmpfsDir, DiskDir string
}

// PlacementRun is one placement's outcome.
type PlacementRun struct {
	Spec string `json:"spec"` // DATA:LOG as given
	// RatioToTmpfs: ops_per_s over the tmpfs:tmpfs run's (absent
	// without one).
	RatioToTmpfs *float64 `json:"ratio_to_tmpfs,omitempty"`
	// Seed: seed 002's figure for this placement (absent: none).
	Seed *SeedFigure `json:"seed,omitempty"`
	ChunkWritePipelineResult
}

// PlacementsResult is every placement's run: one JSON object (one line).
type PlacementsResult struct {
	Scenario string         `json:"scenario"`
	Runs     []PlacementRun `json:"placements"`
	Notes    []string       `json:"notes,omitempty"`
}

// RunChunkWritePlacements runs the replicated chunk-write bench once per
// placement. A failed placement stops the run; the ones done are returned
// with the error.
func RunChunkWritePlacements(ctx context.Context, cfg PlacementsConfig) (PlacementsResult, error) {
	out := PlacementsResult{Scenario: "chunk-write-placements"}
	if len(cfg.Placements) == 0 {
		return out, errors.New("chunk-write: no placement to run")
	}
	if cfg.TmpfsDir == "" {
		cfg.TmpfsDir = "/dev/shm"
	}
	if cfg.DiskDir == "" {
		cfg.DiskDir = os.TempDir()
	}
	kinds := map[string]string{PlaceTmpfs: cfg.TmpfsDir, PlaceDisk: cfg.DiskDir}
	for _, p := range cfg.Placements {
		for _, side := range []string{p.Data, p.Log} {
			parent := side
			if d, ok := kinds[side]; ok {
				parent = d
			}
			if st, err := os.Stat(parent); err != nil || !st.IsDir() {
				return out, fmt.Errorf("chunk-write: placement %s: %s is not a directory (%v)", p, parent, err)
			}
		}
	}
	var tmpfsOps float64
	for i, p := range cfg.Placements {
		run, err := runPlacement(ctx, cfg, kinds, p, i)
		if err != nil {
			return out, fmt.Errorf("chunk-write: placement %s: %w", p, err)
		}
		if p == (PlacementSpec{PlaceTmpfs, PlaceTmpfs}) {
			tmpfsOps = run.OpsPerS
		}
		out.Runs = append(out.Runs, run)
	}
	if tmpfsOps > 0 {
		for i := range out.Runs {
			r := math.Round(out.Runs[i].OpsPerS/tmpfsOps*1e3) / 1e3
			out.Runs[i].RatioToTmpfs = &r
		}
	}
	out.Notes = append(out.Notes, "seed 002: Ozone 0.5, 1 KiB chunk writes (freon dcg) on one 3-node pipeline, 2020; its placements were memdisk or HDD, this machine's are the filesystems named per run")
	return out, nil
}

func runPlacement(ctx context.Context, cfg PlacementsConfig, kinds map[string]string, p PlacementSpec, i int) (PlacementRun, error) {
	var made []string
	defer func() {
		for _, d := range made {
			removeScratch(d)
		}
	}()
	dir := func(side, role string) (string, error) {
		parent := side
		if d, ok := kinds[side]; ok {
			parent = d
		}
		d, err := os.MkdirTemp(parent, fmt.Sprintf("spindle-placement%d-%s-", i+1, role))
		if err != nil {
			return "", err
		}
		made = append(made, d)
		return d, nil
	}
	pc := cfg.Pipeline
	var err error
	if pc.DataDir, err = dir(p.Data, "data"); err != nil {
		return PlacementRun{}, err
	}
	if pc.LogDir, err = dir(p.Log, "log"); err != nil {
		return PlacementRun{}, err
	}
	res, err := RunChunkWritePipeline(ctx, pc)
	if err != nil {
		return PlacementRun{}, err
	}
	run := PlacementRun{Spec: p.String(), ChunkWritePipelineResult: res}
	run.Seed = seedFor(p, res.Placement)
	return run, nil
}

// seedFor finds seed 002's figure for a placement: by its kinds, or, for
// data on the disk and the log in an absolute directory on another
// non-tmpfs device, the seed's "different hdd".
func seedFor(p PlacementSpec, where Placement) *SeedFigure {
	if s, ok := seed002[p]; ok {
		return &s
	}
	if p.Data == PlaceDisk && filepath.IsAbs(p.Log) && where.Log.FSType != "tmpfs" && !where.SameDevice && where.Log.Device != "" {
		s := seed002OtherDisk
		return &s
	}
	return nil
}

// WriteTable prints one row per placement.
func (r PlacementsResult) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "placement\twhere (data/log)\tops/s\tMB/s\tp50 µs\tp99 µs\tCPU µs/op\tratio to tmpfs:tmpfs\tseed 002 (Ozone) ops/s\tseed placement\t")
	for _, run := range r.Runs {
		ratio, seed, seedPl, cpu := "-", "-", "-", "-"
		if run.RatioToTmpfs != nil {
			ratio = fmt.Sprintf("%.3f", *run.RatioToTmpfs)
		}
		if run.Seed != nil {
			seed, seedPl = fmt.Sprintf("%.0f", run.Seed.OpsPerS), run.Seed.Placement
		}
		if run.CPUUse != nil {
			cpu = fmt.Sprintf("%.1f", run.CPUUsPerOp)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.2f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t\n", run.Spec, run.Placement.Label,
			run.OpsPerS, run.MBPerS, run.LatencyUs.P50, run.LatencyUs.P99, cpu, ratio, seed, seedPl)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	var b strings.Builder
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "%s: data %s, log %s\n", run.Spec, run.DataDir, run.LogDir)
		for _, n := range run.Notes {
			fmt.Fprintf(&b, "%s note: %s\n", run.Spec, n)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the result as one line of JSON.
func (r PlacementsResult) WriteJSON(w io.Writer) error { return bench.WriteJSON(w, r) }
