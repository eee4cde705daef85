// Package creds is the meta service's key encryption key at work (package
// kek): loading the keyring at Open, a member's keyring status, and the
// rotation, which re-seals every sealed record once every member of the
// group holds the leader's current key. Package meta serves it
// (http_creds.go); the sealed records themselves are their owners'
// (namespace.S3Users: the S3 users).
//
// Invariants: nothing is re-sealed unless every member answered that its
// keyring holds the key it would be sealed under (a member without it
// could not open the secrets once leader); the keyring never enters the
// store.
//
// Concurrency: no state of its own; the keyring is safe for concurrent
// use, the re-sealing goes through state.Mutate.
package creds

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/credapi"
	"github.com/spindle-store/spindle/internal/kek"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// peerTimeout bounds the rotation's question to each member.
const peerTimeout = 5 * time.Second

// LoadKEK sets cfg.KEK, unless given, from SPINDLE_KEK or the keyring file
// (cfg.KEKFile, default beside the meta directory), created at the first
// start. A replicated member that creates its own is told that every
// member needs the same keyring (docs/OPERATIONS.md §4).
func LoadKEK(cfg *state.Config, log *slog.Logger) error {
	if cfg.KEK != nil {
		return nil
	}
	path := cfg.KEKFile
	if path == "" {
		path = kek.DefaultPath(cfg.Dir)
	}
	k, created, err := kek.Load(cfg.FS, path)
	if err != nil {
		return fmt.Errorf("meta: key encryption key: %w", err)
	}
	cfg.KEK = k
	switch {
	case created && len(cfg.Peers) > 1:
		log.Warn("key encryption key created: every member of the group needs this same keyring (copy the file to each member's --kek-file, or set SPINDLE_KEK alike), or a member that becomes leader cannot open the S3 secrets",
			"file", path, "key_id", k.Current())
	case created:
		log.Info("key encryption key created (keep it with the store's backups, apart from them: without it the S3 secrets cannot be opened)", "file", path, "key_id", k.Current())
	}
	return nil
}

// Status is member's keyring (IDs only).
func Status(k *kek.Keyring, member uint64) credapi.KEKStatus {
	src := k.Path()
	if src == "" {
		src = kek.EnvVar
	}
	return credapi.KEKStatus{Member: member, Current: k.Current(), Keys: k.IDs(), Source: src}
}

// Routes adds the credential routes (package credapi) with route: a
// user's keys set (set), this member's keyring (every member answers),
// and the rotation, which re-seals with every resealer (each a kind of
// record sealed with the KEK: S3 users; a token-signing key adds its own).
func Routes(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error)), st *state.State,
	group func() metaapi.MetaStatus, set func(name, access, secret string) (*metaapi.User, error), resealers ...func() (int, error)) {
	route("PUT "+credapi.UsersRoute+"{name}/keys", "set_user_keys", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		return SetUserKeys(w, r, set)
	})
	route("GET "+credapi.KEKRoute, "kek_status", func(http.ResponseWriter, *http.Request) (any, int, error) {
		return MemberStatus(st.Cfg.KEK, group().ID)
	})
	route("POST "+credapi.KEKRoute+"/rotate", "kek_rotate", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		return Rotate(r.Context(), st, group(), resealers)
	})
}

// SetUserKeys answers PUT credapi.UsersRoute NAME/keys with set (the
// namespace's SetUserKeys), its JSON body of at most
// state.MaxRequestBytes.
func SetUserKeys(w http.ResponseWriter, r *http.Request, set func(name, access, secret string) (*metaapi.User, error)) (*metaapi.User, int, error) {
	var req credapi.SetKeys
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, state.MaxRequestBytes))
	if err := dec.Decode(&req); err != nil {
		return nil, 0, fmt.Errorf("%w: bad JSON body: %v", metaapi.ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, 0, fmt.Errorf("%w: bad JSON body: data after the value", metaapi.ErrInvalid)
	}
	u, err := set(r.PathValue("name"), req.AccessKey, req.SecretKey)
	return u, http.StatusOK, err
}

// MemberStatus is Status after rereading the keyring file (a key the
// operator just copied in), with the HTTP status of the answer.
func MemberStatus(k *kek.Keyring, member uint64) (credapi.KEKStatus, int, error) {
	if err := k.Reload(); err != nil {
		return credapi.KEKStatus{}, 0, fmt.Errorf("%w: reread the keyring: %v", metaapi.ErrUnavailable, err)
	}
	return Status(k, member), http.StatusOK, nil
}

// Rotate re-seals every sealed record (each resealer a kind of them)
// under the leader's current key, its keyring file reread first, once
// every other member of the group (group: this member's view) answers
// that it holds that key; with the HTTP status of the answer. st refuses
// a member that does not lead (NOT_LEADER).
func Rotate(ctx context.Context, st *state.State, group metaapi.MetaStatus, resealers []func() (int, error)) (*credapi.KEKRotation, int, error) {
	rot, err := rotate(ctx, st, group.ID, group.Members, resealers)
	return rot, http.StatusOK, err
}

func rotate(ctx context.Context, st *state.State, self uint64, members []metaapi.MetaMember, resealers []func() (int, error)) (*credapi.KEKRotation, error) {
	if _, err := state.Read(st, func() (struct{}, error) { return struct{}{}, nil }); err != nil {
		return nil, err
	}
	k := st.Cfg.KEK
	if err := k.Reload(); err != nil {
		return nil, fmt.Errorf("%w: reread the keyring: %v", metaapi.ErrUnavailable, err)
	}
	own := Status(k, self)
	rot := &credapi.KEKRotation{KeyID: own.Current, Members: []credapi.KEKStatus{own}}
	var missing []string
	for _, m := range members {
		if m.ID == self {
			continue
		}
		ps, err := peerStatus(ctx, st, m)
		if err == nil && !slices.Contains(ps.Keys, own.Current) {
			err = fmt.Errorf("its keyring (%s) lacks key %s", ps.Source, own.Current)
		}
		if err != nil {
			missing = append(missing, fmt.Sprintf("member %d (%s): %v", m.ID, m.Addr, err))
			continue
		}
		rot.Members = append(rot.Members, ps)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: nothing re-sealed: every member must hold key %s first (copy the keyring to it): %s",
			metaapi.ErrInvalid, own.Current, strings.Join(missing, "; "))
	}
	for _, reseal := range resealers {
		n, err := reseal()
		rot.Resealed += n
		if err != nil {
			return nil, err
		}
	}
	st.Log.Info("key encryption key rotated", "key_id", rot.KeyID, "resealed", rot.Resealed, "members", len(rot.Members))
	return rot, nil
}

// peerStatus asks member m for its keyring, with this member's TLS.
func peerStatus(ctx context.Context, st *state.State, m metaapi.MetaMember) (credapi.KEKStatus, error) {
	tr := st.Cfg.TLS.HTTPTransport(&http.Transport{Proxy: nil})
	defer tr.CloseIdleConnections()
	mc, err := metaapi.NewClient(m.Addr, metaapi.ClientOptions{TLS: st.Cfg.TLS, HTTPClient: &http.Client{Transport: tr},
		Timeout: peerTimeout, Attempts: 2})
	if err != nil {
		return credapi.KEKStatus{}, err
	}
	return credapi.GetKEKStatus(ctx, mc)
}
