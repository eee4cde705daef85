package kek

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

func TestSealOpenBindsRecordAndKey(t *testing.T) {
	t.Setenv(EnvVar, "")
	if err := os.Unsetenv(EnvVar); err != nil { // t.Setenv restores it
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "meta", "..", DefaultFile)
	k, created, err := Load(vfs.Default, path)
	if err != nil || !created {
		t.Fatalf("Load: created %v, %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keyring file mode: %v, %v", fi, err)
	}
	secret := []byte("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
	sealed := k.Seal(secret, []byte("s3-user/alice"))
	if bytes.Contains(sealed, secret) || len(sealed) != len(secret)+Overhead {
		t.Fatalf("sealed value holds the secret or has %d bytes", len(sealed))
	}
	if got, err := k.Open(sealed, []byte("s3-user/alice")); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open: %q, %v", got, err)
	}
	if _, err := k.Open(sealed, []byte("s3-user/bob")); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open under another record: %v, want ErrOpen", err)
	}
	// Reloaded from the file: the same key.
	k2, created, err := Load(vfs.Default, path)
	if err != nil || created {
		t.Fatalf("second Load: created %v, %v", created, err)
	}
	if _, err := k2.Open(sealed, []byte("s3-user/alice")); err != nil {
		t.Fatal(err)
	}
	// Rotation: a key added to the file; an older keyring rereads the
	// file when it meets the new key's ID.
	id, err := AddKey(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	k3, _, err := Load(vfs.Default, path)
	if err != nil || k3.Current() != id || len(k3.IDs()) != 2 {
		t.Fatalf("after AddKey: current %s (want %s), ids %v, %v", k3.Current(), id, k3.IDs(), err)
	}
	resealed := k3.Seal(secret, []byte("s3-user/alice"))
	if kid, _ := KeyID(resealed); kid != id {
		t.Fatalf("sealed under %s, want %s", kid, id)
	}
	if got, err := k.Open(resealed, []byte("s3-user/alice")); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("old keyring opening the new key's value: %q, %v", got, err)
	}
	other, err := Keys(NewKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open(sealed, []byte("s3-user/alice")); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("another keyring: %v, want ErrUnknownKey", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(vfs.Default, path); err == nil {
		t.Fatal("a keyring file readable by others was loaded")
	}
}

func TestEnvironmentKeyring(t *testing.T) {
	key := NewKey()
	b, err := Marshal([][]byte{key})
	if err != nil || !bytes.Contains(b, []byte("keys")) {
		t.Fatal(string(b), err)
	}
	t.Setenv(EnvVar, "not base64")
	if _, _, err := Load(vfs.Default, filepath.Join(t.TempDir(), DefaultFile)); err == nil {
		t.Fatal("a bad SPINDLE_KEK was taken")
	}
	t.Setenv(EnvVar, base64.StdEncoding.EncodeToString(NewKey())+", "+base64.StdEncoding.EncodeToString(key))
	dir := t.TempDir()
	k, created, err := Load(vfs.Default, filepath.Join(dir, DefaultFile))
	if err != nil || created || k.Current() != ID(key) {
		t.Fatalf("environment keyring: created %v, %v", created, err)
	}
	if len(k.IDs()) != 2 {
		t.Fatalf("ids %v, want 2", k.IDs())
	}
	if _, err := os.Stat(filepath.Join(dir, DefaultFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a keyring file was written with %s set: %v", EnvVar, err)
	}
}
