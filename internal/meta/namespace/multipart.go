package namespace

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/cluster"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Multipart uploads (the S3 gateway's). An upload is a record
// 'W'|bucket|0|key|0|uploadID; its parts are records
// 'X'|bucket|0|key|0|uploadID|0|number(u32 BE), each holding the part's
// block list (blocks allocated for the upload's bucket/key and claimed by
// CommitPart, as CommitKey claims a key's). CompleteUpload writes the key
// record from the listed parts' block lists and deletes the upload's
// records in one batch: O(parts) record operations, no data copied. Every
// change goes through mutate (commit.go). Uploads and parts are not held
// in memory; they are read from the store under s.mu.

// newUploadID is 32 random hex digits.
func newUploadID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// getUpload reads an upload record (ok false: none).
func (s *Multipart) getUpload(ref metaapi.UploadRef) (_ state.UploadRecord, _ bool, err error) {
	v, closer, err := s.Store.Get(state.UploadKey(ref.Bucket, ref.Key, ref.UploadID))
	if errors.Is(err, pebble.ErrNotFound) {
		return state.UploadRecord{}, false, nil
	}
	if err != nil {
		return state.UploadRecord{}, false, fmt.Errorf("meta: read upload %s: %w", ref.UploadID, err)
	}
	defer state.CloseInto(closer, &err, "read upload record")
	rec, err := state.DecodeUpload(v)
	if err != nil {
		return rec, false, fmt.Errorf("meta: upload %s/%s %s: %w", ref.Bucket, ref.Key, ref.UploadID, err)
	}
	return rec, true, nil
}

// uploadOf checks the names and that the upload exists.
func (s *Multipart) uploadOf(ref metaapi.UploadRef) (state.BucketRecord, state.UploadRecord, error) {
	brec, err := s.BucketOf(ref.Bucket, ref.Key)
	if err != nil {
		return brec, state.UploadRecord{}, err
	}
	if ref.UploadID == "" || len(ref.UploadID) > 64 {
		return brec, state.UploadRecord{}, fmt.Errorf("%w %q of %s/%s", metaapi.ErrNoSuchUpload, ref.UploadID, ref.Bucket, ref.Key)
	}
	up, ok, err := s.getUpload(ref)
	if err != nil {
		return brec, up, err
	}
	if !ok {
		return brec, up, fmt.Errorf("%w %s of %s/%s", metaapi.ErrNoSuchUpload, ref.UploadID, ref.Bucket, ref.Key)
	}
	return brec, up, nil
}

// parts calls fn for the upload's parts numbered above after, in order,
// until fn returns false.
func (s *Multipart) parts(ref metaapi.UploadRef, after uint32, fn func(n uint32, p state.PartRecord) bool) (err error) {
	if after == ^uint32(0) {
		return nil
	}
	pp := state.PartPrefix(ref.Bucket, ref.Key, ref.UploadID)
	it, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: binary.BigEndian.AppendUint32(slices.Clone(pp), after+1), UpperBound: state.PrefixEnd(pp)})
	if err != nil {
		return fmt.Errorf("meta: parts of %s: %w", ref.UploadID, err)
	}
	defer state.CloseInto(it, &err, "parts of "+ref.UploadID)
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != len(pp)+4 {
			return fmt.Errorf("%w: part key %x", state.ErrCorrupt, k)
		}
		p, err := state.DecodePart(it.Value())
		if err != nil {
			return fmt.Errorf("meta: upload %s part: %w", ref.UploadID, err)
		}
		if !fn(binary.BigEndian.Uint32(k[len(pp):]), p) {
			break
		}
	}
	return it.Error()
}

func uploadView(ref metaapi.UploadRef, u state.UploadRecord) metaapi.Upload {
	return metaapi.Upload{UploadRef: ref, Owner: u.Owner, Initiated: u.Initiated, Object: u.Object}
}

func partView(n uint32, p state.PartRecord) metaapi.Part {
	return metaapi.Part{Number: n, Size: p.Size, ETag: p.ETag, CRC32C: p.CRC32C, Checksums: p.Checksums, Modified: p.Created}
}

