package meta

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/credapi"
	"github.com/spindle-store/spindle/internal/kek"
	"github.com/spindle-store/spindle/internal/meta/raftgroup"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/vfs"
)

// sharedKEK makes every member of a test group take the keyring file
// path (as members given the same --kek-file).
func sharedKEK(path string, then func(*state.Config)) func(*state.Config) {
	return func(c *state.Config) {
		c.KEKFile = path
		if then != nil {
			then(c)
		}
	}
}

// grepDir returns the files under dir that hold needle.
func grepDir(t *testing.T, dir string, needle []byte) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, needle) {
			hits = append(hits, p)
		}
		return nil
	})
	mustNo(t, err)
	return hits
}

// TestSecretsSealedAtRest (issue 33 item 4): an S3 secret created, and one
// set, are found in none of the members' files (raft logs, stores,
// checkpoints), in no snapshot stream and in no backup, while the users
// work: every member, made leader, opens them. Fails without sealing
// (namespace.S3Users storing the secret as given).
func TestSecretsSealedAtRest(t *testing.T) {
	keyring := filepath.Join(t.TempDir(), kek.DefaultFile)
	g := newRGroupWith(t, 3, sharedKEK(keyring, smallSnapshots))
	g.leader()
	const secret, secret2 = "Known-Secret-For-The-Grep-0001", "Second-Known-Secret-0002"
	u, err := g.cl.CreateUser(bg, metaapi.CreateUser{Name: "alice", AccessKey: "minioadmin", SecretKey: secret})
	mustNo(t, err)
	if u.SecretKey != secret {
		t.Fatalf("created user %+v", u)
	}
	if _, err := credapi.SetUserKeys(bg, g.cl, "bob", credapi.SetKeys{AccessKey: "bob-key", SecretKey: secret2}); err != nil {
		t.Fatal(err)
	}
	_, err = g.cl.CreateBucket(bg, "bkt")
	mustNo(t, err)
	g.dns()
	putKeys(t, g.cl, "bkt", "k", 40) // past SnapshotEntries: checkpoints, a compacted log
	// A snapshot stream, as a lagging member would receive it.
	resp, err := http.Get("http://" + g.addrs[g.leader()] + raftgroup.SnapshotRoute + "?min=1")
	mustNo(t, err)
	snap, err := io.ReadAll(resp.Body)
	mustClose(t, resp.Body)
	mustNo(t, err)
	if resp.StatusCode != http.StatusOK || len(snap) < 1000 {
		t.Fatalf("snapshot stream: %d, %d bytes", resp.StatusCode, len(snap))
	}
	body, err := g.cl.Backup(bg)
	mustNo(t, err)
	backup, err := io.ReadAll(body)
	mustClose(t, body)
	mustNo(t, err)
	for _, s := range []string{secret, secret2} {
		for _, d := range g.dirs {
			if hits := grepDir(t, d, []byte(s)); len(hits) > 0 {
				t.Errorf("secret %q in plaintext in %v", s, hits)
			}
		}
		if bytes.Contains(snap, []byte(s)) {
			t.Errorf("secret %q in the snapshot stream", s)
		}
		if bytes.Contains(backup, []byte(s)) {
			t.Errorf("secret %q in the backup", s)
		}
	}
	// The access keys are not secret: the records are there.
	if !bytes.Contains(backup, []byte("minioadmin")) {
		t.Error("the backup lacks the user record (the grep proves nothing)")
	}
	for i := range g.srvs {
		g.handOver(i)
		got, err := g.cl.UserByAccessKey(bg, "minioadmin")
		if err != nil || got.SecretKey != secret {
			t.Fatalf("member %d leading: %+v, %v", i+1, got, err)
		}
	}
}

