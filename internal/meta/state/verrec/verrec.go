// Package verrec is the layout of S3 object versions in the meta
// service's store (docs/FORMAT.md §13.1, §13.3): the version section a
// key record may end with, the keys of noncurrent versions ('V' records)
// and the version IDs the S3 API shows.
//
// Layout: a key's current version stays where every key record is,
// 'K'|bucket|0x00|key (one seek, and a listing of the current keys
// reads nothing else); its older versions and its delete markers live at
// 'V'|bucket|0x00|key|0x00|^id (the ID inverted, big-endian), so the
// versions of a key are contiguous, newest first, and keys come in the
// same byte order as in the 'K' range (key names hold no 0x00).
//
// Invariants: a version ID is never 0 except for the one null version a
// key written before its bucket was versioned may have (a record without
// a version section); the IDs of a key's versions grow with their age
// reversed (a newer version has a greater ID); a key has at most one
// null version. A key's current version (its 'K' record) is never a
// delete marker, and when a key has a 'K' record it is its newest
// version.
//
// Concurrency: functions only; no state.
package verrec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Prefix is the first byte of a noncurrent version's key.
const Prefix = 'V'

// Tag is the first byte of a key record's version section (an object
// metadata section starts with 1 or 2).
const Tag = 'V'

// SectionBytes is the encoded size of a version section.
const SectionBytes = 10

// Flags of a version section.
const (
	FlagNull   = 1 << 0 // the null version (written while versioning was suspended)
	FlagMarker = 1 << 1 // a delete marker (no value, no blocks)
	flagsAll   = FlagNull | FlagMarker
)

// Version is a key record's version section. The zero value is a record
// without one: the null version of a key written while its bucket was
// never versioned (ID 0).
type Version struct {
	ID     uint64
	Null   bool
	Marker bool
}

// Present says whether the section is written (ID 0: none).
func (v Version) Present() bool { return v.ID != 0 }

// Append appends the section (Tag, flags u8, ID u64 LE) to b; nothing
// when !Present.
func (v Version) Append(b []byte) []byte {
	if !v.Present() {
		return b
	}
	var f byte
	if v.Null {
		f |= FlagNull
	}
	if v.Marker {
		f |= FlagMarker
	}
	b = append(b, Tag, f)
	return binary.LittleEndian.AppendUint64(b, v.ID)
}

// ErrSection is a malformed version section.
var ErrSection = errors.New("bad version section")

// Decode reads a section from the front of b and returns the rest.
func Decode(b []byte) (Version, []byte, error) {
	if len(b) < SectionBytes || b[0] != Tag {
		return Version{}, b, fmt.Errorf("%w: %d bytes", ErrSection, len(b))
	}
	f, id := b[1], binary.LittleEndian.Uint64(b[2:10])
	if f&^flagsAll != 0 || id == 0 {
		return Version{}, b, fmt.Errorf("%w: flags %#x, id %d", ErrSection, f, id)
	}
	return Version{ID: id, Null: f&FlagNull != 0, Marker: f&FlagMarker != 0}, b[SectionBytes:], nil
}

// String is the version ID S3 shows: "null" for a null version, else the
// ID as 16 lower-case hex digits (so that IDs of one length sort as they
// were made).
func (v Version) String() string {
	if v.Null || v.ID == 0 {
		return "null"
	}
	const digits = "0123456789abcdef"
	var b [16]byte
	for i, id := 15, v.ID; i >= 0; i, id = i-1, id>>4 {
		b[i] = digits[id&0xf]
	}
	return string(b[:])
}

// ErrForeignID is a version ID of a well-formed shape Spindle does not
// make (another S3 server's: letters and digits, up to 1,024): no version
// has it, but it is no malformed request either.
var ErrForeignID = errors.New("no version has this ID")

// ParseID reads a version ID as String writes it; null is true for
// "null" (whose ID the caller must look up). An ID of letters and digits
// in another shape is ErrForeignID; anything else is malformed.
func ParseID(s string) (id uint64, null bool, err error) {
	if s == "null" {
		return 0, true, nil
	}
	if len(s) == 16 {
		if id, err = strconv.ParseUint(s, 16, 64); err == nil && id != 0 && strings.ToLower(s) == s {
			return id, false, nil
		}
	}
	if s == "" || len(s) > 1024 || strings.IndexFunc(s, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) >= 0 {
		return 0, false, fmt.Errorf("version ID %q: want 16 hex digits or null", s)
	}
	return 0, false, fmt.Errorf("%w: %q", ErrForeignID, s)
}

// KeyPrefix is 'V'|bucket|0x00: every noncurrent version of the bucket
// starts with it.
func KeyPrefix(bucket string) []byte {
	k := make([]byte, 0, len(bucket)+2)
	return append(append(append(k, Prefix), bucket...), 0)
}

// VersionsOf is 'V'|bucket|0x00|key|0x00: the versions of one key.
func VersionsOf(bucket, key string) []byte {
	return append(append(KeyPrefix(bucket), key...), 0)
}

// Key is the store key of a noncurrent version.
func Key(bucket, key string, id uint64) []byte {
	return binary.BigEndian.AppendUint64(VersionsOf(bucket, key), ^id)
}

// Split parses a 'V' key of the bucket (p = KeyPrefix(bucket)) into its
// key name and version ID.
func Split(p, k []byte) (key string, id uint64, ok bool) {
	if len(k) < len(p)+9 || k[len(k)-9] != 0 {
		return "", 0, false
	}
	return string(k[len(p) : len(k)-9]), ^binary.BigEndian.Uint64(k[len(k)-8:]), true
}

// Bucket states (a bucket record's versioning byte).
const (
	Unversioned = 0
	Enabled     = 1
	Suspended   = 2
)

// StatusName is the S3 name of a bucket state ("" for Unversioned).
func StatusName(s uint8) string {
	switch s {
	case Enabled:
		return "Enabled"
	case Suspended:
		return "Suspended"
	}
	return ""
}
