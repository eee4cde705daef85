// Package kek is the meta service's key encryption key (KEK): the keyring
// that seals the secrets the meta service stores (S3 secret keys, token
// signing keys) so that its store — Pebble files, raft log, snapshots,
// checkpoints, backups — holds ciphertext only. The keyring lives outside
// the store: a 0600 file (default DefaultFile beside the meta directory,
// created at the first start) or the environment variable EnvVar, which
// wins over the file.
//
// A keyring holds one or more 256-bit keys; the last is current: Seal
// uses it, Open takes any key of the keyring, found by the key ID in the
// sealed value's header (rotation: add a key, re-seal, keep the old one
// until nothing sealed under it remains). A key's ID is the first 8 bytes
// of its SHA-256: it names the key without revealing it.
//
// Sealed value (docs/FORMAT.md): version u8 (1) | key ID [8] | nonce [12] |
// AES-256-GCM ciphertext with its 16-byte tag. The caller's associated
// data (the record's identity, e.g. "s3-user/NAME") binds a sealed value
// to its record: moved to another record, it does not open.
//
// In the meta service the keyring is state.Config.KEK (loaded by Open):
// a record kind that keeps a secret seals it with Seal, its identity as
// associated data, opens it with Open, and adds its re-sealing to the
// rotation (package meta/creds, Routes: its resealers).
//
// Concurrency: a Keyring is safe for concurrent use. Open rereads the
// file once when it meets an unknown key ID (a keyring copied in by the
// operator after a rotation elsewhere is taken without a restart).
package kek

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/spindle-store/spindle/internal/vfs"
)

// EnvVar holds the keyring instead of a file: the keys in base64,
// comma-separated, the current one last.
const EnvVar = "SPINDLE_KEK"

// DefaultFile is the keyring file's name, in the meta directory's parent.
const DefaultFile = "meta-kek.json"

// Sealed value layout.
const (
	version   = 1
	idBytes   = 8
	nonceSize = 12
	tagBytes  = 16
	keyBytes  = 32
	// Overhead is what Seal adds to a plaintext.
	Overhead = 1 + idBytes + nonceSize + tagBytes
)

// ErrUnknownKey: a sealed value's key is not in the keyring (a member
// whose keyring file lacks a key added elsewhere: copy it in).
var ErrUnknownKey = errors.New("kek: sealed under a key not in this keyring")

// ErrOpen: a sealed value that does not open (corrupt, or another
// record's).
var ErrOpen = errors.New("kek: sealed value does not open")

// DefaultPath is the keyring file of the meta service in metaDir.
func DefaultPath(metaDir string) string {
	return filepath.Join(filepath.Dir(filepath.Clean(metaDir)), DefaultFile)
}

// Keyring is a set of keys, the last current.
type Keyring struct {
	fs   vfs.FS
	path string // "" for a keyring of the environment or of Keys

	mu    sync.RWMutex
	keys  map[[idBytes]byte]cipher.AEAD
	order [][idBytes]byte
}

// file is the keyring file's JSON.
type file struct {
	// Keys in base64, the current one last.
	Keys []string `json:"keys"`
}

// ID is a key's ID, hex.
func ID(key []byte) string {
	s := sha256.Sum256(key)
	return hex.EncodeToString(s[:idBytes])
}

// NewKey returns a random key.
func NewKey() []byte {
	k := make([]byte, keyBytes)
	_, _ = rand.Read(k) // crypto/rand.Read never fails (Go 1.24+)
	return k
}

// Keys is a keyring of the given keys (the last current); tests.
func Keys(keys ...[]byte) (*Keyring, error) {
	k := &Keyring{}
	return k, k.set(keys)
}

func (k *Keyring) set(keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("kek: an empty keyring")
	}
	m := make(map[[idBytes]byte]cipher.AEAD, len(keys))
	var order [][idBytes]byte
	for _, key := range keys {
		if len(key) != keyBytes {
			return fmt.Errorf("kek: a key of %d bytes, want %d", len(key), keyBytes)
		}
		b, err := aes.NewCipher(key)
		if err != nil {
			return fmt.Errorf("kek: %w", err)
		}
		g, err := cipher.NewGCM(b)
		if err != nil {
			return fmt.Errorf("kek: %w", err)
		}
		s := sha256.Sum256(key)
		var id [idBytes]byte
		copy(id[:], s[:idBytes])
		if _, dup := m[id]; !dup {
			order = append(order, id)
		} else {
			// A key listed again becomes the current one.
			order = append(deleteID(order, id), id)
		}
		m[id] = g
	}
	k.mu.Lock()
	k.keys, k.order = m, order
	k.mu.Unlock()
	return nil
}

