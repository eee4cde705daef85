package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/cli"
)

// TestCLIMistakes runs the command line's common mistakes, each as a user
// would type it, and checks that each is refused with a message that says
// what is wrong and the exit status the root help documents. One embedded
// cluster answers the ones that reach the meta service; it holds bucket
// "demo" with key "demo/hello" ("hello, spindle\n", 15 bytes).
func TestCLIMistakes(t *testing.T) {
	asPerson(t, true) // the mistakes of a person at a terminal
	addr := startEmbedded(t)
	t.Setenv("SPINDLE_META", addr)
	dir := t.TempDir()
	src := filepath.Join(dir, "five")
	if err := os.WriteFile(src, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(dir, "existing")
	if err := os.WriteFile(existing, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"bucket", "create", "demo"}, {"put", "demo/hello", "-"}} {
		if _, errOut, err := runIn(t, []byte("hello, spindle\n"), args...); err != nil {
			t.Fatalf("spindle %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
	}
	const unreachable = "127.0.0.1:1" // nothing listens on port 1

	for _, c := range []struct {
		args  []string
		stdin string
		code  int
		want  string
		// absent, when set, is a key the mistake must not have created.
		absent string
	}{
		// Commands that do not exist, or are missing.
		{args: []string{"frobnicate"}, code: cli.ExitUsage, want: `unknown command "frobnicate" for "spindle"`},
		{args: []string{"bench", "nonsense"}, code: cli.ExitUsage, want: `unknown command "nonsense" for "spindle bench"`},
		{args: []string{"report", "runn"}, code: cli.ExitUsage, want: "did you mean run?"},
		{args: []string{"admin", "nodez"}, code: cli.ExitUsage, want: "did you mean nodes?"},
		{args: []string{"admin", "safemode", "leave"}, code: cli.ExitUsage, want: `unknown command "leave" for "spindle admin safemode"`},
		{args: []string{"bucket", "destroy", "demo"}, code: cli.ExitUsage, want: `unknown command "destroy" for "spindle bucket"`},
		{args: []string{"bench"}, code: cli.ExitUsage, want: "spindle bench needs a command: baseline,"},
		{args: []string{"admin"}, code: cli.ExitUsage, want: "spindle admin needs a command"},
		{args: []string{"admin", "meta", "bakup", "/tmp/x"}, code: cli.ExitUsage, want: `unknown command "bakup" for "spindle admin meta"`},
		// Flags.
		{args: []string{"get", "--bogus", "demo/hello"}, code: cli.ExitUsage, want: "unknown flag: --bogus"},
		{args: []string{"put", "-x", "demo/k", src}, code: cli.ExitUsage, want: "unknown shorthand flag: 'x'"},
		{args: []string{"ls", "demo", "--max"}, code: cli.ExitUsage, want: "flag needs an argument: --max"},
		{args: []string{"ls", "--max", "-3", "demo"}, code: cli.ExitUsage, want: "--max -3"},
		{args: []string{"put", "--chunk-size", "12XB", "demo/k", src}, code: cli.ExitUsage, want: `invalid argument "12XB"`},
		{args: []string{"--log-level", "loud", "version"}, code: cli.ExitUsage, want: `--log-level "loud"`},
		{args: []string{"--config", filepath.Join(dir, "no-such.json"), "version"}, code: cli.ExitUsage, want: "no-such.json"},
		{args: []string{"get", "--offset", "-1", "demo/hello"}, code: cli.ExitUsage, want: "--offset -1"},
		// Arguments.
		{args: []string{"put"}, code: cli.ExitUsage, want: "accepts 2 arg(s), received 0"},
		{args: []string{"put", "demo/k"}, code: cli.ExitUsage, want: "accepts 2 arg(s), received 1"},
		{args: []string{"get"}, code: cli.ExitUsage, want: "accepts between 1 and 2 arg(s)"},
		{args: []string{"rm"}, code: cli.ExitUsage, want: "accepts 1 arg(s), received 0"},
		{args: []string{"stat", "demo/a", "demo/b"}, code: cli.ExitUsage, want: "accepts 1 arg(s), received 2"},
		{args: []string{"version", "extra"}, code: cli.ExitUsage, want: `unknown command "extra" for "spindle version"`},
		// Names.
		{args: []string{"put", "demo", src}, code: cli.ExitUsage, want: "want BUCKET/KEY"},
		{args: []string{"put", "Bad_Bucket/k", src}, code: cli.ExitUsage, want: "bucket name"},
		{args: []string{"put", "demo/../k", src}, code: cli.ExitUsage, want: `".." segment`},
		{args: []string{"bucket", "create", "ab"}, code: cli.ExitUsage, want: "bucket name"},
		{args: []string{"ls", "UPPER"}, code: cli.ExitUsage, want: "bucket name"},
		{args: []string{"--meta", "http://x/some/path", "ls", "demo"}, code: cli.ExitUsage, want: "--meta"},
		// Files.
		{args: []string{"get", "demo/hello", existing}, code: cli.ExitUsage, want: "exists: use --force to replace it"},
		{args: []string{"get", "demo/hello", dir}, code: cli.ExitUsage, want: "is a directory"},
		{args: []string{"put", "demo/k", filepath.Join(dir, "no-such-file")}, code: cli.ExitNotFound, want: "no such file", absent: "k"},
		{args: []string{"put", "demo/k", dir}, code: cli.ExitUsage, want: "is a directory", absent: "k"},
		// Sizes and ranges.
		{args: []string{"put", "--size", "10", "demo/short", "-"}, stdin: "12345", code: cli.ExitUsage, want: "the input ended after 5 of --size 10 bytes", absent: "short"},
		{args: []string{"put", "--size", "3", "demo/long", "-"}, stdin: "12345", code: cli.ExitUsage, want: "the input goes on past --size 3 bytes", absent: "long"},
		{args: []string{"put", "--size", "4", "demo/file", src}, code: cli.ExitUsage, want: "has 5 bytes, --size says 4", absent: "file"},
		{args: []string{"put", "--size", "-4", "demo/neg", "-"}, code: cli.ExitUsage, want: "--size", absent: "neg"},
		{args: []string{"get", "--offset", "100", "demo/hello"}, code: cli.ExitUsage, want: "--offset 100 is past the end of the 15-byte value"},
		// What is not there.
		{args: []string{"get", "demo/missing"}, code: cli.ExitNotFound, want: "unknown key demo/missing"},
		{args: []string{"stat", "nobucket/k"}, code: cli.ExitNotFound, want: "unknown bucket nobucket"},
		{args: []string{"rm", "demo/missing"}, code: cli.ExitNotFound, want: "unknown key demo/missing"},
		{args: []string{"ls", "nobucket"}, code: cli.ExitNotFound, want: "unknown bucket nobucket"},
		// Conflicts.
		{args: []string{"bucket", "create", "demo"}, code: cli.ExitFailure, want: "bucket demo already exists"},
		{args: []string{"bucket", "rm", "demo"}, code: cli.ExitFailure, want: "bucket demo is not empty"},
		// An unreachable service (plaintext: no local server wrote how to
		// reach it), and one of which nothing says how to reach it.
		{args: []string{"--meta", unreachable, "ls", "--insecure", "demo"}, code: cli.ExitUnavailable, want: "meta unreachable at 127.0.0.1:1"},
		{args: []string{"--meta", unreachable, "bucket", "ls", "--insecure"}, code: cli.ExitUnavailable, want: "meta unreachable at 127.0.0.1:1"},
		{args: []string{"--meta", unreachable, "admin", "nodes", "--insecure"}, code: cli.ExitUnavailable, want: "meta unreachable at 127.0.0.1:1"},
		{args: []string{"--meta", unreachable, "put", "--insecure", "demo/k", src}, code: cli.ExitUnavailable, want: "meta unreachable at 127.0.0.1:1"},
		{args: []string{"--meta", unreachable, "ls", "demo"}, code: cli.ExitUsage, want: "no TLS settings for the meta service at 127.0.0.1:1: give --tls-cert, --tls-key and --tls-ca, or --insecure"},
		{args: []string{"ls", "--insecure", "--tls-ca", "ca.crt", "demo"}, code: cli.ExitUsage, want: "--insecure with --tls-cert/--tls-key/--tls-ca: choose one"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			// --meta given as a global flag is a flag of the key commands:
			// move it after the command, as cobra wants it.
			args := c.args
			if args[0] == "--meta" {
				args = append(append([]string{}, args[2:]...), args[:2]...)
			}
			_, stderr, err := runIn(t, []byte(c.stdin), args...)
			wantExit(t, err, c.code, c.want)
			if err != nil && !strings.Contains(stderr, err.Error()) {
				t.Errorf("stderr %q does not show the error %q", stderr, err)
			}
			if c.absent != "" {
				_, _, err := runIn(t, nil, "stat", "demo/"+c.absent)
				wantExit(t, err, cli.ExitNotFound, "unknown key demo/"+c.absent)
			}
		})
	}
	if got, err := os.ReadFile(existing); err != nil || string(got) != "keep me" {
		t.Errorf("the existing file holds %q (%v) after a get without --force", got, err)
	}
}