// CreateUpload starts a multipart upload of bucket/key.
func (s *Multipart) CreateUpload(req *metaapi.CreateUpload) (*metaapi.Upload, error) {
	if req.Object != nil {
		if err := req.Object.Validate(); err != nil {
			return nil, err
		}
	}
	if len(req.Owner) > metaapi.MaxAccessKeyBytes {
		return nil, fmt.Errorf("%w: owner of %d bytes", metaapi.ErrInvalid, len(req.Owner))
	}
	ref := metaapi.UploadRef{Bucket: req.Bucket, Key: req.Key, UploadID: newUploadID()}
	return state.Mutate(s.State, func() (*metaapi.Upload, *pebble.Batch, error) {
		brec, err := s.BucketOf(req.Bucket, req.Key)
		if err != nil {
			return nil, nil, err
		}
		if err := (Versions{s.ns}).lockOnWrite(&brec, req.Bucket, &state.KeyRecord{Object: req.Object}, s.Cfg.Now()); err != nil {
			return nil, nil, err // a lock asked where there is none: refused now, not at completion (objlock.go)
		}
		rec := state.UploadRecord{Initiated: s.Cfg.Now(), Owner: req.Owner, Object: req.Object}
		b := s.Store.NewBatch()
		state.Set(b, state.UploadKey(ref.Bucket, ref.Key, ref.UploadID), rec.Encode())
		v := uploadView(ref, rec)
		return &v, b, nil
	})
}

// GetUpload returns an upload in progress.
func (s *Multipart) GetUpload(ref metaapi.UploadRef) (*metaapi.Upload, error) {
	return state.Read(s.State, func() (*metaapi.Upload, error) {
		_, up, err := s.uploadOf(ref)
		if err != nil {
			return nil, err
		}
		v := uploadView(ref, up)
		return &v, nil
	})
}

// CommitPart makes the blocks part req.Number of the upload, replacing an
// older part of that number (its blocks scheduled for deletion). The same
// part committed again (a retry) succeeds and changes nothing.
func (s *Multipart) CommitPart(req *metaapi.CommitPart) (*metaapi.Part, error) {
	if req.Number < 1 || req.Number > metaapi.MaxParts {
		return nil, fmt.Errorf("%w: part number %d: want 1..%d", metaapi.ErrInvalid, req.Number, metaapi.MaxParts)
	}
	if err := s.ns.checkBlockList(req.Blocks, req.Size); err != nil {
		return nil, err
	}
	if len(req.ETag) > 64 || len(req.Checksums) > 8 {
		return nil, fmt.Errorf("%w: part ETag or checksums too long", metaapi.ErrInvalid)
	}
	return state.Mutate(s.State, func() (*metaapi.Part, *pebble.Batch, error) {
		if _, _, err := s.uploadOf(req.UploadRef); err != nil {
			return nil, nil, err
		}
		pk := state.PartKey(req.Bucket, req.Key, req.UploadID, req.Number)
		var old *state.PartRecord
		v, closer, err := s.Store.Get(pk)
		switch {
		case errors.Is(err, pebble.ErrNotFound):
		case err != nil:
			return nil, nil, fmt.Errorf("meta: read part %d of %s: %w", req.Number, req.UploadID, err)
		default:
			p, derr := state.DecodePart(v)
			state.CloseInto(closer, &derr, fmt.Sprintf("read part %d of %s", req.Number, req.UploadID))
			if derr != nil {
				return nil, nil, derr
			}
			old = &p
		}
		if old != nil && old.ETag == req.ETag && sameVersion(old.KeyRecord, &metaapi.CommitKey{Size: req.Size, CRC32C: req.CRC32C, Blocks: req.Blocks}) {
			pv := partView(req.Number, *old)
			return &pv, nil, nil
		}
		blocks, err := s.ns.claimable(req.Bucket, req.Key, req.Blocks)
		if err != nil {
			return nil, nil, err
		}
		now := s.Cfg.Now()
		rec := state.PartRecord{KeyRecord: state.KeyRecord{Size: req.Size, CRC32C: req.CRC32C, Created: now, Blocks: blocks}, ETag: req.ETag, Checksums: req.Checksums}
		b := s.Store.NewBatch()
		state.Set(b, pk, rec.Encode())
		s.ns.claim(b, blocks)
		if old != nil {
			for _, sb := range old.Blocks {
				s.gc.ScheduleDelete(b, state.BlockRef{Container: sb.Container, Local: sb.Local}, state.ReasonReplaced, now)
			}
		}
		pv := partView(req.Number, rec)
		return &pv, b, nil
	})
}