func deleteID(order [][idBytes]byte, id [idBytes]byte) [][idBytes]byte {
	out := order[:0]
	for _, o := range order {
		if o != id {
			out = append(out, o)
		}
	}
	return out
}

func decodeKeys(list []string, what string) ([][]byte, error) {
	var keys [][]byte
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) != keyBytes {
			return nil, fmt.Errorf("kek: %s: a key that is not %d bytes of base64", what, keyBytes)
		}
		keys = append(keys, b)
	}
	return keys, nil
}

// Load returns the keyring of the environment (EnvVar) if set, else of
// the file at path, which is created (0600, one new key) when absent.
// created says the file was created now. A file readable by group or
// others is refused.
func Load(fs vfs.FS, path string) (k *Keyring, created bool, err error) {
	if v, ok := os.LookupEnv(EnvVar); ok {
		keys, err := decodeKeys(strings.Split(v, ","), EnvVar)
		if err != nil {
			return nil, false, err
		}
		k, err := Keys(keys...)
		return k, false, err
	}
	if fs == nil {
		fs = vfs.Default
	}
	k = &Keyring{fs: fs, path: path}
	err = k.reload()
	if errors.Is(err, os.ErrNotExist) {
		if created, err = create(fs, path); err != nil {
			return nil, false, err
		}
		err = k.reload()
	}
	if err != nil {
		return nil, false, err
	}
	return k, created, nil
}

// create writes a keyring file of one new key at path unless one exists
// (another process's, made meanwhile: then that one is kept).
func create(fs vfs.FS, path string) (bool, error) {
	if err := vfs.MkdirAllDurable(fs, filepath.Dir(path)); err != nil {
		return false, fmt.Errorf("kek: %w", err)
	}
	b, err := Marshal([][]byte{NewKey()})
	if err != nil {
		return false, err
	}
	// A name of its own: members of a group started together may race.
	tmp := fmt.Sprintf("%s.new-%x", path, NewKey()[:8])
	if err := vfs.WriteFileAtomicPerm(fs, tmp, b, 0o600); err != nil {
		return false, fmt.Errorf("kek: %w", err)
	}
	lerr := fs.Link(tmp, path)
	if err := fs.Remove(tmp); err != nil {
		return false, fmt.Errorf("kek: %w", err)
	}
	if errors.Is(lerr, os.ErrExist) {
		return false, nil
	}
	if lerr != nil {
		return false, fmt.Errorf("kek: %w", lerr)
	}
	if err := fs.SyncDir(filepath.Dir(path)); err != nil {
		return false, fmt.Errorf("kek: %w", err)
	}
	return true, nil
}

// Marshal is a keyring file holding keys (the last current).
func Marshal(keys [][]byte) ([]byte, error) {
	var f file
	for _, key := range keys {
		f.Keys = append(f.Keys, base64.StdEncoding.EncodeToString(key))
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("kek: %w", err)
	}
	return append(b, '\n'), nil
}

// ReadFile returns the keys of the keyring file at path (nil fs: the OS).
func ReadFile(fs vfs.FS, path string) ([][]byte, error) {
	if fs == nil {
		fs = vfs.Default
	}
	fi, err := fs.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("kek: %w", err)
	}
	if _, hasPerms := fs.(permFS); hasPerms && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("kek: %s is readable by others (mode %v): want 0600", path, fi.Mode().Perm())
	}
	f, err := fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kek: %w", err)
	}
	b := make([]byte, fi.Size())
	_, rerr := f.ReadAt(b, 0)
	if err := errors.Join(rerr, f.Close()); err != nil {
		return nil, fmt.Errorf("kek: %s: %w", path, err)
	}
	var kf file
	if err := json.Unmarshal(b, &kf); err != nil {
		return nil, fmt.Errorf("kek: %s: %w", path, err)
	}
	return decodeKeys(kf.Keys, path)
}

