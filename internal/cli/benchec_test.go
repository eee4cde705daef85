package cli

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/spf13/cobra"
)

// TestBenchEC: spindle bench ec runs end to end on a small container and
// reports its figures: rs-3-2's shards hold 5/3 of the bytes, the read
// with a shard missing rebuilt every stripe, every rate is positive.
func TestBenchEC(t *testing.T) {
	cmd := BenchECCmd(func(*cobra.Command) bool { return true })
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--policy", "rs-3-2", "--size", "6MiB", "--cell-size", "256KiB", "--dir", t.TempDir()})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var r struct {
		MBPerS float64            `json:"mb_per_s"`
		Ratio  *float64           `json:"ratio_to_baseline"`
		Extra  map[string]float64 `json:"extra"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if r.MBPerS <= 0 || r.Ratio == nil {
		t.Fatalf("result %s", out.String())
	}
	if got := r.Extra["raw_over_logical"]; got < 5.0/3 || got > 1.7 {
		t.Errorf("raw over logical %v, want 5/3 and the headers", got)
	}
	if got := r.Extra["degraded_stripes_rebuilt"]; got != 8 {
		t.Errorf("stripes rebuilt with a shard missing: %v, want 8", got)
	}
	for _, k := range []string{"library_encode_mb_per_s_one_core", "encode_mb_per_s", "conversion_mb_per_s", "degraded_read_mb_per_s", "replicated_read_mb_per_s"} {
		if r.Extra[k] <= 0 {
			t.Errorf("%s = %v", k, r.Extra[k])
		}
	}
	cmd.SetArgs([]string{"--policy", "rep3"})
	if err := cmd.Execute(); ExitCode(err) != ExitUsage {
		t.Errorf("--policy rep3: %v, want a usage error", err)
	}
}
