// Package blocktoken is Spindle's block access tokens (issue 32 item 3):
// the meta service signs, with an allocation or a key lookup, a short-lived
// token naming one container, the blocks of one key in it, the operations
// allowed (read, write), an expiry and the principal (the certificate name
// of the caller it was minted for); a datanode serves and accepts chunk
// reads and writes from a client only with a token that covers them.
//
// A token is signed with HMAC-SHA256 under a key the meta service keeps as
// replicated state and rotates on a schedule, keeping two valid at a time
// (the current one, which signs, and the previous one); the datanodes get
// both in every heartbeat response (Verifier.SetKeys). The byte format is
// in docs/FORMAT.md ("Block tokens") and in Encode's comment.
//
// # Invariants
//
//   - Verify accepts a token only if its MAC, computed under the key its
//     key ID names, matches (constant-time compare), that key is one of
//     the verifier's keys, it has not expired, and it names the container,
//     block, operation and principal asked about. Decoding is strict
//     (version, lengths, no trailing bytes).
//   - A Verifier caches verified tokens (by their bytes) in a bounded LRU,
//     so that the chunks of one stream cost one HMAC, not one each; the
//     cached entry is checked for expiry, scope and its key being still
//     known at every use, and the cache is emptied when the keys change.
//
// # Concurrency
//
// Encode, Decode, Sign and Verify are pure functions. A Verifier is safe for
// concurrent use (one mutex over its keys and cache, held for a map lookup
// on a hit, never during an HMAC).
package blocktoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Op is a set of operations a token allows.
type Op uint8

// Operations.
const (
	OpRead  Op = 1 // ReadChunk, GetBlock
	OpWrite Op = 2 // WriteChunk, PutBlock
	// OpExport: a whole CLOSED container, by the bulk protocol, to the
	// token's principal (the copy's target datanode); Blocks then names
	// local ID 0 (ExportBlocks).
	OpExport Op = 4
)

// ExportBlocks is an export token's Blocks.
var ExportBlocks = []Range{{First: 0, Count: 1}}

func (o Op) String() string {
	var s []string
	if o&OpRead != 0 {
		s = append(s, "read")
	}
	if o&OpWrite != 0 {
		s = append(s, "write")
	}
	if o&OpExport != 0 {
		s = append(s, "export")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "+")
}

// Range is Count consecutive local IDs from First.
type Range struct {
	First uint64
	Count uint32
}

// Token is what a block token says.
type Token struct {
	KeyID     uint32
	Ops       Op
	Expiry    time.Time // millisecond precision on the wire
	Container uint64
	// Blocks are the local IDs in Container the token covers (a key's
	// blocks there), as ranges; at least one, at most MaxRanges.
	Blocks []Range
	// Principal is the certificate name the token was minted for: a
	// datanode accepts it only on a connection of that certificate
	// (empty: any, as over plaintext).
	Principal string
}

// Limits of the encoding.
const (
	Version         = 1
	MaxRanges       = 1024
	MaxPrincipalLen = 255
	MACBytes        = sha256.Size
	// SecretBytes is the length of a signing key's secret.
	SecretBytes = 32
	fixedBytes  = 1 + 1 + 4 + 8 + 8 + 2 + 1 // version … principal length
)

// Errors. Every refusal wraps ErrForbidden.
var (
	ErrForbidden = errors.New("forbidden")
	// ErrRequired: a request without a token where one is needed; its
	// message is the reason a client sees ("block token required").
	ErrRequired   = fmt.Errorf("%w: block token required", ErrForbidden)
	ErrMalformed  = fmt.Errorf("%w: malformed block token", ErrForbidden)
	ErrUnknownKey = fmt.Errorf("%w: block token signed by an unknown key", ErrForbidden)
	ErrSignature  = fmt.Errorf("%w: block token signature does not match", ErrForbidden)
	ErrExpired    = fmt.Errorf("%w: block token expired", ErrForbidden)
	ErrScope      = fmt.Errorf("%w: block token does not cover this request", ErrForbidden)
	ErrPrincipal  = fmt.Errorf("%w: block token minted for another principal", ErrForbidden)
)

// Key is a signing key: its ID (named in the tokens it signs) and secret.
type Key struct {
	ID     uint32 `json:"id"`
	Secret []byte `json:"secret"`
}

// Encode returns t's bytes without the MAC:
//
//	version u8 (1) | ops u8 | key ID u32 | expiry u64 (Unix ms) |
//	container u64 | ranges u16 n | n × (first u64, count u32) |
//	principal length u8 p | principal (p bytes)
//
// little-endian; Sign appends the MAC (32 bytes, HMAC-SHA256 over these).
func Encode(t *Token) ([]byte, error) {
	if len(t.Blocks) == 0 || len(t.Blocks) > MaxRanges {
		return nil, fmt.Errorf("blocktoken: %d block ranges, want 1..%d", len(t.Blocks), MaxRanges)
	}
	if len(t.Principal) > MaxPrincipalLen {
		return nil, fmt.Errorf("blocktoken: principal of %d bytes, max %d", len(t.Principal), MaxPrincipalLen)
	}
	b := make([]byte, 0, fixedBytes+12*len(t.Blocks)+len(t.Principal)+MACBytes)
	b = append(b, Version, byte(t.Ops))
	b = binary.LittleEndian.AppendUint32(b, t.KeyID)
	b = binary.LittleEndian.AppendUint64(b, uint64(t.Expiry.UnixMilli()))
	b = binary.LittleEndian.AppendUint64(b, t.Container)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(t.Blocks)))
	for _, r := range t.Blocks {
		b = binary.LittleEndian.AppendUint64(b, r.First)
		b = binary.LittleEndian.AppendUint32(b, r.Count)
	}
	b = append(b, byte(len(t.Principal)))
	return append(b, t.Principal...), nil
}

