package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/buildinfo"
	"github.com/spindle-store/spindle/internal/units"
)

// run executes the command tree in-process; extra commands are added under
// "bench" first (tests use them to observe flag resolution).
func run(t *testing.T, args []string, extra ...*cobra.Command) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCmd()
	if len(extra) > 0 {
		b, _, ferr := root.Find([]string{"bench"})
		if ferr != nil {
			t.Fatal(ferr)
		}
		b.AddCommand(extra...)
	}
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// lastJSON returns the last stdout line that parses as a JSON object, as the
// acceptance checks read it.
func lastJSON(t *testing.T, stdout string) map[string]any {
	t.Helper()
	var obj map[string]any
	for _, line := range strings.Split(stdout, "\n") {
		line = strings.TrimSpace(line)
		var m map[string]any
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &m) == nil {
			obj = m
		}
	}
	if obj == nil {
		t.Fatalf("no JSON object on stdout %q", stdout)
	}
	return obj
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, []string{"version"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != buildinfo.String() {
		t.Errorf("version printed %q, want %q", out, buildinfo.String())
	}
	out, _, err = run(t, []string{"version", "--json"})
	if err != nil {
		t.Fatal(err)
	}
	m := lastJSON(t, out)
	for _, k := range []string{"version", "commit", "go"} {
		if s, _ := m[k].(string); s == "" {
			t.Errorf("version --json lacks %q: %s", k, out)
		}
	}
	t.Setenv("SPINDLE_VERSION", "1.2.3") // unrelated variable: must not reach cobra's --version
	out, _, err = run(t, []string{"--version"})
	if err != nil || !strings.Contains(out, buildinfo.Version) {
		t.Errorf("--version: %q, %v", out, err)
	}
}

func TestBenchBaselineJSON(t *testing.T) {
	dir := t.TempDir()
	out, _, err := run(t, []string{"bench", "baseline", "--dir", dir, "--chunk-size", "4KiB", "--writers", "2", "--max-ops", "50", "--json"})
	if err != nil {
		t.Fatal(err)
	}
	m := lastJSON(t, out)
	if m["scenario"] != "baseline" || m["ops"].(float64) != 50 || m["bytes"].(float64) != 50*4096 {
		t.Errorf("result %v", m)
	}
	for _, k := range []string{"seconds", "ops_per_s", "mb_per_s", "latency_us"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("baseline left files: %v", entries)
	}
}

func TestBenchBaselineTable(t *testing.T) {
	out, _, err := run(t, []string{"bench", "baseline", "--dir", t.TempDir(), "--chunk-size", "1KiB", "--writers", "1", "--max-ops", "5"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "ops/s") || !strings.Contains(out, "baseline") || strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Errorf("table output %q", out)
	}
}

func TestBenchBaselineRejectsBadSize(t *testing.T) {
	_, stderr, err := run(t, []string{"bench", "baseline", "--chunk-size", "1XB", "--max-ops", "1"})
	if err == nil || !strings.Contains(stderr, "chunk-size") {
		t.Errorf("bad --chunk-size: err %v, stderr %q", err, stderr)
	}
}

// probe is a test command whose flags show where their values came from.
type probe struct {
	size    units.ByteSize
	writers int
	name    string
	tags    []string
	ran     bool
}

