// Package authz decides who may do what on the meta service's buckets and
// keys, and keeps the grants (the model: package metaapi/authz's comment).
//
// Check is the one decision: an Identity (a verified certificate, and for
// the S3 gateway the user it names), an action, a bucket and a key (or a
// listed prefix; "" for the bucket as a whole) → nil (allowed) or an
// error wrapping metaapi.ErrForbidden. In order: no TLS (Identity.Open)
// or an admin certificate: allowed; the gateway's root user: allowed; a
// certificate of another role than client or s3: refused; the bucket's
// owner: allowed; a grant of the principal covering the key with the
// action or admin: allowed; a call the gateway authorized
// (api.S3AuthorizedHeader) on a bucket whose S3 permissions may give its
// user rights (s3perm.MayAllow: a policy Allow naming the user or "*",
// ACLs enabled): allowed, S3's decision being the gateway's; else
// refused. So a user whose only rights are grants is held to them here
// (an overwrite needs write and delete, decided in the commit), and one
// a bucket policy or an ACL lets in has S3's semantics (a PutObject may
// replace a key). A bucket that does not exist is
// allowed through (the call then answers NoSuchBucket). The S3 gateway's
// certificate is believed to name the user (metaapi/authz.S3UserHeader),
// nothing else: without the header its calls are its certificate's own
// principal's, with no rights beyond its grants.
//
// Grants are replicated meta state: records in the store
//
//	'G' | bucket | 0x00 | principal | 0x00 | prefix  →  version u8 (1) | actions u8 | created u64 | crc u32
//
// (actions: bit 0 read, 1 write, 2 delete, 3 admin; created: Unix ms;
// crc: CRC32C of the bytes before it, little-endian; docs/FORMAT.md §13),
// written only through state.Mutate like every record, so checkpoints,
// snapshots and backups carry them. They are read from the store (through
// its overlay) under State.Mu at each check that needs them: owners and
// admins need none.
//
// Concurrency: Check runs with State.Mu held (either mode: the commit
// path calls it inside its mutation); Authorize takes it for reading.
// Grants' methods go through state.Mutate and state.Read.
package authz

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/s3perm"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// PrefixGrant is the first byte of a grant record's key.
const PrefixGrant = 'G'

// recordVersion is a grant record's first byte.
const recordVersion = 1

// recordBytes is a grant record's length.
const recordBytes = 1 + 1 + 8 + 4

var actionBits = map[string]uint8{api.Read: 1, api.Write: 2, api.Delete: 4, api.Admin: 8}

// Identity is who makes a call.
type Identity struct {
	// Peer is the verified certificate (zero over plaintext).
	Peer tlsconf.Peer
	// S3User is what the gateway named (S3UserHeader): an access key or
	// api.S3Root; "" for none, and for callers of another role.
	S3User string
	// Remote is the caller's address.
	Remote string
	// Open: no TLS, nobody authenticated, everything allowed.
	Open bool
	// S3Authorized: the gateway authorized the S3 request this call is
	// made for (api.S3AuthorizedHeader); only for callers of role s3.
	S3Authorized bool
}

// FromRequest is the identity of r's caller; tlsOn says the service
// checks certificates.
func FromRequest(r *http.Request, tlsOn bool) Identity {
	p, _ := tlsconf.PeerOfState(r.TLS) // the zero Peer: refused below
	id := Identity{Peer: p, Remote: r.RemoteAddr, Open: !tlsOn}
	if p.Role == tlsconf.RoleS3 {
		id.S3User = r.Header.Get(api.S3UserHeader)
		id.S3Authorized = r.Header.Get(api.S3AuthorizedHeader) == "1"
	}
	return id
}

// Who names the caller for the audit log: "cert:NAME" (its certificate),
// "access-key:KEY (through cert:GATEWAY)" or "s3root (through
// cert:GATEWAY)" for the gateway's users, "unauthenticated" without TLS.
func (id Identity) Who() string {
	switch {
	case id.Open && !id.Peer.Authenticated():
		return "unauthenticated"
	case id.S3User == api.S3Root:
		return "s3root (through " + api.CertPrefix + id.Peer.Name + ")"
	case id.S3User != "":
		return "access-key:" + id.S3User + " (through " + api.CertPrefix + id.Peer.Name + ")"
	}
	return api.CertPrefix + id.Peer.Name
}

// principal is id's principal and the bucket owner value that is id:
// ok false with a reason when id may do nothing, all true when it may
// do everything.
func principal(st *state.State, id Identity) (p, owner string, all bool, err error) {
	switch {
	case id.Open, id.Peer.Role == tlsconf.RoleAdmin:
		return "", "", true, nil
	case id.Peer.Role == tlsconf.RoleS3 && id.S3User == api.S3Root:
		return "", "", true, nil
	case id.Peer.Role == tlsconf.RoleS3 && id.S3User != "":
		name, ok := st.S3.ByAccess[id.S3User]
		if !ok {
			return "", "", false, fmt.Errorf("%w: no S3 user has access key %s", metaapi.ErrForbidden, id.S3User)
		}
		return api.UserPrefix + name, id.S3User, false, nil
	case id.Peer.Role == tlsconf.RoleS3, id.Peer.Role == tlsconf.RoleClient:
		return api.CertPrefix + id.Peer.Name, api.CertPrefix + id.Peer.Name, false, nil
	}
	return "", "", false, fmt.Errorf("%w: certificate role %q has no rights on buckets", metaapi.ErrForbidden, id.Peer.Role)
}