// Sign returns t signed with k (t.KeyID is set to k.ID), as it travels:
// the base64url text (no padding) of its bytes and their MAC.
func Sign(t Token, k Key) (string, error) {
	t.KeyID = k.ID
	b, err := Encode(&t)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, k.Secret)
	m.Write(b)
	return base64.RawURLEncoding.EncodeToString(m.Sum(b)), nil
}

// Decode parses a signed token without checking its MAC; it returns the
// token and the length of its signed part.
func Decode(b []byte) (Token, int, error) {
	var t Token
	if len(b) < fixedBytes+MACBytes || b[0] != Version {
		return t, 0, ErrMalformed
	}
	le := binary.LittleEndian
	t.Ops, t.KeyID = Op(b[1]), le.Uint32(b[2:])
	t.Expiry = time.UnixMilli(int64(le.Uint64(b[6:])))
	t.Container = le.Uint64(b[14:])
	n := int(le.Uint16(b[22:]))
	p := 24
	if n == 0 || n > MaxRanges || len(b) < p+12*n+1+MACBytes {
		return t, 0, ErrMalformed
	}
	t.Blocks = make([]Range, n)
	for i := range t.Blocks {
		t.Blocks[i] = Range{First: le.Uint64(b[p:]), Count: le.Uint32(b[p+8:])}
		p += 12
	}
	pl := int(b[p])
	p++
	if len(b) != p+pl+MACBytes {
		return t, 0, ErrMalformed
	}
	t.Principal = string(b[p : p+pl])
	return t, p + pl, nil
}

// Verify checks the MAC of text (as Sign returns it) under the key of keys
// its key ID names and returns the token; it does not check expiry or
// scope (Token.Allows).
func Verify(text []byte, keys []Key) (Token, error) {
	if len(text) > base64.RawURLEncoding.EncodedLen(fixedBytes+12*MaxRanges+MaxPrincipalLen+MACBytes) {
		return Token{}, ErrMalformed
	}
	b := make([]byte, base64.RawURLEncoding.DecodedLen(len(text)))
	if n, err := base64.RawURLEncoding.Decode(b, text); err != nil || n != len(b) {
		return Token{}, ErrMalformed
	}
	t, n, err := Decode(b)
	if err != nil {
		return t, err
	}
	i := slices.IndexFunc(keys, func(k Key) bool { return k.ID == t.KeyID })
	if i < 0 {
		return t, fmt.Errorf("%w (key %d)", ErrUnknownKey, t.KeyID)
	}
	m := hmac.New(sha256.New, keys[i].Secret)
	m.Write(b[:n])
	if !hmac.Equal(m.Sum(nil), b[n:]) {
		return t, ErrSignature
	}
	return t, nil
}

// Allows says whether t, at now, lets principal do op on block local of
// container (nil) or why not.
func (t *Token) Allows(now time.Time, container, local uint64, op Op, principal string) error {
	switch {
	case !now.Before(t.Expiry):
		return fmt.Errorf("%w at %s", ErrExpired, t.Expiry.UTC().Format(time.RFC3339Nano))
	case t.Ops&op != op:
		return fmt.Errorf("%w: it allows %s, not %s", ErrScope, t.Ops, op)
	case t.Container != container || !t.covers(local):
		return fmt.Errorf("%w: block %d/%d is not one of its blocks in container %d", ErrScope, container, local, t.Container)
	case t.Principal != "" && t.Principal != principal:
		return fmt.Errorf("%w %q, presented by %q", ErrPrincipal, t.Principal, principal)
	}
	return nil
}

func (t *Token) covers(local uint64) bool {
	for _, r := range t.Blocks {
		if local >= r.First && local-r.First < uint64(r.Count) {
			return true
		}
	}
	return false
}

// Ranges turns local IDs into the fewest ranges (sorted, duplicates
// merged).
func Ranges(locals []uint64) []Range {
	s := slices.Clone(locals)
	slices.Sort(s)
	var out []Range
	for _, l := range slices.Compact(s) {
		if k := len(out) - 1; k >= 0 && out[k].First+uint64(out[k].Count) == l && out[k].Count < ^uint32(0) {
			out[k].Count++
			continue
		}
		out = append(out, Range{First: l, Count: 1})
	}
	return out
}

// LoadKeys reads a key file: a JSON list of keys ({"id": N, "secret":
// base64 of SecretBytes bytes}), as `spindle datanode --block-token-keys`
// takes for static pipelines (a meta service's datanodes get theirs from
// the heartbeats).
func LoadKeys(path string) ([]Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []Key
	if err := json.Unmarshal(b, &keys); err != nil {
		return nil, fmt.Errorf("block token keys %s: %w", path, err)
	}
	for _, k := range keys {
		if len(k.Secret) != SecretBytes {
			return nil, fmt.Errorf("block token keys %s: key %d has %d secret bytes, want %d", path, k.ID, len(k.Secret), SecretBytes)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("block token keys %s: no key", path)
	}
	return keys, nil
}
