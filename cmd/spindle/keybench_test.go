package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/server"
	"github.com/spindle-store/spindle/internal/teragen"
)

// smallKeyFlags make keys of a few hundred KiB span several blocks.
var smallKeyFlags = []string{"--chunk-size", "64KiB", "--block-size", "256KiB", "--baseline-duration", "1s"}

func startTestServer(t *testing.T) *server.Server {
	t.Helper()
	t.Setenv(asSpindleEnv, "1") // inherited by the datanode children
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := server.Start(ctx, server.Config{
		Dir: t.TempDir(), MetaListen: "127.0.0.1:0", Binary: exe,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ClientProfile: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, s) })
	return s
}

func num(t *testing.T, obj map[string]any, k string) float64 {
	t.Helper()
	v, ok := obj[k].(float64)
	if !ok {
		t.Fatalf("JSON field %q missing or not a number: %v", k, obj)
	}
	return v
}

// TeraGen on an embedded server end to end: the JSON contract, the rows
// and their checksum (as generated), the writers' shares, the read-back
// validation, the baseline, and nothing left in --dir.
func TestBenchTeraGenEmbedded(t *testing.T) {
	t.Setenv(asSpindleEnv, "1")
	dir := filepath.Join(t.TempDir(), "data")
	const rows = 20011 // 2,001,100 bytes
	args := append([]string{"bench", "teragen", "--size", fmt.Sprint(rows*100 + 42), "--writers", "3",
		"--key-size", "300KB", "--dir", dir, "--validate", "--json"}, smallKeyFlags...)
	out, stderr, err := run(t, args)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m := lastJSON(t, out)
	want, _ := teragen.Checksum(0, rows)
	if m["scenario"] != "teragen" || num(t, m, "rows") != rows || num(t, m, "bytes") != rows*100 || m["checksum"] != fmt.Sprint(want) {
		t.Errorf("result %v (checksum want %d)", m, want)
	}
	if num(t, m, "mb_per_s") <= 0 || num(t, m, "ratio_to_baseline") <= 0 || num(t, num2map(t, m, "baseline"), "mb_per_s") <= 0 {
		t.Errorf("rates %v", m)
	}
	ws, _ := m["writers"].([]any)
	var sum float64
	for _, w := range ws {
		wm := w.(map[string]any)
		sum += num(t, wm, "rows")
		if num(t, wm, "keys") != 3 || num(t, wm, "mb_per_s") <= 0 {
			t.Errorf("writer %v", wm)
		}
	}
	if len(ws) != 3 || sum != rows || num(t, m, "keys") != 9 || num(t, m, "ops") != 9 {
		t.Errorf("writers %v keys %v", ws, m["keys"])
	}
	v := num2map(t, m, "validation")
	if v["ok"] != true || v["checksum"] != fmt.Sprint(want) || num(t, v, "rows") != rows {
		t.Errorf("validation %v", v)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left behind (%v)", dir, err)
	}
}

// TeraGen and the key benches against a running cluster (--meta): their
// keys are gone afterwards, and a bench that cannot reach the cluster fails
// without a figure.
func TestKeyBenchesOnRunningCluster(t *testing.T) {
	s := startTestServer(t)
	ctx := context.Background()
	out, stderr, err := run(t, append([]string{"bench", "teragen", "--size", "1MB", "--writers", "2", "--meta", s.MetaAddr(), "--json"}, smallKeyFlags...))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m := lastJSON(t, out)
	if num(t, m, "rows") != 10000 || m["baseline"] != nil {
		t.Errorf("teragen --meta: %v", m)
	}
	out, stderr, err = run(t, append([]string{"bench", "key-write", "--keys", "12", "--size", "300KiB", "--concurrency", "4",
		"--meta", s.MetaAddr(), "--baseline-dir", t.TempDir(), "--json"}, smallKeyFlags...))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m = lastJSON(t, out)
	if m["scenario"] != "key-write" || num(t, m, "ops") != 12 || num(t, m, "bytes") != 12*300<<10 || num(t, m, "ratio_to_baseline") <= 0 {
		t.Errorf("key-write: %v", m)
	}
	out, stderr, err = run(t, append([]string{"bench", "key-read", "--keys", "10", "--size", "0", "--concurrency", "3",
		"--meta", s.MetaAddr(), "--json"}, smallKeyFlags...))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m = lastJSON(t, out)
	if m["scenario"] != "key-read" || num(t, m, "ops") != 10 || num(t, m, "bytes") != 0 || num2map(t, m, "extra")["verified"] != true {
		t.Errorf("key-read: %v", m)
	}
	// bench s3 in rounds: every object of the S3 run and of the baseline
	// done once, split over the rounds.
	for _, op := range []string{"put", "get"} {
		out, stderr, err = run(t, []string{"bench", "s3", "--op", op, "--objects", "7", "--size", "3KiB", "--concurrency", "2", "--rounds", "3",
			"--meta", s.MetaAddr(), "--json"})
		if err != nil {
			t.Fatalf("bench s3 --op %s: %v\n%s", op, err, stderr)
		}
		m = lastJSON(t, out)
		if m["scenario"] != "s3-"+op || num(t, m, "ops") != 7 || num(t, num2map(t, m, "baseline"), "ops") != 7 || num(t, num2map(t, m, "params"), "rounds") != 3 {
			t.Errorf("bench s3 --op %s: %v", op, m)
		}
	}
	for _, b := range []string{"teragen", "bench"} {
		kl, err := s.Meta().ListKeys(ctx, b, "", "", 100)
		if err != nil || len(kl.Keys) != 0 {
			t.Errorf("bucket %s after the benches: %v keys, %v", b, len(kl.Keys), err)
		}
	}
	if _, _, err := run(t, []string{"bench", "key-write", "--keys", "1", "--meta", "127.0.0.1:1", "--json"}); err == nil {
		t.Error("key-write against no cluster succeeded")
	}
}

// key-read on an embedded server reads keys of several blocks back.
func TestBenchKeyReadEmbedded(t *testing.T) {
	t.Setenv(asSpindleEnv, "1")
	dir := filepath.Join(t.TempDir(), "data")
	out, stderr, err := run(t, append([]string{"bench", "key-read", "--keys", "6", "--size", "700KiB", "--concurrency", "2",
		"--dir", dir, "--json"}, smallKeyFlags...))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m := lastJSON(t, out)
	if num(t, m, "ops") != 6 || num(t, m, "bytes") != 6*700<<10 || num(t, m, "mb_per_s") <= 0 {
		t.Errorf("key-read: %v", m)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left behind (%v)", dir, err)
	}
}
