package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/kek"
	"github.com/spindle-store/spindle/internal/meta/state/verrec"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// ErrCorrupt marks a record in the meta service's Pebble store that fails
// its checks (length, version, CRC, identity). Test with errors.Is.
var ErrCorrupt = errors.New("meta: corrupt record")

// recordVersion is the first byte of every value.
const RecordVersion = 1

// Key prefixes (the first byte of every Pebble key).
const (
	prefixCounters  = 'M'
	PrefixNode      = 'N'
	PrefixPipeline  = 'P'
	PrefixContainer = 'C'
	prefixBucket    = 'B'
	PrefixKey       = 'K'
	PrefixAlloc     = 'A'
	PrefixDelete    = 'D'
	// The S3 gateway's records (users.go, multipart.go).
	prefixUser   = 'U'
	prefixUpload = 'W'
	prefixPart   = 'X'
	// prefixBucketConf: a bucket's S3 configuration documents (s3conf.go).
	prefixBucketConf = 'S'
)

// Limits of stored strings (the API validates tighter ones first).
const (
	maxUUIDBytes = 64
	maxAddrBytes = 255
	maxURLBytes  = 1024
	// maxCertNameBytes bounds a certificate name (nodeRecord.CertName).
	maxCertNameBytes = 255
)

// ---- keys ----

func U64Key(prefix byte, id uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}

func BlockKey(prefix byte, container, local uint64) []byte {
	k := make([]byte, 17)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], container)
	binary.BigEndian.PutUint64(k[9:], local)
	return k
}

func parseU64Key(k []byte) (uint64, bool) {
	if len(k) != 9 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), true
}

func parseBlockKey(k []byte) (container, local uint64, ok bool) {
	if len(k) != 17 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), binary.BigEndian.Uint64(k[9:]), true
}

func CounterKey() []byte { return []byte{prefixCounters} }

func BucketKey(name string) []byte { return append([]byte{prefixBucket}, name...) }

// keyPrefix is 'K' | bucket | 0x00: every key of the bucket starts with it
// (bucket names hold no 0x00, key names neither).
func KeyPrefix(bucket string) []byte {
	k := make([]byte, 0, len(bucket)+2)
	k = append(k, PrefixKey)
	k = append(k, bucket...)
	return append(k, 0)
}

func ObjectKey(bucket, key string) []byte { return append(KeyPrefix(bucket), key...) }

// prefixEnd is the smallest key greater than every key starting with p
// (nil: no bound).
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// ---- value encoding ----

type enc struct{ b []byte }

func newEnc() *enc { return &enc{b: []byte{RecordVersion}} }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) str(s string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}
func (e *enc) finish() []byte {
	return binary.LittleEndian.AppendUint32(e.b, crc32c.Checksum(e.b))
}

// dec decodes one value; the first error sticks.
type dec struct {
	b    []byte
	what string
	err  error
}

func newDec(what string, v []byte) *dec {
	d := &dec{what: what}
	if len(v) < 5 {
		d.err = fmt.Errorf("%w: %s: %d bytes", ErrCorrupt, what, len(v))
		return d
	}
	body, sum := v[:len(v)-4], binary.LittleEndian.Uint32(v[len(v)-4:])
	if got := crc32c.Checksum(body); got != sum {
		d.err = fmt.Errorf("%w: %s: CRC32C %08x, stored %08x", ErrCorrupt, what, got, sum)
		return d
	}
	if body[0] != RecordVersion {
		d.err = fmt.Errorf("%w: %s: record version %d", ErrCorrupt, what, body[0])
		return d
	}
	d.b = body[1:]
	return d
}

func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %s", ErrCorrupt, d.what, fmt.Sprintf(format, args...))
	}
}

func (d *dec) need(n int) bool {
	if d.err != nil {
		return false
	}
	if len(d.b) < n {
		d.fail("truncated")
		return false
	}
	return true
}

func (d *dec) u8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *dec) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// tm decodes a time in Unix ms (0: none).
func (d *dec) tm() time.Time {
	v := d.u64()
	if v > math.MaxInt64 {
		d.fail("time %d ms out of range", v)
	}
	return fromMS(v)
}

