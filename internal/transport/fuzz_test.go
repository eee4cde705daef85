package transport

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReader feeds arbitrary bytes to the frame decoder and decodes every
// frame it accepts: never a panic; every error is io.EOF, a truncation
// (io.ErrUnexpectedEOF) or ErrBadFrame; accepted frames respect the limits.
func FuzzReader(f *testing.F) {
	var all []byte
	for _, fr := range sampleFrames() {
		b := encodeFrame(f, fr.m, fr.payload...)
		f.Add(b)
		all = append(all, b...)
	}
	f.Add(all)
	f.Add(prefixBytes('S', 'W', 1, TypeWriteChunk, MaxHeaderBytes+1, 0))
	f.Add(prefixBytes('S', 'W', 1, TypeRaftMessage, 3, 2))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), ConnConfig{ReadBufferBytes: MinReadBufferBytes, RetainPayloadBytes: 4096})
		for range 64 {
			fr, err := r.ReadFrame()
			if err != nil {
				if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrBadFrame) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				if _, err2 := r.ReadFrame(); err2 != err {
					t.Fatalf("error not sticky: %v then %v", err, err2)
				}
				return
			}
			if len(fr.Header) > MaxHeaderBytes || len(fr.Payload) > MaxPayloadBytes || !fr.Type.Valid() {
				t.Fatalf("accepted a frame over the limits: %s %d %d", fr.Type, len(fr.Header), len(fr.Payload))
			}
			m := newMessage(fr.Type)
			if err := fr.Decode(m); err != nil {
				if !errors.Is(err, ErrBadFrame) {
					t.Fatalf("Decode: %v", err)
				}
				continue
			}
			if rm, ok := m.(*RaftMessage); ok {
				segs, err := rm.Segments(fr.Payload, nil)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, s := range segs {
					n += len(s)
				}
				if n != len(fr.Payload) {
					t.Fatal("segments do not cover the payload")
				}
			}
		}
	})
}

// checkHeader is the property every header decoder must have: no panic; a
// refusal wraps ErrBadFrame; an accepted header re-encodes (canonically)
// to bytes that decode to the same value and re-encode to the same bytes;
// bytes that were canonical re-encode to themselves; decoding into a used
// message gives the same value as into a fresh one.
func checkHeader(t *testing.T, typ MsgType, data []byte) {
	m := newMessage(typ)
	if err := m.Unmarshal(data); err != nil {
		if !errors.Is(err, ErrBadFrame) {
			t.Fatalf("Unmarshal error without ErrBadFrame: %v", err)
		}
		return
	}
	b1, err := m.appendHeader(nil)
	if err != nil {
		t.Fatalf("re-marshal: %v", err)
	}
	m2 := newMessage(typ)
	if err := m2.Unmarshal(b1); err != nil {
		t.Fatalf("canonical encoding does not decode: %v\n%x", err, b1)
	}
	if !equalMessages(m, m2) {
		t.Fatalf("value changed through a re-encode:\n%+v\n%+v", m, m2)
	}
	b2, err := m2.appendHeader(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("canonical encoding not stable:\n%x\n%x", b1, b2)
	}
	if typ != TypeRaftMessage {
		// Bytes that are canonical round-trip exactly (the raft message
		// is re-encoded by the protobuf runtime, whose choices for
		// non-canonical input may differ).
		m3 := newMessage(typ)
		if err := m3.Unmarshal(b1); err != nil {
			t.Fatal(err)
		}
		if b3, _ := m3.appendHeader(nil); !bytes.Equal(b3, b1) {
			t.Fatal("canonical bytes did not re-encode to themselves")
		}
	}
	// A used message: fill it with a sample first.
	used := newMessage(typ)
	for _, fr := range sampleFrames() {
		if fr.m.Type() == typ {
			if err := used.Unmarshal(marshal(t, fr.m)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := used.Unmarshal(data); err != nil {
		t.Fatalf("decodes fresh but not into a used message: %v", err)
	}
	if !equalMessages(used, m) {
		t.Fatalf("decode into a used message differs:\n%+v\n%+v", used, m)
	}
}

func addHeaderSeeds(f *testing.F, typ MsgType) {
	for _, fr := range sampleFrames() {
		if fr.m.Type() == typ {
			b := marshal(f, fr.m)
			f.Add(b)
			if len(b) > 3 {
				f.Add(b[:len(b)-3])
			}
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x80})
}

func FuzzWriteChunk(f *testing.F) {
	addHeaderSeeds(f, TypeWriteChunk)
	f.Fuzz(func(t *testing.T, data []byte) { checkHeader(t, TypeWriteChunk, data) })
}

func FuzzPutBlock(f *testing.F) {
	addHeaderSeeds(f, TypePutBlock)
	f.Fuzz(func(t *testing.T, data []byte) { checkHeader(t, TypePutBlock, data) })
}

func FuzzReadChunk(f *testing.F) {
	addHeaderSeeds(f, TypeReadChunk)
	f.Fuzz(func(t *testing.T, data []byte) { checkHeader(t, TypeReadChunk, data) })
}

func FuzzGetBlock(f *testing.F) {
	addHeaderSeeds(f, TypeGetBlock)
	f.Fuzz(func(t *testing.T, data []byte) { checkHeader(t, TypeGetBlock, data) })
}

func FuzzResponse(f *testing.F) {
	addHeaderSeeds(f, TypeResponse)
	f.Fuzz(func(t *testing.T, data []byte) { checkHeader(t, TypeResponse, data) })
}

func FuzzRaftMessage(f *testing.F) {
	addHeaderSeeds(f, TypeRaftMessage)
	f.Fuzz(func(t *testing.T, data []byte) { checkHeader(t, TypeRaftMessage, data) })
}
