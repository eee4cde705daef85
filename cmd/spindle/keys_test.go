package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/server"
)

// runIn runs the spindle command line in this process with stdin.
func runIn(t *testing.T, stdin []byte, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetIn(bytes.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// wantExit checks a command's exit status and that its error says want.
func wantExit(t *testing.T, err error, code int, want string) {
	t.Helper()
	if got := cli.ExitCode(err); got != code {
		t.Errorf("exit status %d (%v), want %d", got, err, code)
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to say %q", err, want)
	}
}

func startEmbedded(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := server.Start(ctx, server.Config{
		Dir: t.TempDir(), MetaListen: "127.0.0.1:0", DatanodeEnv: []string{asSpindleEnv + "=1"},
		Logger: quietLogger(), ClientProfile: true, // TLS, found by the commands as after spindle server
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, s) })
	return s.MetaAddr()
}

// The key commands end to end against an embedded cluster (meta service
// and three datanodes, this test binary acting as spindle).
func TestKeyCommands(t *testing.T) {
	addr := startEmbedded(t)
	t.Setenv("SPINDLE_META", addr) // as a user would
	dir := t.TempDir()
	value := make([]byte, 3<<20+12345)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range value {
		value[i] = byte(r.Uint32())
	}
	src := filepath.Join(dir, "value")
	if err := os.WriteFile(src, value, 0o644); err != nil {
		t.Fatal(err)
	}
	must := func(stdin []byte, args ...string) string {
		t.Helper()
		out, errOut, err := runIn(t, stdin, args...)
		if err != nil {
			t.Fatalf("spindle %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	must(nil, "bucket", "create", "demo")
	out := must(nil, "put", "--chunk-size", "256KiB", "--block-size", "1MiB", "demo/dir/value", src)
	if !strings.Contains(out, fmt.Sprintf("demo/dir/value\t%d bytes", len(value))) || !strings.Contains(out, "4 blocks") {
		t.Errorf("put printed %q", out)
	}
	must([]byte("hello, spindle\n"), "put", "demo/hello", "-")

	// get to a file, to stdout, a range
	oldMask := syscall.Umask(0o022) // what a get creates is checked below
	defer syscall.Umask(oldMask)
	dst := filepath.Join(dir, "copy")
	must(nil, "get", "demo/dir/value", dst)
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("get to a file: %d bytes, %v", len(got), err)
	}
	if out := must(nil, "get", "demo/hello"); out != "hello, spindle\n" {
		t.Errorf("get to stdout: %q", out)
	}
	if out := must(nil, "get", "--offset", "7", "--length", "7", "demo/hello", "-"); out != "spindle" {
		t.Errorf("ranged get: %q", out)
	}
	if out := must(nil, "get", "--offset", "1048570", "--length", "20", "demo/dir/value"); out != string(value[1048570:1048590]) {
		t.Errorf("ranged get across blocks: %q", out)
	}

	// A file a get creates has the permissions the umask leaves; an
	// existing one is replaced only with --force.
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("get created %s with mode %v (%v), want 0644 under umask 022", dst, st.Mode().Perm(), err)
	}
	// A person (a terminal) is asked for --force; a script replaces the
	// file, as cp does (the shared acceptance checks get keys into one
	// file again and again).
	asPerson(t, true)
	_, _, err := runIn(t, nil, "get", "demo/hello", dst)
	wantExit(t, err, cli.ExitUsage, "exists: use --force")
	must(nil, "get", "--force", "demo/hello", dst)
	if got, err := os.ReadFile(dst); err != nil || string(got) != "hello, spindle\n" {
		t.Errorf("get --force: %q, %v", got, err)
	}
	asPerson(t, false)
	if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	must(nil, "get", "demo/hello", dst)
	if got, err := os.ReadFile(dst); err != nil || string(got) != "hello, spindle\n" {
		t.Errorf("a script's get over an existing file: %q, %v", got, err)
	}
	// A range past the end gives what exists, as S3 does.
	if out := must(nil, "get", "--offset", "7", "--length", "1000", "demo/hello"); out != "spindle\n" {
		t.Errorf("ranged get past the end: %q", out)
	}
	if out := must(nil, "get", "--offset", "15", "demo/hello"); out != "" {
		t.Errorf("get from the end: %q", out)
	}
	// put --size N: an input of exactly N bytes is stored.
	must([]byte("12345"), "put", "--size", "5", "demo/sized", "-")
	if out := must(nil, "get", "demo/sized"); out != "12345" {
		t.Errorf("put --size: got back %q", out)
	}
	must(nil, "rm", "demo/sized")

	out = must(nil, "ls", "demo")
	if !strings.Contains(out, "dir/value") || !strings.Contains(out, "hello") || !strings.Contains(out, fmt.Sprint(len(value))) {
		t.Errorf("ls: %q", out)
	}
	if out := must(nil, "ls", "demo/dir/"); strings.Contains(out, "hello") || !strings.Contains(out, "dir/value") {
		t.Errorf("ls with a prefix: %q", out)
	}
	// Keys left-aligned after time and size; pages of --max keys.
	lines := strings.Split(strings.TrimSuffix(must(nil, "ls", "demo"), "\n"), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], fmt.Sprintf(" %12d dir/value", len(value))) || !strings.HasSuffix(lines[1], fmt.Sprintf(" %12d hello", 15)) ||
		len(lines[0])-len("dir/value") != len(lines[1])-len("hello") {
		t.Errorf("ls: keys not in a left-aligned last column: %q", lines)
	}
	out, errOut, err := runIn(t, nil, "ls", "--max", "1", "demo")
	if err != nil || !strings.HasSuffix(out, " dir/value\n") || strings.Contains(out, "hello") || !strings.Contains(errOut, `--start-after "dir/value"`) {
		t.Errorf("ls --max 1: %q, %q, %v", out, errOut, err)
	}
	out, errOut, err = runIn(t, nil, "ls", "--max", "1", "--start-after", "dir/value", "demo")
	if err != nil || !strings.HasSuffix(out, " hello\n") || strings.Contains(out, "dir/value") || errOut != "" {
		t.Errorf("ls --max 1 --start-after dir/value: %q, %q, %v (want the last key and no \"more follow\")", out, errOut, err)
	}
	out = must(nil, "stat", "demo/dir/value")
	for _, w := range []string{"size:    3158073", "blocks:  4", "PIPELINE"} {
		if !strings.Contains(out, w) {
			t.Errorf("stat: %q lacks %q", out, w)
		}
	}
	if out := must(nil, "bucket", "ls"); !strings.Contains(out, "demo") {
		t.Errorf("bucket ls: %q", out)
	}
	for _, view := range []string{"nodes", "pipelines", "containers"} {
		if out := must(nil, "admin", view); len(strings.Split(strings.TrimSpace(out), "\n")) < 2 {
			t.Errorf("admin %s: %q", view, out)
		}
	}
	if out := must(nil, "admin", "nodes", "--json"); !strings.HasPrefix(out, "[") || !strings.Contains(out, "HEALTHY") {
		t.Errorf("admin nodes --json: %q", out)
	}
	if out := must(nil, "admin", "containers"); !strings.Contains(out, "BCSID") || !strings.Contains(out, "REPLICAS") {
		t.Errorf("admin containers: %q lacks the BCSID and REPLICAS columns", out)
	}
	if out := must(nil, "admin", "containers", "--json"); !strings.Contains(out, `"bcsid"`) {
		t.Errorf("admin containers --json: %q lacks bcsid", out)
	}

	// What goes wrong, and how it says so.
	_, _, err = runIn(t, nil, "get", "demo/missing", filepath.Join(dir, "missing"))
	wantExit(t, err, cli.ExitNotFound, "unknown key demo/missing")
	if _, err := os.Stat(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("a failed get left its file: %v", err)
	}
	_, _, err = runIn(t, nil, "stat", "nobucket/k")
	wantExit(t, err, cli.ExitNotFound, "unknown bucket nobucket")
	_, _, err = runIn(t, nil, "put", "Bad_Bucket/k", src)
	wantExit(t, err, cli.ExitUsage, "bucket name")
	_, _, err = runIn(t, nil, "put", "demo/../k", src)
	wantExit(t, err, cli.ExitUsage, `".." segment`)
	_, _, err = runIn(t, nil, "put", "demo", src)
	wantExit(t, err, cli.ExitUsage, "want BUCKET/KEY")
	_, _, err = runIn(t, nil, "put", "demo/k")
	wantExit(t, err, cli.ExitUsage, "accepts 2 arg(s)")
	_, _, err = runIn(t, nil, "put", "demo/k", filepath.Join(dir, "no-such-file"))
	wantExit(t, err, cli.ExitNotFound, "no such file")
	_, _, err = runIn(t, nil, "get", "--offset", "100", "demo/hello")
	wantExit(t, err, cli.ExitUsage, "past the end")
	_, _, err = runIn(t, nil, "get", "--no-such-flag", "demo/hello")
	wantExit(t, err, cli.ExitUsage, "unknown flag")
	_, _, err = runIn(t, nil, "bucket", "rm", "demo")
	wantExit(t, err, cli.ExitFailure, "bucket demo is not empty")
	_, _, err = runIn(t, nil, "bucket", "create", "demo")
	wantExit(t, err, cli.ExitFailure, "already exists")
	_, _, err = runIn(t, nil, "get", "--meta", "127.0.0.1:1", "--insecure", "demo/hello")
	wantExit(t, err, cli.ExitUnavailable, "meta unreachable at 127.0.0.1:1")

	must(nil, "rm", "demo/hello")
	_, _, err = runIn(t, nil, "rm", "demo/hello")
	wantExit(t, err, cli.ExitNotFound, "unknown key demo/hello")
	must(nil, "rm", "demo/dir/value")
	must(nil, "bucket", "rm", "demo")
	if out := must(nil, "bucket", "ls"); strings.Contains(out, "demo") {
		t.Errorf("bucket ls after rm: %q", out)
	}
}

// A meta service without datanodes: a put of a value too big to be
// stored inline says there is no healthy pipeline, exits 4, and leaves no
// key; a small value is stored inline and needs no datanode.
func TestPutWithoutPipeline(t *testing.T) {
	t.Setenv("SPINDLE_INSECURE", "true") // a plaintext meta service; as a user would
	ms, err := meta.Start(meta.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, ms) })
	addr := ms.Addr()
	if _, _, err := runIn(t, nil, "bucket", "create", "--meta", addr, "empty"); err != nil {
		t.Fatal(err)
	}
	_, _, err = runIn(t, bytes.Repeat([]byte("x"), keyclient.DefaultInlineMaxBytes+1), "put", "--meta", addr, "empty/k", "-")
	wantExit(t, err, cli.ExitUnavailable, "no healthy pipeline")
	_, _, err = runIn(t, nil, "stat", "--meta", addr, "empty/k")
	wantExit(t, err, cli.ExitNotFound, "unknown key empty/k")
	if _, _, err := runIn(t, []byte("some bytes"), "put", "--meta", addr, "empty/small", "-"); err != nil {
		t.Fatalf("an inline put without datanodes: %v", err)
	}
	if out, _, err := runIn(t, nil, "get", "--meta", addr, "empty/small", "-"); err != nil || out != "some bytes" {
		t.Fatalf("get of the inline value: %q, %v", out, err)
	}
	if out, _, err := runIn(t, nil, "stat", "--meta", addr, "empty/small"); err != nil || !strings.Contains(out, "stored:  inline") {
		t.Fatalf("stat of the inline value: %q, %v", out, err)
	}
	if out, _, err := runIn(t, nil, "stat", "--json", "--meta", addr, "empty/small"); err != nil || strings.Contains(out, "inline") {
		t.Fatalf("stat --json of the inline value prints it: %q, %v", out, err)
	}
}

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
	}{
		{nil, 0},
		{errors.New("boom"), cli.ExitFailure},
		{cli.UsageErr(errors.New("x")), cli.ExitUsage},
		{fmt.Errorf("wrapped: %w", cli.Exit(cli.ExitCorrupt, errors.New("bad"))), cli.ExitCorrupt},
		{errors.New(`unknown command "frob" for "spindle"`), cli.ExitUsage},
	} {
		if got := cli.ExitCode(c.err); got != c.code {
			t.Errorf("cli.ExitCode(%v) = %d, want %d", c.err, got, c.code)
		}
	}
	if !strings.Contains(newRootCmd().Long, "4 unavailable: meta service unreachable") {
		t.Error("the exit statuses are not in the help")
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A progress bar ends, drawn, whether the transfer succeeded or not and
// whether its total was known or not.
func TestTransferProgressEnds(t *testing.T) {
	for _, c := range []struct {
		total int64
		ok    bool
	}{{1000, true}, {1000, false}, {-1, true}, {-1, false}, {0, true}} {
		var buf bytes.Buffer
		tp := newTransferProgress(0)
		tp.stopped.Add(1)
		go tp.run(&buf, "put b/k", c.total)
		<-tp.drawing
		tp.set(max(c.total, 700) / 2)
		if c.ok {
			tp.set(max(c.total, 700))
		}
		tp.finish(c.ok) // returns only once the bar has ended
		if !strings.Contains(buf.String(), "put b/k") {
			t.Errorf("total %d, ok %v: drew %q", c.total, c.ok, buf.String())
		}
	}
}

// asPerson makes the commands see a person at a terminal (true) or a
// script (false) for the rest of the test.
func asPerson(t *testing.T, person bool) {
	t.Helper()
	old := interactive
	t.Cleanup(func() { interactive = old })
	interactive = func(*cobra.Command) bool { return person }
}
