package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/audit"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Issue 32's attack suite (items 1, 4 and 5), against a real `spindle
// server` process with TLS (this test binary as spindle): each hole tried
// and refused, then allowed with the grant.
//
//   - natively: a client certificate without a grant (mallory) cannot
//     overwrite, delete, read the metadata of, list or create a key in a
//     bucket the admin made; with write it may create keys but not
//     overwrite one; with write and delete it overwrites; with read it
//     reads; a revoked grant refuses again;
//   - for the S3 gateway: the gateway's certificate naming an S3 user
//     (bob) without a grant cannot overwrite, delete or read a key of
//     another user's (alice's) bucket; with bob's grants it can; the
//     gateway's certificate naming nobody has no rights;
//   - the audit log beside the meta store has the refusals and the
//     overwrites, with who and from where;
//   - get -r with a planted "backup../x" key writes nothing outside DIR
//     and exits non-zero, the other keys got.
//
// Fails with each check removed (verified by hand, 2026-12-06): authz.Check
// allowing everything (mallory's overwrite, rm, stat, get: exit 0 or 3, not
// 6); the commit's check skipped (her overwrite and new key land); the
// delete needed by an overwrite skipped (her write-only overwrite lands);
// the gateway's certificate taken for root whatever user it names (bob
// overwrites, deletes and reads alice's key); cli.TreePath without its
// IsLocal and boundary checks (get -r exits 0 and writes DIR/../x).
func TestAttackSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a spindle server")
	}
	metaAddr, srvDir := startServerProcess(t)
	t.Setenv("SPINDLE_META", metaAddr)
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	asAdmin := func(args ...string) string {
		t.Helper()
		out, stderr, err := runIn(t, nil, args...)
		if err != nil {
			t.Fatalf("%v as the admin: %v: %s", args, err, stderr)
		}
		return out
	}
	asAdmin("bucket", "create", "vault")
	asAdmin("put", "vault/secret", write("v1", "the admin's"))
	for _, k := range []string{"backup/a", "backup/sub/b", "backup../x"} {
		asAdmin("put", "vault/"+k, write("k", "planted "+k))
	}

	mallory := issue(t, srvDir, dir, "mallory", tlsconf.RoleClient)
	asMallory := func(args ...string) (string, error) {
		t.Helper()
		t.Setenv("SPINDLE_TLS_CERT", mallory.Cert)
		t.Setenv("SPINDLE_TLS_KEY", mallory.Key)
		t.Setenv("SPINDLE_TLS_CA", mallory.CA)
		defer func() {
			for _, k := range []string{"SPINDLE_TLS_CERT", "SPINDLE_TLS_KEY", "SPINDLE_TLS_CA"} {
				if err := os.Unsetenv(k); err != nil {
					t.Fatal(err)
				}
			}
		}()
		out, _, err := runIn(t, nil, args...)
		return out, err
	}
	refused := func(what string, err error) {
		t.Helper()
		if cli.ExitCode(err) != cli.ExitForbidden || !strings.Contains(fmt.Sprint(err), "forbidden") {
			t.Errorf("%s: exit %d (%v), want %d forbidden", what, cli.ExitCode(err), err, cli.ExitForbidden)
		}
	}
	value := func() string {
		t.Helper()
		return asAdmin("get", "vault/secret", "-")
	}
	evil := write("evil", "mallory's")

	// 1. No grant: nothing.
	_, err := asMallory("put", "vault/secret", evil)
	refused("overwrite without a grant", err)
	_, err = asMallory("rm", "vault/secret")
	refused("rm without a grant", err)
	_, err = asMallory("stat", "vault/secret")
	refused("stat without a grant", err)
	_, err = asMallory("get", "vault/secret", "-")
	refused("get without a grant", err)
	_, err = asMallory("ls", "vault")
	refused("ls without a grant", err)
	_, err = asMallory("put", "vault/new", evil)
	refused("a new key without a grant", err)
	if v := value(); v != "the admin's" {
		t.Fatalf("the key after the refused calls: %q", v)
	}
	// Mallory's own bucket is hers.
	if _, err := asMallory("bucket", "create", "mallorys"); err != nil {
		t.Fatalf("mallory creating a bucket: %v", err)
	}
	if _, err := asMallory("put", "mallorys/k", evil); err != nil {
		t.Fatalf("mallory putting into her bucket: %v", err)
	}
	if _, err := asMallory("put", "mallorys/k", evil); err != nil {
		t.Fatalf("mallory overwriting in her bucket: %v", err)
	}

	// 2. write: new keys, no overwrite (an overwrite deletes the old blocks).
	asAdmin("admin", "grant", "cert:mallory", "vault", "write")
	if _, err := asMallory("put", "vault/new", evil); err != nil {
		t.Fatalf("a new key with write: %v", err)
	}
	_, err = asMallory("put", "vault/secret", evil)
	refused("overwrite with write alone", err)
	_, err = asMallory("rm", "vault/secret")
	refused("rm with write alone", err)
	if v := value(); v != "the admin's" {
		t.Fatalf("the key after the refused overwrite: %q", v)
	}
	// 3. write and delete: overwrite; read: get.
	asAdmin("admin", "grant", "cert:mallory", "vault", "delete")
	if _, err := asMallory("put", "vault/secret", evil); err != nil {
		t.Fatalf("overwrite with write and delete: %v", err)
	}
	_, err = asMallory("get", "vault/secret", "-")
	refused("get without read", err)
	asAdmin("admin", "grant", "cert:mallory", "vault/backup", "read")
	if _, err := asMallory("stat", "vault/backup/a"); err != nil {
		t.Fatalf("stat under a prefix granted: %v", err)
	}
	_, err = asMallory("stat", "vault/backup../x")
	refused("stat beside the prefix granted (not on a '/' boundary)", err)
	asAdmin("admin", "grant", "cert:mallory", "vault", "read")
	if out, err := asMallory("get", "vault/secret", "-"); err != nil || out != "mallory's" {
		t.Fatalf("get with read: %q, %v", out, err)
	}
	var gs []authz.Grant
	if err := json.Unmarshal([]byte(asAdmin("admin", "grants", "vault", "--json")), &gs); err != nil || len(gs) != 2 {
		t.Fatalf("admin grants vault: %v %+v", err, gs)
	}
	asAdmin("admin", "revoke-grant", "cert:mallory", "vault", "read")
	_, err = asMallory("get", "vault/secret", "-")
	refused("get after the revoke", err)
	// Mallory may not grant herself anything.
	_, err = asMallory("admin", "grant", "cert:mallory", "vault", "admin")
	refused("granting herself admin", err)

	// 4. The S3 gateway's certificate, naming users.
	gwTLS, err := tlsconf.NewSettings(tlsconf.Files{Cert: filepath.Join(srvDir, "tls", "local-s3.crt"), Key: filepath.Join(srvDir, "tls", "local-s3.key"), CA: mallory.CA})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := metaapi.NewClient(metaAddr, metaapi.ClientOptions{TLS: gwTLS, NoBatching: true, Attempts: 1,
		HTTPClient: &http.Client{Transport: &authz.Transport{Base: gwTLS.HTTPTransport(&http.Transport{})}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := map[string]string{}
	for _, u := range []string{"alice", "bob"} {
		var cu metaapi.User
		if err := json.Unmarshal([]byte(asAdmin("admin", "user", "create", u, "--json")), &cu); err != nil {
			t.Fatal(err)
		}
		keys[u] = cu.AccessKey
	}
	alice, bob := authz.UserContext(ctx, keys["alice"]), authz.UserContext(ctx, keys["bob"])
	if _, err := gw.CreateS3Bucket(alice, "alices", metaapi.CreateS3Bucket{Owner: keys["alice"]}); err != nil {
		t.Fatal(err)
	}
	inline := func(v string) metaapi.CommitKey {
		return metaapi.CommitKey{Size: uint64(len(v)), CRC32C: crc32c.Checksum([]byte(v)), Inline: []byte(v)}
	}
	if _, err := gw.CommitKey(alice, "alices", "doc", inline("alice's")); err != nil {
		t.Fatalf("alice putting into her bucket: %v", err)
	}
	s3refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, metaapi.ErrForbidden) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}
	_, err = gw.CommitKey(bob, "alices", "doc", inline("bob's"))
	s3refused("bob overwriting alice's key", err)
	s3refused("bob deleting alice's key", gw.DeleteKey(bob, "alices", "doc"))
	_, err = gw.GetKey(bob, "alices", "doc")
	s3refused("bob reading alice's key", err)
	_, err = gw.ListKeys(bob, "alices", "", "", 10)
	s3refused("bob listing alice's bucket", err)
	_, err = gw.GetKey(ctx, "alices", "doc")
	s3refused("the gateway naming nobody", err)
	_, err = gw.GetKey(authz.UserContext(ctx, "AAAAAAAAAAAAAAAAAAAA"), "alices", "doc")
	s3refused("the gateway naming an unknown access key", err)
	for _, a := range []string{"read", "write", "delete"} {
		asAdmin("admin", "grant", "user:bob", "alices", a)
	}
	if _, err := gw.CommitKey(bob, "alices", "doc", inline("bob's")); err != nil {
		t.Fatalf("bob overwriting with write and delete: %v", err)
	}
	if ki, err := gw.GetKey(bob, "alices", "doc"); err != nil || string(ki.Inline) != "bob's" {
		t.Fatalf("bob reading with read: %q, %v", ki.Inline, err)
	}

	// 5. The audit log: the refusals and the overwrites.
	auditPath := filepath.Join(srvDir, "meta.audit.jsonl")
	has := func(want audit.Event) bool {
		f, err := os.Open(auditPath)
		if err != nil {
			return false
		}
		defer func() { _ = f.Close() }() // read only
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e audit.Event
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Who == want.Who && e.Action == want.Action && e.Bucket == want.Bucket &&
				e.Key == want.Key && e.Outcome == want.Outcome && strings.HasPrefix(e.Remote, "127.0.0.1:") {
				return true
			}
		}
		return false
	}
	for _, e := range []audit.Event{
		{Who: "cert:mallory", Action: "overwrite", Bucket: "vault", Key: "secret", Outcome: "refused"},
		{Who: "cert:mallory", Action: "overwrite", Bucket: "vault", Key: "secret", Outcome: "allowed"},
		{Who: "cert:mallory", Action: "delete_key", Bucket: "vault", Key: "secret", Outcome: "refused"},
		{Who: "cert:mallory", Action: "get_key", Bucket: "vault", Key: "secret", Outcome: "refused"},
		{Who: "cert:mallory", Action: "commit_key", Bucket: "vault", Key: "new", Outcome: "refused"},
		{Who: "cert:mallory", Action: "grant", Bucket: "vault", Outcome: "refused"},
		{Who: "access-key:" + keys["bob"] + " (through cert:" + tlsconf.LocalName(tlsconf.RoleS3) + ")", Action: "overwrite", Bucket: "alices", Key: "doc", Outcome: "refused"},
		{Who: "access-key:" + keys["bob"] + " (through cert:" + tlsconf.LocalName(tlsconf.RoleS3) + ")", Action: "overwrite", Bucket: "alices", Key: "doc", Outcome: "allowed"},
	} {
		waitFor(t, fmt.Sprintf("the audit line %+v", e), func() bool { return has(e) })
	}

	// 6. get -r: the planted key stays out of DIR's parent.
	out := filepath.Join(dir, "restore", "out")
	_, stderr, err := runIn(t, nil, "get", "-r", "vault/backup", out)
	if cli.ExitCode(err) == 0 || !strings.Contains(stderr, "backup../x") || !strings.Contains(fmt.Sprint(err), "outside") {
		t.Errorf("get -r with a planted key: exit %d (%v), stderr %q; want non-zero, the key named", cli.ExitCode(err), err, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "restore", "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("get -r wrote outside its directory: %v", err)
	}
	for _, f := range []string{"a", "sub/b"} {
		if b, err := os.ReadFile(filepath.Join(out, f)); err != nil || !bytes.HasPrefix(b, []byte("planted")) {
			t.Errorf("get -r: %s: %q, %v", f, b, err)
		}
	}
}

// startServerProcess starts `spindle server` (TLS, the default) as a
// child process and returns its meta address and --dir once ready.
func startServerProcess(t *testing.T) (metaAddr, srvDir string) {
	t.Helper()
	metaAddr, srvDir, _ = startServerProcessPID(t)
	return metaAddr, srvDir
}

// startServerProcessPID is startServerProcess that also returns the
// server's process ID.
func startServerProcessPID(t *testing.T) (metaAddr, srvDir string, pid int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	srvDir = filepath.Join(dir, "srv")
	cmd := exec.Command(exe, "server", "--dir", srvDir, "--meta-listen", "127.0.0.1:0",
		"--s3-listen", "127.0.0.1:0", "--console-listen", "off", "--ready-file", ready, "--log-level", "warn")
	cmd.Env = append(os.Environ(), asSpindleEnv+"=1")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, cmd)
	waitFor(t, "spindle server ready", func() bool {
		b, err := os.ReadFile(ready)
		if err == nil && bytes.Count(b, []byte("\n")) >= 2 {
			metaAddr = strings.SplitN(string(b), "\n", 2)[0]
			return true
		}
		return false
	})
	return metaAddr, srvDir, cmd.Process.Pid
}