func newProbe() (*probe, *cobra.Command) {
	p := &probe{size: units.ByteSize(units.MiB)}
	cmd := &cobra.Command{Use: "probe", RunE: func(*cobra.Command, []string) error { p.ran = true; return nil }}
	cmd.Flags().Var(&p.size, "chunk-size", "")
	cmd.Flags().IntVar(&p.writers, "writers", 1, "")
	cmd.Flags().StringVar(&p.name, "name", "default", "")
	cmd.Flags().StringSliceVar(&p.tags, "tags", nil, "")
	return p, cmd
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spindle.json")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFlagPrecedence(t *testing.T) {
	cfg := writeConfig(t, `{
		"bench probe": {"chunk-size": "4KiB", "writers": 3, "tags": ["a", "b"]},
		"bench":       {"name": "from-bench-section", "writers": 99, "duration": "1s"},
		"spindle":     {"log-level": "warn"}
	}`)
	tests := []struct {
		name        string
		args        []string
		env         map[string]string
		wantSize    int64
		wantWriters int
		wantName    string
		wantTags    []string
	}{
		{"defaults", nil, nil, units.MiB, 1, "default", nil},
		{"config", []string{"--config", cfg}, nil, 4 * units.KiB, 3, "from-bench-section", []string{"a", "b"}},
		{"env over config", []string{"--config", cfg}, map[string]string{"SPINDLE_WRITERS": "5", "SPINDLE_TAGS": "x,y"}, 4 * units.KiB, 5, "from-bench-section", []string{"x", "y"}},
		{"flag over env", []string{"--config", cfg, "--writers", "7", "--chunk-size", "2KiB"}, map[string]string{"SPINDLE_WRITERS": "5"}, 2 * units.KiB, 7, "from-bench-section", []string{"a", "b"}},
		{"config path from env", nil, map[string]string{"SPINDLE_CONFIG": cfg, "SPINDLE_NAME": "env-name"}, 4 * units.KiB, 3, "env-name", []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			p, cmd := newProbe()
			if _, stderr, err := run(t, append([]string{"bench", "probe"}, tt.args...), cmd); err != nil {
				t.Fatalf("%v: %s", err, stderr)
			}
			if !p.ran {
				t.Fatal("probe did not run")
			}
			if p.size.Int64() != tt.wantSize || p.writers != tt.wantWriters || p.name != tt.wantName || strings.Join(p.tags, ",") != strings.Join(tt.wantTags, ",") {
				t.Errorf("got size %d writers %d name %q tags %v; want %d %d %q %v",
					p.size, p.writers, p.name, p.tags, tt.wantSize, tt.wantWriters, tt.wantName, tt.wantTags)
			}
		})
	}
}

// $NAME and ${NAME} in a config file's values are the environment's
// (deploy/'s files take a host's values so), in lists too; a value
// without them is taken as it is.
func TestConfigExpandsEnvironment(t *testing.T) {
	cfg := writeConfig(t, `{"bench probe": {"name": "${HOST_NAME}-$HOST_ID", "tags": ["${HOST_NAME}", "b"], "chunk-size": "$SIZE"}}`)
	t.Setenv("HOST_NAME", "spindle2")
	t.Setenv("HOST_ID", "2")
	t.Setenv("SIZE", "4KiB")
	p, cmd := newProbe()
	if _, stderr, err := run(t, []string{"bench", "probe", "--config", cfg}, cmd); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if p.name != "spindle2-2" || strings.Join(p.tags, ",") != "spindle2,b" || p.size.Int64() != 4*units.KiB {
		t.Errorf("name %q tags %v size %d, want spindle2-2 [spindle2 b] 4096", p.name, p.tags, p.size)
	}
	t.Setenv("HOST_NAME", "")
	p, cmd = newProbe()
	if _, stderr, err := run(t, []string{"bench", "probe", "--config", cfg}, cmd); err != nil {
		t.Fatalf("a variable set empty: %v: %s", err, stderr)
	}
	if p.name != "-2" {
		t.Errorf("name %q with HOST_NAME empty, want -2", p.name)
	}
}

