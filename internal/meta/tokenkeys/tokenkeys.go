// Package tokenkeys is the meta service's side of block tokens (issue 32
// item 3; package blocktoken). The signing keys are replicated state (records 'T', State.TokenKeys): a heartbeat finding the
// newest older than Config.BlockKeyRotation (or none) makes a new one in
// its batch and drops all but the newest two, so the key a token was
// signed with outlives the token (BlockTokenLifetime ≤ BlockKeyRotation);
// every heartbeat response carries both. The handlers of allocations
// (write tokens) and key lookups (read tokens) mint, for the caller's
// certificate name, one token per container of the blocks they answer,
// signed with the newest key, after the route's role check (guard) and
// the grants' check of the key (gate.Authorize, in the handler): a token
// is minted only for what the caller may read or write. Over plaintext
// the principal is empty (any). A key used before its batch commits (a lost leadership) only makes its
// tokens fail at the datanodes: the client asks again.
//
// Concurrency: the methods named …Locked run under State.Mu held for
// writing (the heartbeat's mutation); the others take it for reading.
package tokenkeys

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/blocktoken"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Minter keeps the signing keys and mints tokens.
type Minter struct{ st *state.State }

// New returns the Minter of st.
func New(st *state.State) *Minter { return &Minter{st: st} }

// HeartbeatLocked gives resp the signing keys (rotated when due) and each
// of its replicate_container commands an export token naming the caller's
// certificate, the copy's target: its sources export only to it.
func (t *Minter) HeartbeatLocked(b *pebble.Batch, now time.Time, caller tlsconf.Peer, resp *metaapi.HeartbeatResponse) {
	resp.BlockTokenKeys = t.rotateLocked(b, now)
	k := resp.BlockTokenKeys[len(resp.BlockTokenKeys)-1]
	for i := range resp.Commands {
		c := &resp.Commands[i]
		if c.Kind != metaapi.CmdReplicateContainer {
			continue
		}
		tok, err := blocktoken.Sign(blocktoken.Token{Ops: blocktoken.OpExport, Expiry: now.Add(t.st.Cfg.BlockTokenLifetime),
			Container: c.Container, Blocks: blocktoken.ExportBlocks, Principal: caller.Name}, k)
		if err == nil {
			c.Token = tok
		}
	}
}

// rotateLocked makes a new signing key when due (into b, under State.Mu)
// and returns the keys to hand to datanodes, oldest first.
func (t *Minter) rotateLocked(b *pebble.Batch, now time.Time) []blocktoken.Key {
	ks := t.st.TokenKeys
	if n := len(ks); n == 0 || now.Sub(ks[n-1].Created) >= t.st.Cfg.BlockKeyRotation || now.Before(ks[n-1].Created) {
		id := uint32(1)
		if n > 0 {
			id = ks[n-1].ID + 1
		}
		secret := make([]byte, blocktoken.SecretBytes)
		rand.Read(secret)
		rec := state.TokenKeyRecord{Created: now, Secret: secret}
		state.Set(b, state.U64Key(state.PrefixTokenKey, uint64(id)), rec.Encode())
		ks = append(slices.Clip(ks), state.TokenKey{Key: blocktoken.Key{ID: id, Secret: secret}, Created: now})
		for len(ks) > 2 {
			state.Del(b, state.U64Key(state.PrefixTokenKey, uint64(ks[0].ID)))
			ks = ks[1:]
		}
		t.st.TokenKeys = ks
	}
	out := make([]blocktoken.Key, len(ks))
	for i, k := range ks {
		out[i] = k.Key
	}
	return out
}

// signer returns the newest key (ok false: none yet).
func (t *Minter) signer() (blocktoken.Key, bool) {
	t.st.Mu.RLock()
	defer t.st.Mu.RUnlock()
	if n := len(t.st.TokenKeys); n > 0 {
		return t.st.TokenKeys[n-1].Key, true
	}
	return blocktoken.Key{}, false
}

// mint signs a token for the caller of r for op on locals of container.
func (t *Minter) Mint(r *http.Request, op blocktoken.Op, container uint64, locals []uint64) (string, error) {
	k, ok := t.signer()
	if !ok {
		return "", fmt.Errorf("%w: no block token key yet (the first datanode heartbeat makes one)", metaapi.ErrUnavailable)
	}
	caller, _ := tlsconf.PeerOfState(r.TLS) // refused by the route's guard already when it fails
	return blocktoken.Sign(blocktoken.Token{Ops: op, Expiry: t.st.Cfg.Now().Add(t.st.Cfg.BlockTokenLifetime),
		Container: container, Blocks: blocktoken.Ranges(locals), Principal: caller.Name}, k)
}

// allocation puts a write token for its block in an allocation.
func (t *Minter) Allocation(r *http.Request, a *metaapi.AllocateResponse) (err error) {
	a.Block.Token, err = t.Mint(r, blocktoken.OpWrite, a.Block.Container, []uint64{a.Block.Local})
	return err
}

// key puts read tokens in a key lookup's blocks: one per container, for
// the key's blocks in it (a 1 GiB key takes a token or a few, not one per
// block or chunk).
func (t *Minter) Key(r *http.Request, ki *metaapi.KeyInfo) error {
	if len(ki.Blocks) == 0 {
		return nil
	}
	locals := map[uint64][]uint64{}
	for _, b := range ki.Blocks {
		locals[b.Container] = append(locals[b.Container], b.Local)
	}
	tokens := make(map[uint64]string, len(locals))
	for c, ls := range locals {
		tok, err := t.Mint(r, blocktoken.OpRead, c, ls)
		if err != nil {
			return err
		}
		tokens[c] = tok
	}
	for i := range ki.Blocks {
		ki.Blocks[i].Token = tokens[ki.Blocks[i].Container]
	}
	return nil
}

// allocations is allocation for each allocation of a batch; one that
// cannot have its token is answered with the error instead.
func (t *Minter) Allocations(r *http.Request, res []metaapi.AllocateResult) {
	for i := range res {
		if res[i].Block == nil {
			continue
		}
		if err := t.Allocation(r, res[i].Block); err != nil {
			e := metaapi.ErrorFor(err)
			res[i] = metaapi.AllocateResult{Error: &e}
		}
	}
}

// keys is key for each key of a batch of lookups.
func (t *Minter) Keys(r *http.Request, res []metaapi.GetResult) {
	for i := range res {
		if res[i].Key == nil {
			continue
		}
		if err := t.Key(r, res[i].Key); err != nil {
			e := metaapi.ErrorFor(err)
			res[i] = metaapi.GetResult{Error: &e}
		}
	}
}