// ListParts returns the upload's parts numbered above req.After.
func (s *Multipart) ListParts(req *metaapi.ListParts) (*metaapi.PartList, error) {
	limit := req.Limit
	if limit <= 0 || limit > metaapi.MaxUploadPage {
		limit = metaapi.MaxUploadPage
	}
	return state.Read(s.State, func() (*metaapi.PartList, error) {
		_, up, err := s.uploadOf(req.UploadRef)
		if err != nil {
			return nil, err
		}
		l := &metaapi.PartList{Upload: uploadView(req.UploadRef, up), Parts: []metaapi.Part{}}
		err = s.parts(req.UploadRef, req.After, func(n uint32, p state.PartRecord) bool {
			if len(l.Parts) == limit {
				l.Next = l.Parts[len(l.Parts)-1].Number
				return false
			}
			l.Parts = append(l.Parts, partView(n, p))
			return true
		})
		return l, err
	})
}

// dropUpload deletes the upload's records in b and schedules the blocks
// of its parts for deletion, except those of the parts in keep.
func (s *Multipart) dropUpload(b *pebble.Batch, ref metaapi.UploadRef, all map[uint32]state.PartRecord, keep map[uint32]bool, now time.Time) {
	for n, p := range all {
		state.Del(b, state.PartKey(ref.Bucket, ref.Key, ref.UploadID, n))
		if keep[n] {
			continue
		}
		for _, sb := range p.Blocks {
			s.gc.ScheduleDelete(b, state.BlockRef{Container: sb.Container, Local: sb.Local}, state.ReasonDeleted, now)
		}
	}
	state.Del(b, state.UploadKey(ref.Bucket, ref.Key, ref.UploadID))
}

// allParts reads every part of an upload (at most MaxParts).
func (s *Multipart) allParts(ref metaapi.UploadRef) (map[uint32]state.PartRecord, error) {
	all := map[uint32]state.PartRecord{}
	err := s.parts(ref, 0, func(n uint32, p state.PartRecord) bool {
		all[n] = p
		return true
	})
	return all, err
}

// AbortUpload drops an upload; its parts' blocks are scheduled for deletion.
func (s *Multipart) AbortUpload(ref metaapi.UploadRef) error {
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		if _, _, err := s.uploadOf(ref); err != nil {
			return struct{}{}, nil, err
		}
		all, err := s.allParts(ref)
		if err != nil {
			return struct{}{}, nil, err
		}
		b := s.Store.NewBatch()
		s.dropUpload(b, ref, all, nil, s.Cfg.Now())
		return struct{}{}, b, nil
	})
	return err
}

// CompleteUpload makes the key from the listed parts (see metaapi).
func (s *Multipart) CompleteUpload(req *metaapi.CompleteUpload) (*metaapi.KeyInfo, error) {
	return s.CompleteUploadAs(req, nil)
}