func (d *dec) str(limit int) string {
	if d.err != nil {
		return ""
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 || n > uint64(limit) || k != len(binary.AppendUvarint(nil, n)) {
		d.fail("bad string length")
		return ""
	}
	d.b = d.b[k:]
	if !d.need(int(n)) {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

func ms(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixMilli())
}

func fromMS(v uint64) time.Time {
	if v == 0 || v > math.MaxInt64 {
		return time.Time{}
	}
	return time.UnixMilli(int64(v)).UTC()
}

// ---- records ----

// counters are the next IDs to hand out; never decremented.
type Counters struct {
	NextNode      uint64
	NextPipeline  uint64
	NextContainer uint64
}

func (c Counters) Encode() []byte {
	e := newEnc()
	e.u64(c.NextNode)
	e.u64(c.NextPipeline)
	e.u64(c.NextContainer)
	return e.finish()
}

func DecodeCounters(v []byte) (Counters, error) {
	d := newDec("counters", v)
	c := Counters{NextNode: d.u64(), NextPipeline: d.u64(), NextContainer: d.u64()}
	if err := d.done(); err != nil {
		return c, err
	}
	if c.NextNode == 0 || c.NextPipeline == 0 || c.NextContainer == 0 {
		return c, fmt.Errorf("%w: counters: a next ID is 0", ErrCorrupt)
	}
	return c, nil
}

// nodeRecord is a registered datanode.
type NodeRecord struct {
	ID         uint64
	Registered time.Time
	UUID       string
	Addr       string
	MetricsURL string
	// CertName is the name of the datanode certificate this node is
	// bound to (issue 17): set by its first heartbeat over mutual TLS;
	// a heartbeat for this UUID under another certificate is refused.
	// Empty: never heard over TLS. A trailing field: records written
	// before it decode with it empty.
	CertName string
}

func (n NodeRecord) Encode() []byte {
	e := newEnc()
	e.u64(n.ID)
	e.u64(ms(n.Registered))
	e.str(n.UUID)
	e.str(n.Addr)
	e.str(n.MetricsURL)
	if n.CertName != "" {
		e.str(n.CertName)
	}
	return e.finish()
}

func DecodeNode(v []byte) (NodeRecord, error) {
	d := newDec("node", v)
	n := NodeRecord{ID: d.u64(), Registered: d.tm(), UUID: d.str(maxUUIDBytes), Addr: d.str(maxAddrBytes), MetricsURL: d.str(maxURLBytes)}
	if d.err == nil && len(d.b) > 0 {
		n.CertName = d.str(maxCertNameBytes)
	}
	if err := d.done(); err != nil {
		return n, err
	}
	if n.ID == 0 || n.UUID == "" {
		return n, fmt.Errorf("%w: node %d: no ID or UUID", ErrCorrupt, n.ID)
	}
	return n, nil
}

// Pipeline states as stored.
const (
	PipelineOpen   = 1
	PipelineClosed = 2
)

// pipelineRecord is a pipeline the meta service created.
type PipelineRecord struct {
	ID      uint64
	State   uint8
	Created time.Time
	Closed  time.Time
	Members []uint64
}

// pipelineMaxMembers bounds a stored member list.
const pipelineMaxMembers = 16

func (p PipelineRecord) Encode() []byte {
	e := newEnc()
	e.u64(p.ID)
	e.u8(p.State)
	e.u64(ms(p.Created))
	e.u64(ms(p.Closed))
	e.u8(uint8(len(p.Members)))
	for _, m := range p.Members {
		e.u64(m)
	}
	return e.finish()
}

func DecodePipeline(v []byte) (PipelineRecord, error) {
	d := newDec("pipeline", v)
	p := PipelineRecord{ID: d.u64(), State: d.u8(), Created: d.tm(), Closed: d.tm()}
	n := int(d.u8())
	// (none: a CLOSED pipeline whose every member was removed for good)
	if (n == 0 && p.State != PipelineClosed) || n > pipelineMaxMembers {
		d.fail("%d members", n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		p.Members = append(p.Members, d.u64())
	}
	if err := d.done(); err != nil {
		return p, err
	}
	if p.ID == 0 || (p.State != PipelineOpen && p.State != PipelineClosed) {
		return p, fmt.Errorf("%w: pipeline %d: state %d", ErrCorrupt, p.ID, p.State)
	}
	return p, nil
}

// Container states as stored.
const (
	ContainerOpen    = 1
	ContainerClosing = 2
	ContainerClosed  = 3
)

func ContainerStateName(s uint8) string {
	switch s {
	case ContainerOpen:
		return "OPEN"
	case ContainerClosing:
		return "CLOSING"
	case ContainerClosed:
		return "CLOSED"
	}
	return fmt.Sprintf("state(%d)", s)
}

// containerRecord is a container the meta service allocated.
type ContainerRecord struct {
	ID        uint64
	Pipeline  uint64
	State     uint8
	Created   time.Time
	NextLocal uint64 // the next local block ID to hand out (from 1)
	Committed uint64 // bytes of committed key blocks ever placed in it
}

func (c ContainerRecord) Encode() []byte {
	e := newEnc()
	e.u64(c.ID)
	e.u64(c.Pipeline)
	e.u8(c.State)
	e.u64(ms(c.Created))
	e.u64(c.NextLocal)
	e.u64(c.Committed)
	return e.finish()
}

func DecodeContainer(v []byte) (ContainerRecord, error) {
	d := newDec("container", v)
	c := ContainerRecord{ID: d.u64(), Pipeline: d.u64(), State: d.u8(), Created: d.tm(), NextLocal: d.u64(), Committed: d.u64()}
	if err := d.done(); err != nil {
		return c, err
	}
	if c.ID == 0 || c.Pipeline == 0 || c.NextLocal == 0 || c.State < ContainerOpen || c.State > ContainerClosed {
		return c, fmt.Errorf("%w: container %d: pipeline %d, state %d, next local %d", ErrCorrupt, c.ID, c.Pipeline, c.State, c.NextLocal)
	}
	return c, nil
}

// bucketRecord is a bucket; its name is in the Pebble key. Owner and ACL
// (S3 buckets) are an optional trailing section: a record without them
// ends after Bytes. Policy and Ownership (the S3 gateway's bucket policy
// and object ownership, s3permapi) are a second optional section after
// the ACL: a record without them ends after the ACL.
type BucketRecord struct {
	Created    time.Time
	Keys       uint64
	Bytes      uint64
	Owner      string
	ACL        string
	Policy     string
	Ownership  string
	Versioning uint8 // third optional section: verrec.Enabled or Suspended (0: never versioned)
}

func (b BucketRecord) Encode() []byte {
	e := newEnc()
	e.u64(ms(b.Created))
	e.u64(b.Keys)
	e.u64(b.Bytes)
	perms := b.Policy != "" || b.Ownership != "" || b.Versioning != 0
	if b.Owner != "" || b.ACL != "" || perms {
		e.str(b.Owner)
		e.str(b.ACL)
	}
	if perms {
		e.str(b.Policy)
		e.str(b.Ownership)
	}
	if b.Versioning != 0 {
		e.u8(b.Versioning)
	}
	return e.finish()
}

func DecodeBucket(v []byte) (BucketRecord, error) {
	d := newDec("bucket", v)
	b := BucketRecord{Created: d.tm(), Keys: d.u64(), Bytes: d.u64()}
	if d.err == nil && len(d.b) > 0 {
		b.Owner = d.str(metaapi.MaxAccessKeyBytes)
		b.ACL = d.str(metaapi.MaxACLBytes)
		if d.err == nil && b.Owner == "" && b.ACL == "" && len(d.b) == 0 {
			d.fail("empty owner section")
		}
	}
	if d.err == nil && len(d.b) > 0 {
		b.Policy = d.str(s3permapi.MaxPolicyBytes)
		b.Ownership = d.str(s3permapi.MaxOwnershipBytes)
		if d.err == nil && b.Policy == "" && b.Ownership == "" && len(d.b) == 0 {
			d.fail("empty policy section")
		}
	}
	if d.err == nil && len(d.b) > 0 {
		if b.Versioning = d.u8(); b.Versioning != verrec.Enabled && b.Versioning != verrec.Suspended {
			d.fail("versioning %d", b.Versioning)
		}
	}
	return b, d.done()
}

// keyBlockBytes is the stored size of one block of a key.
const keyBlockBytes = 32

// keyRecord is a committed key; bucket and name are in the Pebble key.
// Object (S3 metadata) is an optional trailing section after the blocks.
// A key without blocks holds its value inline (Size bytes right after the
// block count, none for an empty value): a small value is stored in the
// record itself (metaapi.MaxInlineBytes).
type KeyRecord struct {
	Size    uint64
	CRC32C  uint32
	Created time.Time
	Blocks  []StoredBlock
	Inline  []byte // the value when Blocks is empty (len Size)
	Object  *metaapi.ObjectMeta
	Version verrec.Version // last, optional: the S3 version section (package verrec)
}

// storedBlock is one block of a key as stored.
type StoredBlock struct {
	Container, Local, Pipeline, Length uint64
}

func (k KeyRecord) Encode() []byte {
	e := newEnc()
	e.u64(k.Size)
	e.u32(k.CRC32C)
	e.u64(ms(k.Created))
	e.u32(uint32(len(k.Blocks)))
	for _, b := range k.Blocks {
		e.u64(b.Container)
		e.u64(b.Local)
		e.u64(b.Pipeline)
		e.u64(b.Length)
	}
	if len(k.Blocks) == 0 {
		e.b = append(e.b, k.Inline...)
	}
	if k.Object != nil {
		e.objectMeta(k.Object)
	}
	e.b = k.Version.Append(e.b)
	return e.finish()
}

// decodeKey decodes a key record; Inline is a copy (v may be Pebble's).
func DecodeKey(v []byte) (KeyRecord, error) {
	d := newDec("key", v)
	k := KeyRecord{Size: d.u64(), CRC32C: d.u32(), Created: d.tm()}
	n := d.u32()
	if d.err == nil && (n > MaxBlocksPerKey || uint64(len(d.b)) < uint64(n)*keyBlockBytes) {
		d.fail("%d blocks in %d bytes", n, len(d.b))
	}
	var sum uint64
	for i := uint32(0); i < n && d.err == nil; i++ {
		b := StoredBlock{Container: d.u64(), Local: d.u64(), Pipeline: d.u64(), Length: d.u64()}
		sum += b.Length
		k.Blocks = append(k.Blocks, b)
	}
	if n == 0 && d.err == nil && k.Size > 0 {
		if k.Size > metaapi.MaxInlineBytes {
			d.fail("inline value of %d bytes, at most %d", k.Size, metaapi.MaxInlineBytes)
		} else if d.need(int(k.Size)) {
			k.Inline = slices.Clone(d.b[:k.Size])
			d.b = d.b[k.Size:]
			sum = k.Size
		}
	}
	if d.err == nil && len(d.b) > 0 && d.b[0] != verrec.Tag {
		k.Object = d.objectMeta()
	}
	var verr error
	if d.err == nil && len(d.b) > 0 {
		if k.Version, d.b, verr = verrec.Decode(d.b); verr != nil {
			d.fail("%v", verr)
		}
	}
	if err := d.done(); err != nil {
		return k, err
	}
	if sum != k.Size {
		return k, fmt.Errorf("%w: key: blocks sum to %d bytes, size %d", ErrCorrupt, sum, k.Size)
	}
	return k, nil
}

// allocRecord is a block handed out by Allocate and not committed yet.
type AllocRecord struct {
	Allocated time.Time
	Bucket    string
	Key       string
}

func (a AllocRecord) Encode() []byte {
	e := newEnc()
	e.u64(ms(a.Allocated))
	e.str(a.Bucket)
	e.str(a.Key)
	return e.finish()
}

func DecodeAlloc(v []byte) (AllocRecord, error) {
	d := newDec("allocation", v)
	a := AllocRecord{Allocated: d.tm(), Bucket: d.str(maxBucketBytes), Key: d.str(MaxKeyBytes)}
	return a, d.done()
}

// Reasons a block is scheduled for deletion.
const (
	ReasonReplaced = 1 // its key was replaced by a newer version
	ReasonDeleted  = 2 // its key was deleted
	ReasonExpired  = 3 // allocated, never committed within the grace period
)

func ReasonName(r uint8) string {
	switch r {
	case ReasonReplaced:
		return "replaced"
	case ReasonDeleted:
		return "deleted"
	case ReasonExpired:
		return "expired"
	}
	return fmt.Sprintf("reason(%d)", r)
}

// deleteRecord is a block to delete on the datanodes.
type DeleteRecord struct {
	Scheduled time.Time
	Reason    uint8
}

func (r DeleteRecord) Encode() []byte {
	e := newEnc()
	e.u64(ms(r.Scheduled))
	e.u8(r.Reason)
	return e.finish()
}

func DecodeDelete(v []byte) (DeleteRecord, error) {
	d := newDec("pending delete", v)
	r := DeleteRecord{Scheduled: d.tm(), Reason: d.u8()}
	if err := d.done(); err != nil {
		return r, err
	}
	if r.Reason < ReasonReplaced || r.Reason > ReasonExpired {
		return r, fmt.Errorf("%w: pending delete: reason %d", ErrCorrupt, r.Reason)
	}
	return r, nil
}

// ---- S3 records ----

// objectMetaVersion is the first byte of a key record's object section:
// 1, or 2 when the part sizes of a multipart object follow.
const (
	objectMetaVersion      = 1
	objectMetaPartsVersion = 2
)

// maxStrMapEntries bounds a stored string map (headers, user metadata,
// checksums).
const maxStrMapEntries = 1024

func (e *enc) strMap(m map[string]string) {
	e.u32(uint32(len(m)))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		e.str(k)
		e.str(m[k])
	}
}

func (d *dec) strMap() map[string]string {
	n := d.u32()
	if n > maxStrMapEntries {
		d.fail("%d map entries", n)
		return nil
	}
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	prev := ""
	for i := uint32(0); i < n && d.err == nil; i++ {
		k := d.str(metaapi.MaxObjectMetaBytes)
		if i > 0 && k <= prev {
			d.fail("map keys out of order")
			return nil
		}
		m[k], prev = d.str(metaapi.MaxObjectMetaBytes), k
	}
	return m
}

// objectMeta: version u8, ETag, Content-Type, checksum type, parts u32,
// then the maps headers, user metadata, checksums; in version 2 the part
// sizes (u32 count, u64 each).
func (e *enc) objectMeta(m *metaapi.ObjectMeta) {
	if len(m.PartSizes) > 0 {
		e.u8(objectMetaPartsVersion)
	} else {
		e.u8(objectMetaVersion)
	}
	e.str(m.ETag)
	e.str(m.ContentType)
	e.str(m.ChecksumType)
	e.u32(m.Parts)
	e.strMap(m.Headers)
	e.strMap(m.UserMeta)
	e.strMap(m.Checksums)
	if len(m.PartSizes) > 0 {
		e.u32(uint32(len(m.PartSizes)))
		for _, n := range m.PartSizes {
			e.u64(n)
		}
	}
}

func (d *dec) objectMeta() *metaapi.ObjectMeta {
	v := d.u8()
	if v != objectMetaVersion && v != objectMetaPartsVersion {
		d.fail("object metadata version %d", v)
		return nil
	}
	m := &metaapi.ObjectMeta{ETag: d.str(metaapi.MaxObjectMetaBytes), ContentType: d.str(metaapi.MaxObjectMetaBytes),
		ChecksumType: d.str(metaapi.MaxObjectMetaBytes), Parts: d.u32()}
	m.Headers = d.strMap()
	m.UserMeta = d.strMap()
	m.Checksums = d.strMap()
	if v == objectMetaPartsVersion {
		n := d.u32()
		if n > metaapi.MaxParts || uint64(len(d.b)) < uint64(n)*8 {
			d.fail("%d part sizes in %d bytes", n, len(d.b))
			return nil
		}
		for i := uint32(0); i < n && d.err == nil; i++ {
			m.PartSizes = append(m.PartSizes, d.u64())
		}
	}
	return m
}

// userRecord is an S3 user; its name is in the Pebble key. Its secret is
// sealed (kek.Keyring.Seal, associated data UserAD(name)) in a trailing
// field, SecretKey then empty; a record written before sealing holds
// SecretKey in plaintext and no trailing field (sealed by the next
// spindle admin kek rotate).
type UserRecord struct {
	Created   time.Time
	AccessKey string
	SecretKey string
	Sealed    []byte
}

// maxSealedSecretBytes bounds a sealed secret.
const maxSealedSecretBytes = metaapi.MaxSecretKeyBytes + kek.Overhead

func (u UserRecord) Encode() []byte {
	e := newEnc()
	e.u64(ms(u.Created))
	e.str(u.AccessKey)
	e.str(u.SecretKey)
	if len(u.Sealed) > 0 {
		e.str(string(u.Sealed))
	}
	return e.finish()
}

func DecodeUser(v []byte) (UserRecord, error) {
	d := newDec("user", v)
	u := UserRecord{Created: d.tm(), AccessKey: d.str(metaapi.MaxAccessKeyBytes), SecretKey: d.str(metaapi.MaxSecretKeyBytes)}
	if d.err == nil && len(d.b) > 0 {
		u.Sealed = []byte(d.str(maxSealedSecretBytes))
	}
	if err := d.done(); err != nil {
		return u, err
	}
	if u.AccessKey == "" || (u.SecretKey == "") == (len(u.Sealed) == 0) {
		return u, fmt.Errorf("%w: user without an access key, or without one secret (plaintext or sealed)", ErrCorrupt)
	}
	return u, nil
}

// UserAD is the associated data a user's sealed secret is bound to.
func UserAD(name string) []byte { return []byte("spindle/s3-user/" + name) }

func UserKey(name string) []byte { return append([]byte{prefixUser}, name...) }

// uploadPrefix is 'W' | bucket | 0x00: the uploads of a bucket, by key then
// upload ID.
func UploadPrefix(bucket string) []byte {
	return append(append([]byte{prefixUpload}, bucket...), 0)
}

func UploadKey(bucket, key, id string) []byte {
	k := append(UploadPrefix(bucket), key...)
	k = append(k, 0)
	return append(k, id...)
}

// partPrefix is 'X' | bucket | 0x00 | key | 0x00 | upload ID | 0x00: the
// parts of an upload, by number (u32 BE after it).
func PartPrefix(bucket, key, id string) []byte {
	k := append([]byte{prefixPart}, bucket...)
	k = append(k, 0)
	k = append(k, key...)
	k = append(k, 0)
	k = append(k, id...)
	return append(k, 0)
}

func PartKey(bucket, key, id string, n uint32) []byte {
	return binary.BigEndian.AppendUint32(PartPrefix(bucket, key, id), n)
}

// uploadRecord is a multipart upload in progress; bucket, key and ID are
// in the Pebble key. Object is what the completed object will carry.
type UploadRecord struct {
	Initiated time.Time
	Owner     string
	Object    *metaapi.ObjectMeta
}

func (u UploadRecord) Encode() []byte {
	e := newEnc()
	e.u64(ms(u.Initiated))
	e.str(u.Owner)
	if u.Object != nil {
		e.objectMeta(u.Object)
	}
	return e.finish()
}

func DecodeUpload(v []byte) (UploadRecord, error) {
	d := newDec("upload", v)
	u := UploadRecord{Initiated: d.tm(), Owner: d.str(metaapi.MaxAccessKeyBytes)}
	if d.err == nil && len(d.b) > 0 {
		u.Object = d.objectMeta()
	}
	return u, d.done()
}

// partRecord is a committed part of an upload: the key record's layout
// (size, CRC32C, time, blocks) followed by ETag and checksums.
type PartRecord struct {
	KeyRecord
	ETag      string
	Checksums map[string]string
}

func (p PartRecord) Encode() []byte {
	e := newEnc()
	e.u64(p.Size)
	e.u32(p.CRC32C)
	e.u64(ms(p.Created))
	e.u32(uint32(len(p.Blocks)))
	for _, b := range p.Blocks {
		e.u64(b.Container)
		e.u64(b.Local)
		e.u64(b.Pipeline)
		e.u64(b.Length)
	}
	e.str(p.ETag)
	e.strMap(p.Checksums)
	return e.finish()
}

func DecodePart(v []byte) (PartRecord, error) {
	d := newDec("part", v)
	p := PartRecord{KeyRecord: KeyRecord{Size: d.u64(), CRC32C: d.u32(), Created: d.tm()}}
	n := d.u32()
	if d.err == nil && (n > MaxBlocksPerKey || uint64(len(d.b)) < uint64(n)*keyBlockBytes) {
		d.fail("%d blocks in %d bytes", n, len(d.b))
	}
	var sum uint64
	for i := uint32(0); i < n && d.err == nil; i++ {
		b := StoredBlock{Container: d.u64(), Local: d.u64(), Pipeline: d.u64(), Length: d.u64()}
		sum += b.Length
		p.Blocks = append(p.Blocks, b)
	}
	p.ETag = d.str(metaapi.MaxObjectMetaBytes)
	p.Checksums = d.strMap()
	if err := d.done(); err != nil {
		return p, err
	}
	if sum != p.Size {
		return p, fmt.Errorf("%w: part: blocks sum to %d bytes, size %d", ErrCorrupt, sum, p.Size)
	}
	return p, nil
}

const (
	MaxBlocksPerKey = metaapi.MaxBlocksPerKey
	maxBucketBytes  = metaapi.MaxBucketBytes
	MaxKeyBytes     = metaapi.MaxKeyBytes
)

// Meta log entry versions (the first byte of an entry's data): version 1
// holds one proposal, version 2 the proposals first..last of a stint
// folded into one entry (one Pebble batch, applied atomically). Members
// write version 2 and read both.
const (
	EntryVersionOne    = 1
	EntryVersionFolded = 2
)

// Entry overheads: version u8 | sequence u64 | … | crc u32 (version 1),
// version u8 | first u64 | last u64 | … | crc u32 (version 2).
const (
	EntryOneOverheadBytes    = 1 + 8 + 4
	EntryFoldedOverheadBytes = 1 + 8 + 8 + 4
)

// maxFoldedEntryBytes bounds the Pebble batch of a folded entry: a batch
// request's items, and the proposals queued together for the raft
// goroutine, go into one entry up to this size (a proposal alone may be
// larger, up to maxRaftRecordBytes). One append message's worth, so that
// a folded entry never needs a message of its own.
const MaxFoldedEntryBytes = MaxRaftMsgBytes

// encodeEntry is a meta log entry (version 2): the stint sequences first
// ..last of the proposals folded in it and their Pebble batch
// (docs/FORMAT.md, meta log entry).
func EncodeEntry(first, last uint64, repr []byte) []byte {
	b := make([]byte, 0, EntryFoldedOverheadBytes+len(repr))
	b = append(b, EntryVersionFolded)
	b = binary.LittleEndian.AppendUint64(b, first)
	b = binary.LittleEndian.AppendUint64(b, last)
	b = append(b, repr...)
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}

// decodeEntry checks and splits an entry's data, of either version (a
// version 1 entry is one proposal: first = last).
func DecodeEntry(data []byte) (first, last uint64, repr []byte, err error) {
	if len(data) < EntryOneOverheadBytes {
		return 0, 0, nil, fmt.Errorf("%w: meta log entry of %d bytes", ErrCorrupt, len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32c.Checksum(body); got != sum {
		return 0, 0, nil, fmt.Errorf("%w: meta log entry: crc %08x, want %08x", ErrCorrupt, got, sum)
	}
	switch body[0] {
	case EntryVersionOne:
		seq := binary.LittleEndian.Uint64(body[1:9])
		return seq, seq, body[9:], nil
	case EntryVersionFolded:
		if len(data) < EntryFoldedOverheadBytes {
			return 0, 0, nil, fmt.Errorf("%w: meta log entry of %d bytes", ErrCorrupt, len(data))
		}
		first, last = binary.LittleEndian.Uint64(body[1:9]), binary.LittleEndian.Uint64(body[9:17])
		if first == 0 || last < first {
			return 0, 0, nil, fmt.Errorf("%w: meta log entry of proposals %d..%d", ErrCorrupt, first, last)
		}
		return first, last, body[17:], nil
	}
	return 0, 0, nil, fmt.Errorf("%w: meta log entry version %d", ErrCorrupt, body[0])
}
