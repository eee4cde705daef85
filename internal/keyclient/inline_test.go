package keyclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

const inlineMax = 5000

func inlineOptions() keyclient.Options {
	o := fakeOptions()
	o.InlineMaxBytes = inlineMax
	return o
}

// A value of at most InlineMaxBytes is committed inline: one CommitKey,
// no allocation, no chunk write; one byte more goes to blocks. Both read
// back whole, and ranges of the inline one too.
func TestPutInline(t *testing.T) {
	p := newFakePipeline(t, 1, 3)
	kc, meta := setup(t, inlineOptions(), p)
	ctx := testCtx(t)
	for i, size := range []int{1, 100, inlineMax} {
		data := randomBytes(uint64(i), size)
		var progress int64
		res, err := kc.Put(ctx, bkt, "small", bytes.NewReader(data), keyclient.PutOptions{Progress: func(n int64) { progress = n }})
		if err != nil {
			t.Fatalf("put %d bytes: %v", size, err)
		}
		if !res.Inline || res.Chunks != 0 || progress != int64(size) {
			t.Fatalf("put %d bytes: %+v, progress %d; want inline, no chunk, progress %d", size, res, progress, size)
		}
		ki := mustGet(t, ctx, kc, "small", data)
		if len(ki.Blocks) != 0 {
			t.Fatalf("%d bytes inline have %d blocks", size, len(ki.Blocks))
		}
	}
	p.mu.Lock()
	writes := p.writes
	p.mu.Unlock()
	if meta.Allocations != 0 || meta.InlineCommits != 3 || writes != 0 {
		t.Fatalf("%d allocations, %d inline commits, %d chunk writes; want 0, 3, 0", meta.Allocations, meta.InlineCommits, writes)
	}
	var got bytes.Buffer
	data := randomBytes(2, inlineMax)
	if _, err := kc.GetRange(ctx, bkt, "small", 100, 50, &got, keyclient.GetOptions{}); err != nil || !bytes.Equal(got.Bytes(), data[100:150]) {
		t.Fatalf("range of an inline value: %v, %d bytes", err, got.Len())
	}
	if _, err := kc.GetRange(ctx, bkt, "small", inlineMax-1, 2, &got, keyclient.GetOptions{}); !errors.Is(err, keyclient.ErrRange) {
		t.Fatalf("range past an inline value's end: %v", err)
	}

	big := randomBytes(9, inlineMax+1)
	res, err := kc.Put(ctx, bkt, "big", bytes.NewReader(big), keyclient.PutOptions{})
	if err != nil || res.Inline || res.Chunks == 0 {
		t.Fatalf("put %d bytes: %+v, %v; want blocks", len(big), res, err)
	}
	mustGet(t, ctx, kc, "big", big)
	if meta.Allocations == 0 {
		t.Fatal("a value one byte over the inline limit allocated nothing")
	}

	// A source that fails before its end commits nothing.
	_, err = kc.Put(ctx, bkt, "broken", &errReader{r: bytes.NewReader(data[:10]), err: errBroken}, keyclient.PutOptions{})
	if !errors.Is(err, errBroken) {
		t.Fatalf("put from a failing source: %v", err)
	}
	mustNotExist(t, ctx, kc, "broken")
}

var errBroken = errors.New("source broken")

// The commit hook gets an inline value in ck.Inline (no blocks), and
// NoInline writes a small value to blocks.
func TestPutInlineCommitHook(t *testing.T) {
	p := newFakePipeline(t, 1, 1)
	kc, meta := setup(t, inlineOptions(), p)
	ctx := testCtx(t)
	data := randomBytes(3, 300)
	var seen metaapi.CommitKey
	hook := func(ctx context.Context, ck metaapi.CommitKey) (metaapi.KeyInfo, error) {
		seen = ck
		return meta.CommitKey(ctx, bkt, "hooked", ck)
	}
	if _, err := kc.Put(ctx, bkt, "hooked", bytes.NewReader(data), keyclient.PutOptions{Commit: hook}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(seen.Inline, data) || len(seen.Blocks) != 0 || seen.Size != 300 || seen.CRC32C != crc(data) {
		t.Fatalf("hook saw %d bytes inline, %d blocks, size %d", len(seen.Inline), len(seen.Blocks), seen.Size)
	}
	mustGet(t, ctx, kc, "hooked", data)
	res, err := kc.Put(ctx, bkt, "hooked", bytes.NewReader(data), keyclient.PutOptions{Commit: hook, NoInline: true})
	if err != nil || res.Inline || len(seen.Blocks) != 1 || seen.Inline != nil {
		t.Fatalf("NoInline: %+v, %v, hook saw %d blocks, %d bytes inline", res, err, len(seen.Blocks), len(seen.Inline))
	}
	mustGet(t, ctx, kc, "hooked", data)
}

// A value inline whose bytes do not match its CRC32C (damaged on the
// way) is ErrCorrupt, not returned as the value.
func TestReadInlineCorrupt(t *testing.T) {
	kc, _ := setup(t, inlineOptions(), newFakePipeline(t, 1, 1))
	data := []byte("hello")
	ki := metaapi.KeyInfo{Bucket: bkt, Key: "k", Size: 5, CRC32C: crc(data), Inline: []byte("hellp")}
	if err := kc.ReadKey(testCtx(t), ki, 0, -1, io.Discard, keyclient.GetOptions{}); !errors.Is(err, keyclient.ErrCorrupt) {
		t.Fatalf("damaged inline value: %v, want ErrCorrupt", err)
	}
	ki.Inline = data[:4]
	if err := kc.ReadKey(testCtx(t), ki, 0, -1, io.Discard, keyclient.GetOptions{}); !errors.Is(err, keyclient.ErrCorrupt) {
		t.Fatalf("short inline value: %v, want ErrCorrupt", err)
	}
}