// CompleteUploadAs is CompleteUpload checked by check (as CommitKeyAs:
// under s.mu, once the completion knows whether it replaces the key, so
// that a key created meanwhile is an overwrite to check).
func (s *Multipart) CompleteUploadAs(req *metaapi.CompleteUpload, check Check) (*metaapi.KeyInfo, error) {
	if len(req.Parts) == 0 || len(req.Parts) > metaapi.MaxParts {
		return nil, fmt.Errorf("%w: %d parts: want 1..%d", metaapi.ErrInvalid, len(req.Parts), metaapi.MaxParts)
	}
	for i, p := range req.Parts {
		if i > 0 && p.Number <= req.Parts[i-1].Number {
			return nil, fmt.Errorf("%w: part %d after part %d: %w", metaapi.ErrInvalid, p.Number, req.Parts[i-1].Number, ErrPartOrder)
		}
	}
	return state.Mutate(s.State, func() (*metaapi.KeyInfo, *pebble.Batch, error) {
		brec, up, err := s.uploadOf(req.UploadRef)
		if err != nil {
			return nil, nil, err
		}
		old, exists, err := s.ns.getKey(req.Bucket, req.Key)
		if err != nil {
			return nil, nil, err
		}
		if check != nil {
			if err := check(req.Bucket, req.Key, exists); err != nil {
				return nil, nil, err
			}
		}
		all, err := s.allParts(req.UploadRef)
		if err != nil {
			return nil, nil, err
		}
		now := s.Cfg.Now()
		rec := state.KeyRecord{Created: now}
		etags := make([]string, 0, len(req.Parts))
		keep := map[uint32]bool{}
		for i, cp := range req.Parts {
			p, ok := all[cp.Number]
			if !ok || trimETag(cp.ETag) != p.ETag {
				return nil, nil, fmt.Errorf("%w: part %d (ETag %s) was not uploaded: %w", metaapi.ErrInvalid, cp.Number, cp.ETag, ErrInvalidPart)
			}
			if i < len(req.Parts)-1 && p.Size < metaapi.MinPartBytes {
				return nil, nil, fmt.Errorf("%w: part %d holds %d bytes, less than %d and not the last: %w", metaapi.ErrInvalid, cp.Number, p.Size, metaapi.MinPartBytes, ErrPartTooSmall)
			}
			etags = append(etags, p.ETag)
			rec.CRC32C = crc32c.Combine(rec.CRC32C, p.CRC32C, p.Size)
			rec.Size += p.Size
			rec.Blocks = append(rec.Blocks, p.Blocks...)
			keep[cp.Number] = true
		}
		if len(rec.Blocks) > state.MaxBlocksPerKey {
			return nil, nil, fmt.Errorf("%w: %d blocks, at most %d", metaapi.ErrInvalid, len(rec.Blocks), state.MaxBlocksPerKey)
		}
		if err := checkConditions(req.Bucket, req.Key, old, exists, req.Conditions); err != nil {
			return nil, nil, err
		}
		om := metaapi.ObjectMeta{}
		if up.Object != nil {
			om = *up.Object
		}
		if om.ETag, err = metaapi.MultipartETag(etags); err != nil {
			return nil, nil, fmt.Errorf("%w: a stored part ETag: %v", state.ErrCorrupt, err)
		}
		om.Parts = uint32(len(req.Parts))
		om.PartSizes = make([]uint64, len(req.Parts))
		for i, cp := range req.Parts {
			om.PartSizes[i] = all[cp.Number].Size
		}
		om.Checksums = map[string]string{"CRC32C": base64CRC(rec.CRC32C)}
		om.ChecksumType = "FULL_OBJECT"
		rec.Object = &om
		b := s.Store.NewBatch()
		if err := (Versions{s.ns}).placeVersion(b, &brec, req.Bucket, req.Key, old, exists, &rec, now); err != nil {
			state.CloseBatch(b)
			return nil, nil, err
		}
		s.dropUpload(b, req.UploadRef, all, keep, now)
		state.Set(b, state.BucketKey(req.Bucket), brec.Encode())
		s.Buckets[req.Bucket] = brec
		return s.ns.keyInfo(req.Bucket, req.Key, rec, now), b, nil
	})
}

// Reasons a completion is refused (with metaapi.ErrInvalid), for the
// gateway's S3 error codes: metaapi's, which the answer's reason carries.
var (
	ErrPartOrder    = metaapi.ErrPartOrder
	ErrInvalidPart  = metaapi.ErrInvalidPart
	ErrPartTooSmall = metaapi.ErrPartTooSmall
)

// base64CRC is a CRC32C as S3 writes it: base64 of its 4 big-endian bytes.
func base64CRC(c uint32) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, c))
}