// TestKEKRotation: a rotation is refused while a member's keyring lacks
// the leader's current key (members with keyrings of their own), and
// changes nothing; with the new key in the shared keyring file every
// secret is sealed under it, and a plaintext record (a store written
// before sealing) is sealed too.
func TestKEKRotation(t *testing.T) {
	own := newRGroup(t, 3) // each member's keyring beside its own directory
	own.leader()
	_, err := own.cl.CreateUser(bg, metaapi.CreateUser{Name: "alice"})
	mustNo(t, err)
	_, err = credapi.RotateKEK(bg, own.cl)
	if !errors.Is(err, metaapi.ErrInvalid) || !strings.Contains(err.Error(), "lacks key") {
		t.Fatalf("rotation with members of other keyrings: %v", err)
	}

	keyring := filepath.Join(t.TempDir(), kek.DefaultFile)
	g := newRGroupWith(t, 3, sharedKEK(keyring, nil))
	l := g.leader()
	for _, n := range []string{"alice", "bob"} {
		_, err := g.cl.CreateUser(bg, metaapi.CreateUser{Name: n})
		mustNo(t, err)
	}
	// A record of before sealing, written as it was.
	svc := g.srvs[l].Service()
	_, err = state.Mutate(svc.State, func() (struct{}, *pebble.Batch, error) {
		rec := state.UserRecord{AccessKey: "OLDKEY", SecretKey: "plaintext-secret-1"}
		b := svc.Store.NewBatch()
		state.Set(b, state.UserKey("carol"), rec.Encode())
		svc.S3.Users["carol"], svc.S3.ByAccess["OLDKEY"] = rec, "carol"
		return struct{}{}, b, nil
	})
	mustNo(t, err)
	rot, err := credapi.RotateKEK(bg, g.cl)
	mustNo(t, err)
	if rot.Resealed != 1 || len(rot.Members) != 3 {
		t.Fatalf("first rotation (the plaintext record only): %+v", rot)
	}
	id, err := kek.AddKey(vfs.Default, keyring)
	mustNo(t, err)
	rot, err = credapi.RotateKEK(bg, g.cl)
	mustNo(t, err)
	if rot.KeyID != id || rot.Resealed != 3 {
		t.Fatalf("rotation to %s: %+v", id, rot)
	}
	svc = g.srvs[g.leader()].Service()
	for name, u := range svc.S3.Users {
		if got, err := kek.KeyID(u.Sealed); err != nil || got != id || u.SecretKey != "" {
			t.Errorf("user %s after rotation: key %s (%v), plaintext %q", name, got, err, u.SecretKey)
		}
	}
	got, err := g.cl.UserByAccessKey(bg, "OLDKEY")
	if err != nil || got.SecretKey != "plaintext-secret-1" {
		t.Fatalf("the formerly plaintext user: %+v, %v", got, err)
	}
	if rot, err = credapi.RotateKEK(bg, g.cl); err != nil || rot.Resealed != 0 {
		t.Fatalf("a second rotation: %+v, %v", rot, err)
	}
	st, err := credapi.GetKEKStatus(bg, g.cl)
	if err != nil || st.Current != id || len(st.Keys) != 2 || st.Source != keyring {
		t.Fatalf("keyring status: %+v, %v", st, err)
	}
}

// TestUserKeysAsOtherStores (issue 33 item 5): access keys of 3..128
// letters of both cases, digits and -_.@+ (minioadmin), secrets of 8..128;
// setting a user's keys replaces them: the root user's key changed leaves
// one root user, its old key gone.
func TestUserKeysAsOtherStores(t *testing.T) {
	c := threeNodes(t, nil)
	for _, k := range [][2]string{{"minioadmin", "minioadmin"}, {"abc", "12345678"}, {"Svc.acct-1_x@y+z", "s3cr3t/with+slash="}} {
		_, err := c.s.CreateUser(&metaapi.CreateUser{Name: "u" + fmt.Sprint(len(k[0])), AccessKey: k[0], SecretKey: k[1]})
		mustNo(t, err)
	}
	for _, k := range [][2]string{{"ab", "12345678"}, {"a=b", "12345678"}, {"a,b", "12345678"}, {"a/b", "12345678"}, {"a b", "12345678"}, {"abcd", "1234567"}, {strings.Repeat("a", 129), "12345678"}} {
		_, err := c.s.CreateUser(&metaapi.CreateUser{Name: "bad", AccessKey: k[0], SecretKey: k[1]})
		wantErr(t, err, metaapi.ErrInvalid, fmt.Sprintf("keys %q", k))
	}
	first := must[*metaapi.User](t)(c.s.SetUserKeys("root", "GENERATEDROOT0000001", "generated-secret-1"))
	again := must[*metaapi.User](t)(c.s.SetUserKeys("root", "GENERATEDROOT0000001", "generated-secret-1"))
	if again.Created != first.Created {
		t.Fatalf("the same keys set again: %+v, then %+v", first, again)
	}
	must[*metaapi.User](t)(c.s.SetUserKeys("root", "AKIAEXAMPLE000000001", "example-secret-0123456789"))
	_, err := c.s.UserByAccessKey("GENERATEDROOT0000001")
	wantErr(t, err, metaapi.ErrNotFound, "the root user's old key")
	_, err = c.s.SetUserKeys("root", "minioadmin", "12345678")
	wantErr(t, err, metaapi.ErrExists, "another user's access key")
	l := must[*metaapi.UserList](t)(c.s.Users())
	roots := 0
	for _, u := range l.Users {
		if u.Name == "root" {
			roots++
			if u.AccessKey != "AKIAEXAMPLE000000001" {
				t.Errorf("root listed with %s", u.AccessKey)
			}
		}
	}
	if roots != 1 || len(l.Users) != 4 {
		t.Fatalf("users %+v: want 4, one root", l.Users)
	}
	u := must[*metaapi.User](t)(c.s.SetUserKeys("root", "", ""))
	if u.AccessKey != "AKIAEXAMPLE000000001" || u.SecretKey == "example-secret-0123456789" || len(u.SecretKey) != 40 {
		t.Fatalf("a new secret for root: %+v", u)
	}
}
