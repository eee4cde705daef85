// Package tokenbench measures what block tokens cost on the write path
// (issue 32 item 3: the 1 KiB chunk-write rate with tokens must be at
// least 0.95 of the rate without): `spindle bench chunk-write
// --block-tokens` runs the replicated chunk-write bench (package
// scenario) over mutual TLS four times in one invocation, alternately
// without and with the datanodes checking a block token on every chunk
// write and block commit (in the order without, with, with, without, so
// that a drift of the machine's speed weighs on both alike), and reports
// each run's writes/s and CPU µs per write and the ratios of the means.
//
// With tokens, the datanodes get a key file (datanode --block-token-keys)
// and the writers a token per block, signed with it for the writers'
// certificate, as the meta service would hand out with an allocation: the
// first chunk of a block costs its datanode an HMAC, the others a lookup
// in the verifier's cache.
//
// Concurrency: Compare runs the benches one after the other.
package tokenbench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/blocktoken"
	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Run is one bench run's figures.
type Run struct {
	Tokens     bool    `json:"tokens"`
	Ops        int64   `json:"ops"`
	OpsPerS    float64 `json:"ops_per_s"`
	CPUUsPerOp float64 `json:"cpu_us_per_op"`
}

// Result is Compare's answer.
type Result struct {
	Runs []Run `json:"runs"`
	// Means of the runs without and with tokens; RateRatio is with/without
	// (≥ 0.95 wanted), CPURatio the CPU per write with/without.
	Without   Run     `json:"without"`
	With      Run     `json:"with"`
	RateRatio float64 `json:"rate_ratio"`
	CPURatio  float64 `json:"cpu_ratio"`
}

// Compare runs cfg (TLS forced on) without and with block tokens.
func Compare(ctx context.Context, cfg scenario.ChunkWritePipelineConfig) (Result, error) {
	var res Result
	cfg.TLS = true
	dir, err := os.MkdirTemp("", "spindle-tokenbench-")
	if err != nil {
		return res, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	key := blocktoken.Key{ID: 1, Secret: make([]byte, blocktoken.SecretBytes)}
	_, _ = rand.Read(key.Secret)
	b, err := json.Marshal([]blocktoken.Key{key})
	if err != nil {
		return res, err
	}
	keyFile := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(keyFile, b, 0o600); err != nil {
		return res, err
	}
	principal := tlsconf.LocalName(tlsconf.RoleAdmin) // the writers' certificate (scenario)
	with := cfg
	with.DatanodeArgs = append(slices.Clip(cfg.DatanodeArgs), "--block-token-keys", keyFile)
	with.BlockToken = func(container, local uint64) string {
		tok, err := blocktoken.Sign(blocktoken.Token{Ops: blocktoken.OpWrite, Expiry: time.Now().Add(time.Hour), Container: container,
			Blocks: []blocktoken.Range{{First: local, Count: 1}}, Principal: principal}, key)
		if err != nil {
			panic(err) // one range, a short principal: cannot fail
		}
		return tok
	}
	for _, tokens := range []bool{false, true, true, false} {
		c := cfg
		if tokens {
			c = with
		}
		out, err := scenario.RunChunkWritePipeline(ctx, c)
		if err != nil {
			return res, fmt.Errorf("chunk-write (tokens %v): %w", tokens, err)
		}
		r := Run{Tokens: tokens, Ops: out.Ops, OpsPerS: out.OpsPerS}
		if out.CPUUse != nil {
			r.CPUUsPerOp = out.CPUUse.CPUUsPerOp
		}
		res.Runs = append(res.Runs, r)
	}
	for _, r := range res.Runs {
		m := &res.Without
		if r.Tokens {
			m = &res.With
		}
		m.Tokens = r.Tokens
		m.Ops += r.Ops
		m.OpsPerS += r.OpsPerS / 2
		m.CPUUsPerOp += r.CPUUsPerOp / 2
	}
	if res.Without.OpsPerS > 0 {
		res.RateRatio = round(res.With.OpsPerS / res.Without.OpsPerS)
	}
	if res.Without.CPUUsPerOp > 0 {
		res.CPURatio = round(res.With.CPUUsPerOp / res.Without.CPUUsPerOp)
	}
	return res, nil
}

func round(x float64) float64 { return math.Round(x*1000) / 1000 }

// WriteTable prints the runs and the ratios.
func (r Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tblock tokens\twrites\twrites/s\tCPU µs/write")
	for i, x := range r.Runs {
		fmt.Fprintf(tw, "%d\t%v\t%d\t%.0f\t%.1f\n", i+1, x.Tokens, x.Ops, x.OpsPerS, x.CPUUsPerOp)
	}
	fmt.Fprintf(tw, "mean\tfalse\t%d\t%.0f\t%.1f\n", r.Without.Ops, r.Without.OpsPerS, r.Without.CPUUsPerOp)
	fmt.Fprintf(tw, "mean\ttrue\t%d\t%.0f\t%.1f\n", r.With.Ops, r.With.OpsPerS, r.With.CPUUsPerOp)
	fmt.Fprintf(tw, "with/without\t\t\t%.3f\t%.3f\n", r.RateRatio, r.CPURatio)
	return tw.Flush()
}

// Print runs Compare and prints its result to w: a table, or JSON.
func Print(ctx context.Context, w io.Writer, cfg scenario.ChunkWritePipelineConfig, asJSON bool) error {
	res, err := Compare(ctx, cfg)
	switch {
	case err != nil:
		return err
	case asJSON:
		return bench.WriteJSON(w, res)
	}
	return res.WriteTable(w)
}