// ListUploads returns a page of a bucket's uploads whose key starts with
// req.Prefix, after (KeyMarker, UploadIDMarker).
func (s *Multipart) ListUploads(req *metaapi.ListUploads) (*metaapi.UploadList, error) {
	if err := metaapi.ValidBucket(req.Bucket); err != nil {
		return nil, err
	}
	limit := req.Limit
	if limit <= 0 || limit > metaapi.MaxUploadPage {
		limit = metaapi.MaxUploadPage
	}
	return state.Read(s.State, func() (_ *metaapi.UploadList, err error) {
		if _, ok := s.Buckets[req.Bucket]; !ok {
			return nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, req.Bucket)
		}
		up := state.UploadPrefix(req.Bucket)
		lo := append(slices.Clone(up), req.Prefix...)
		it, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: state.PrefixEnd(lo)})
		if err != nil {
			return nil, fmt.Errorf("meta: uploads of %s: %w", req.Bucket, err)
		}
		defer state.CloseInto(it, &err, "uploads of "+req.Bucket)
		ok := it.First()
		if req.KeyMarker != "" {
			seek := append(append(slices.Clone(up), req.KeyMarker...), 0)
			if req.UploadIDMarker != "" {
				seek = append(append(seek, req.UploadIDMarker...), 0)
			} else {
				seek = state.PrefixEnd(seek)
			}
			if bytes.Compare(seek, lo) > 0 {
				ok = it.SeekGE(seek)
			}
		}
		l := &metaapi.UploadList{Uploads: []metaapi.Upload{}}
		for ; ok; ok = it.Next() {
			key, id, found := bytes.Cut(it.Key()[len(up):], []byte{0})
			if !found {
				return nil, fmt.Errorf("%w: upload key %x", state.ErrCorrupt, it.Key())
			}
			if len(l.Uploads) == limit {
				l.Truncated = true
				break
			}
			rec, err := state.DecodeUpload(it.Value())
			if err != nil {
				return nil, err
			}
			l.Uploads = append(l.Uploads, uploadView(metaapi.UploadRef{Bucket: req.Bucket, Key: string(key), UploadID: string(id)}, rec))
		}
		return l, it.Error()
	})
}

// MaxUploadsDroppedWithBucket and MaxPartsDroppedWithBucket bound what
// deleting a bucket aborts in one batch: its multipart uploads in progress
// and their part records (a batch of 100,000 deletions is a few MB). A
// bucket with more is refused (ErrNotEmpty) until they are aborted one by
// one.
const (
	MaxUploadsDroppedWithBucket = 10_000
	MaxPartsDroppedWithBucket   = 100_000
)

// dropBucketUploads aborts, in b, every multipart upload in progress in
// bucket, as S3 does when the bucket is deleted: their records go, their
// parts' blocks are scheduled for deletion.
func (s *Multipart) dropBucketUploads(b *pebble.Batch, bucket string, now time.Time) error {
	refs, err := s.bucketUploads(bucket)
	if err != nil {
		return err
	}
	parts := 0
	for _, ref := range refs {
		all, err := s.allParts(ref)
		if err != nil {
			return err
		}
		if parts += len(all); parts > MaxPartsDroppedWithBucket {
			return fmt.Errorf("%w: bucket %s has more than %d parts of multipart uploads in progress: abort them first",
				metaapi.ErrNotEmpty, bucket, MaxPartsDroppedWithBucket)
		}
		s.dropUpload(b, ref, all, nil, now)
	}
	return nil
}

// bucketUploads lists the bucket's uploads in progress for
// dropBucketUploads: ErrNotEmpty past MaxUploadsDroppedWithBucket.
func (s *Multipart) bucketUploads(bucket string) (refs []metaapi.UploadRef, err error) {
	up := state.UploadPrefix(bucket)
	it, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: up, UpperBound: state.PrefixEnd(up)})
	if err != nil {
		return nil, fmt.Errorf("meta: uploads of %s: %w", bucket, err)
	}
	defer state.CloseInto(it, &err, "uploads of "+bucket) // after the key is read into an error below
	for ok := it.First(); ok; ok = it.Next() {
		key, id, found := bytes.Cut(it.Key()[len(up):], []byte{0})
		if !found {
			return nil, fmt.Errorf("%w: upload key %x", state.ErrCorrupt, it.Key())
		}
		if len(refs) == MaxUploadsDroppedWithBucket {
			return nil, fmt.Errorf("%w: bucket %s has more than %d multipart uploads in progress: abort them first",
				metaapi.ErrNotEmpty, bucket, MaxUploadsDroppedWithBucket)
		}
		refs = append(refs, metaapi.UploadRef{Bucket: bucket, Key: string(key), UploadID: string(id)})
	}
	return refs, nil
}

// Multipart holds the S3 multipart uploads.
type Multipart struct {
	*state.State
	ns *Namespace
	gc *cluster.BlockGC
}