func TestConfigAppliesToRealCommand(t *testing.T) {
	cfg := writeConfig(t, `{"bench baseline": {"max-ops": 20, "chunk-size": "1KiB", "writers": 2, "duration": "0s"}}`)
	out, stderr, err := run(t, []string{"--config", cfg, "bench", "baseline", "--dir", t.TempDir(), "--json"})
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	m := lastJSON(t, out)
	if m["ops"].(float64) != 20 || m["bytes"].(float64) != 20*1024 {
		t.Errorf("config not applied: %v", m)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"unknown flag", `{"bench probe": {"chunk-sise": "1KiB"}}`, "chunk-sise: no such flag"},
		{"unknown section", `{"bench nope": {"writers": 1}}`, `"bench nope" names no spindle command`},
		{"flag absent from subtree", `{"version": {"writers": 1}}`, "writers: no such flag"},
		{"bad value", `{"bench probe": {"writers": "many"}}`, "[bench probe] writers"},
		{"bad size", `{"bench probe": {"chunk-size": "1XB"}}`, "unknown unit"},
		{"list for scalar", `{"bench probe": {"writers": [1, 2]}}`, "list given"},
		{"object value", `{"bench probe": {"name": {"a": 1}}}`, "want a string"},
		{"not an object", `["bench probe"]`, "want a JSON object"},
		{"trailing data", `{} {}`, "trailing data"},
		{"nested config", `{"": {"config": "other.json"}}`, "cannot name another config"},
		{"built-in flag", `{"": {"help": true}}`, "built-in flag"},
		{"unset variable", `{"bench probe": {"name": "${SPINDLE_TEST_UNSET_A}-$SPINDLE_TEST_UNSET_B"}}`, "$SPINDLE_TEST_UNSET_A, $SPINDLE_TEST_UNSET_B not set in the environment"},
		{"unset variable in a list", `{"bench probe": {"tags": ["a", "${SPINDLE_TEST_UNSET_A}"]}}`, "[bench probe] tags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := writeConfig(t, tt.body)
			_, cmd := newProbe()
			_, stderr, err := run(t, []string{"bench", "probe", "--config", cfg}, cmd)
			if err == nil {
				t.Fatalf("accepted config %s", tt.body)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(stderr, tt.want) {
				t.Errorf("error %q (stderr %q) does not mention %q", err, stderr, tt.want)
			}
		})
	}
	_, cmd := newProbe()
	if _, _, err := run(t, []string{"bench", "probe", "--config", filepath.Join(t.TempDir(), "missing.json")}, cmd); err == nil {
		t.Error("missing config file accepted")
	}
	t.Setenv("SPINDLE_WRITERS", "lots")
	_, cmd = newProbe()
	if _, _, err := run(t, []string{"bench", "probe"}, cmd); err == nil || !strings.Contains(err.Error(), "SPINDLE_WRITERS") {
		t.Errorf("bad environment value: err %v", err)
	}
}

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{"chunk-size": "SPINDLE_CHUNK_SIZE", "log-level": "SPINDLE_LOG_LEVEL", "json": "SPINDLE_JSON"} {
		if got := envName(flag); got != want {
			t.Errorf("envName(%q) = %q, want %q", flag, got, want)
		}
	}
}

func TestLogLevel(t *testing.T) {
	if _, _, err := run(t, []string{"--log-level", "loud", "version"}); err == nil {
		t.Error("--log-level loud accepted")
	}
	// Debug logging names the source of every flag not set on the command
	// line; SPINDLE_JSON also shows that the environment reaches any command.
	t.Setenv("SPINDLE_JSON", "true")
	out, stderr, err := run(t, []string{"--log-level", "debug", "version"})
	if err != nil {
		t.Fatal(err)
	}
	lastJSON(t, out)
	if !strings.Contains(stderr, "level=DEBUG") || !strings.Contains(stderr, "from=\"env SPINDLE_JSON\"") {
		t.Errorf("debug log %q lacks the source of --json", stderr)
	}
	if _, stderr, _ = run(t, []string{"version"}); strings.Contains(stderr, "DEBUG") {
		t.Errorf("debug lines at the default level: %q", stderr)
	}
}

// writeCounter counts the writes made to it.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// TestHelpIsOneWrite: a command's help reaches stdout in one write, so
// that `spindle server --help | grep -q -- --insecure` under pipefail
// cannot kill spindle with SIGPIPE on a later piece once grep has matched
// and gone (cobra's template wrote three pieces; the scripted checks'
// insecure() then saw a failed pipeline and started the server with TLS).
func TestHelpIsOneWrite(t *testing.T) {
	for _, args := range [][]string{{"server", "--help"}, {"--help"}, {"bench", "chunk-write", "--help"}} {
		root := newRootCmd()
		var out writeCounter
		root.SetOut(&out)
		root.SetErr(io.Discard)
		root.SetArgs(args)
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if out.writes != 1 || out.Len() < 100 {
			t.Fatalf("%v: help in %d writes (%d bytes), want one", args, out.writes, out.Len())
		}
	}
	root := newRootCmd()
	var out writeCounter
	root.SetOut(&out)
	root.SetArgs([]string{"server", "--help"})
	if err := root.ExecuteContext(context.Background()); err != nil || !strings.Contains(out.String(), "--insecure") {
		t.Fatalf("server --help: %v, no --insecure in it", err)
	}
}