// permFS is a filesystem whose files have permissions (the OS's).
type permFS interface {
	CreatePerm(name string, perm os.FileMode) (vfs.File, error)
}

// reload rereads the keyring file (nothing for an environment keyring).
func (k *Keyring) reload() error {
	if k.path == "" {
		return nil
	}
	keys, err := ReadFile(k.fs, k.path)
	if err != nil {
		return err
	}
	return k.set(keys)
}

// Reload rereads the keyring file (after a rotation: the operator added a
// key); nothing for a keyring of the environment.
func (k *Keyring) Reload() error { return k.reload() }

// Path is the keyring file ("" for the environment's).
func (k *Keyring) Path() string { return k.path }

// Current is the current key's ID.
func (k *Keyring) Current() string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	id := k.order[len(k.order)-1]
	return hex.EncodeToString(id[:])
}

// IDs lists the keys' IDs, the current one last.
func (k *Keyring) IDs() []string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]string, 0, len(k.order))
	for _, id := range k.order {
		out = append(out, hex.EncodeToString(id[:]))
	}
	return out
}

// Seal seals plaintext under the current key, bound to ad (the record's
// identity).
func (k *Keyring) Seal(plaintext, ad []byte) []byte {
	k.mu.RLock()
	id := k.order[len(k.order)-1]
	g := k.keys[id]
	k.mu.RUnlock()
	out := make([]byte, 1+idBytes+nonceSize, Overhead+len(plaintext))
	out[0] = version
	copy(out[1:], id[:])
	_, _ = rand.Read(out[1+idBytes:]) // crypto/rand.Read never fails (Go 1.24+)
	return g.Seal(out, out[1+idBytes:], plaintext, ad)
}

// KeyID is the ID of the key a sealed value is sealed under.
func KeyID(sealed []byte) (string, error) {
	if len(sealed) < Overhead || sealed[0] != version {
		return "", fmt.Errorf("%w: %d bytes, version %d", ErrOpen, len(sealed), firstByte(sealed))
	}
	return hex.EncodeToString(sealed[1 : 1+idBytes]), nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// Open opens a sealed value bound to ad. ErrUnknownKey when its key is not
// in the keyring (after rereading the file), ErrOpen when it does not
// open.
func (k *Keyring) Open(sealed, ad []byte) ([]byte, error) {
	if _, err := KeyID(sealed); err != nil {
		return nil, err
	}
	var id [idBytes]byte
	copy(id[:], sealed[1:])
	g, err := k.aead(id)
	if err != nil {
		return nil, err
	}
	p, err := g.Open(nil, sealed[1+idBytes:1+idBytes+nonceSize], sealed[1+idBytes+nonceSize:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return p, nil
}

func (k *Keyring) aead(id [idBytes]byte) (cipher.AEAD, error) {
	k.mu.RLock()
	g, ok := k.keys[id]
	k.mu.RUnlock()
	if ok {
		return g, nil
	}
	if err := k.reload(); err != nil {
		return nil, fmt.Errorf("%w: key %x (reread %s: %v)", ErrUnknownKey, id, k.path, err)
	}
	k.mu.RLock()
	g, ok = k.keys[id]
	k.mu.RUnlock()
	if !ok {
		where := k.path
		if where == "" {
			where = EnvVar
		}
		return nil, fmt.Errorf("%w: key %x is not in %s", ErrUnknownKey, id, where)
	}
	return g, nil
}

// AddKey appends a new key to the keyring file at path (creating it) and
// returns its ID: the first step of a rotation (copy the file to every
// meta member, then spindle admin kek rotate).
func AddKey(fs vfs.FS, path string) (string, error) {
	if fs == nil {
		fs = vfs.Default
	}
	keys, err := ReadFile(fs, path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	key := NewKey()
	b, err := Marshal(append(keys, key))
	if err != nil {
		return "", err
	}
	if err := vfs.WriteFileAtomicPerm(fs, path, b, 0o600); err != nil {
		return "", fmt.Errorf("kek: %w", err)
	}
	return ID(key), nil
}