// Owner is the owner value a bucket created by id records ("" for none:
// the admin certificate's and the gateway root's buckets are owned by
// nobody but the admins).
func Owner(st *state.State, id Identity) string {
	st.Mu.RLock()
	defer st.Mu.RUnlock()
	_, owner, _, _ := principal(st, id)
	return owner
}

// Check decides whether id may do act (api.Read, Write, Delete, Admin) on
// bucket/key; key is a key, a listed prefix, or "" for the whole bucket.
// Caller holds st.Mu (either mode). THE authorization decision: every
// route that touches a bucket's keys calls it (directly, through
// Authorize, or, for a commit, inside the commit's mutation once the
// commit knows whether it replaces a key).
func Check(st *state.State, id Identity, act, bucket, key string) error {
	bit, ok := actionBits[act]
	if !ok {
		return fmt.Errorf("%w: unknown action %q", metaapi.ErrInvalid, act)
	}
	p, owner, all, err := principal(st, id)
	if err != nil || all {
		return err
	}
	brec, ok := st.Buckets[bucket]
	if !ok || (brec.Owner != "" && brec.Owner == owner) {
		return nil
	}
	granted, err := grantedTo(st, p, bit, bucket, key)
	if err != nil {
		return err
	}
	if !granted && id.S3Authorized && s3perm.MayAllow([]byte(brec.Policy), brec.Ownership, id.S3User) {
		granted = true // the gateway's S3 decision, with the bucket's policy or ACLs
	}
	if !granted {
		what := bucket
		if key != "" {
			what += "/" + key
		}
		return fmt.Errorf("%w: %s may not %s %s (not its owner, no grant)", metaapi.ErrForbidden, p, act, what)
	}
	return nil
}

// Authorize is Check under st.Mu (for reading).
func Authorize(st *state.State, id Identity, act, bucket, key string) error {
	st.Mu.RLock()
	defer st.Mu.RUnlock()
	return Check(st, id, act, bucket, key)
}

// Covers says a grant on prefix covers key: every key when prefix is
// "", else key equal to prefix or below it on a '/' boundary ("logs"
// covers "logs" and "logs/a", not "logs2"; "logs/" covers "logs/a").
func Covers(prefix, key string) bool {
	if prefix == "" {
		return true
	}
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(key, prefix)
	}
	return key == prefix || strings.HasPrefix(key, prefix+"/")
}

// grantedTo says some grant of principal p on bucket covers key with bit
// (or admin).
func grantedTo(st *state.State, p string, bit uint8, bucket, key string) (ok bool, err error) {
	lo := principalPrefix(bucket, p)
	it, err := st.Store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: state.PrefixEnd(lo)})
	if err != nil {
		return false, err
	}
	defer state.CloseInto(it, &err, "grants of "+bucket)
	for v := it.First(); v; v = it.Next() {
		rec, err := decode(it.Value())
		if err != nil {
			return false, fmt.Errorf("grant %q: %w", it.Key(), err)
		}
		if rec.actions&(bit|actionBits[api.Admin]) != 0 && Covers(string(it.Key()[len(lo):]), key) {
			return true, nil
		}
	}
	return false, it.Error()
}

func bucketPrefix(bucket string) []byte {
	return append(append([]byte{PrefixGrant}, bucket...), 0)
}

func principalPrefix(bucket, p string) []byte {
	return append(append(bucketPrefix(bucket), p...), 0)
}

func grantKey(bucket, p, prefix string) []byte {
	return append(principalPrefix(bucket, p), prefix...)
}

// parseKey splits a grant record's key.
func parseKey(k []byte) (bucket, p, prefix string, err error) {
	if len(k) < 1 || k[0] != PrefixGrant {
		return "", "", "", fmt.Errorf("%w: grant key %q", state.ErrCorrupt, k)
	}
	parts := strings.SplitN(string(k[1:]), "\x00", 3)
	if len(parts) != 3 || metaapi.ValidBucket(parts[0]) != nil || api.ValidPrincipal(parts[1]) != nil {
		return "", "", "", fmt.Errorf("%w: grant key %q", state.ErrCorrupt, k)
	}
	return parts[0], parts[1], parts[2], nil
}

type record struct {
	actions uint8
	created time.Time
}

func (r record) encode() []byte {
	b := make([]byte, 0, recordBytes)
	b = append(b, recordVersion, r.actions)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.created.UnixMilli()))
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}

func decode(v []byte) (record, error) {
	if len(v) != recordBytes {
		return record{}, fmt.Errorf("%w: grant record of %d bytes, want %d", state.ErrCorrupt, len(v), recordBytes)
	}
	if crc32c.Checksum(v[:recordBytes-4]) != binary.LittleEndian.Uint32(v[recordBytes-4:]) {
		return record{}, fmt.Errorf("%w: grant record CRC mismatch", state.ErrCorrupt)
	}
	if v[0] != recordVersion || v[1] == 0 || v[1]&^0x0f != 0 {
		return record{}, fmt.Errorf("%w: grant record version %d, actions %#x", state.ErrCorrupt, v[0], v[1])
	}
	return record{actions: v[1], created: time.UnixMilli(int64(binary.LittleEndian.Uint64(v[2:])))}, nil
}

func (r record) names() []string {
	var out []string
	for _, a := range api.Actions {
		if r.actions&actionBits[a] != 0 {
			out = append(out, a)
		}
	}
	return out
}
