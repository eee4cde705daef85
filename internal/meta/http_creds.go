package meta

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/credapi"
	"github.com/spindle-store/spindle/internal/kek"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// kekPeerTimeout bounds the rotation's question to each member.
const kekPeerTimeout = 5 * time.Second

// routeCreds adds the credential routes (package credapi): a user's keys
// set, the keyring's status (every member answers, leader or not) and its
// rotation.
func (s *Service) routeCreds(mux *http.ServeMux, route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("PUT "+credapi.UsersRoute+"{name}/keys", "set_user_keys", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req credapi.SetKeys
		if err := decodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		u, err := s.SetUserKeys(r.PathValue("name"), req.AccessKey, req.SecretKey)
		return u, http.StatusOK, err
	})
	mux.Handle("GET "+credapi.KEKRoute, s.guard("kek_status", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The file as it is now (a key the operator just copied in).
		if err := s.Cfg.KEK.Reload(); err != nil {
			metaapi.WriteError(w, http.StatusServiceUnavailable, metaapi.CodeUnavailable, "reread the keyring: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, s.KEKStatus())
	})))
	route("POST "+credapi.KEKRoute+"/rotate", "kek_rotate", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		rot, err := s.RotateKEK(r.Context())
		return rot, http.StatusOK, err
	})
}

// KEKStatus is this member's keyring (IDs only).
func (s *Service) KEKStatus() credapi.KEKStatus {
	k := s.Cfg.KEK
	src := k.Path()
	if src == "" {
		src = kek.EnvVar
	}
	return credapi.KEKStatus{Member: s.MetaStatus().ID, Current: k.Current(), Keys: k.IDs(), Source: src}
}

// RotateKEK re-seals every secret under the leader's current key (its
// keyring file reread first) once every member of the group answers that
// it holds that key: a member without it could not open the secrets once
// leader.
func (s *Service) RotateKEK(ctx context.Context) (*credapi.KEKRotation, error) {
	// Only the leader rotates (a follower answers NOT_LEADER here).
	if _, err := state.Read(s.State, func() (struct{}, error) { return struct{}{}, nil }); err != nil {
		return nil, err
	}
	if err := s.Cfg.KEK.Reload(); err != nil {
		return nil, fmt.Errorf("%w: reread the keyring: %v", metaapi.ErrUnavailable, err)
	}
	self := s.KEKStatus()
	rot := &credapi.KEKRotation{KeyID: self.Current, Members: []credapi.KEKStatus{self}}
	var missing []string
	for _, m := range s.MetaStatus().Members {
		if m.ID == self.Member {
			continue
		}
		st, err := s.peerKEK(ctx, m)
		if err == nil && !slices.Contains(st.Keys, self.Current) {
			err = fmt.Errorf("its keyring (%s) lacks key %s", st.Source, self.Current)
		}
		if err != nil {
			missing = append(missing, fmt.Sprintf("member %d (%s): %v", m.ID, m.Addr, err))
			continue
		}
		rot.Members = append(rot.Members, st)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: nothing re-sealed: every member must hold key %s first (copy the keyring to it): %s",
			metaapi.ErrInvalid, self.Current, strings.Join(missing, "; "))
	}
	for _, reseal := range s.resealers() {
		n, err := reseal()
		rot.Resealed += n
		if err != nil {
			return nil, err
		}
	}
	s.Log.Info("key encryption key rotated", "key_id", rot.KeyID, "resealed", rot.Resealed, "members", len(rot.Members))
	return rot, nil
}

// resealers re-seal each kind of sealed record under the KEK's current
// key, returning how many they sealed anew: every kind of record that
// holds a secret sealed with s.Cfg.KEK (S3 users; a token-signing key)
// adds its own here, so that a rotation leaves nothing under an old key.
func (s *Service) resealers() []func() (int, error) {
	return []func() (int, error){s.ResealUsers}
}

// peerKEK asks member m for its keyring.
func (s *Service) peerKEK(ctx context.Context, m metaapi.MetaMember) (credapi.KEKStatus, error) {
	tr := s.Cfg.TLS.HTTPTransport(&http.Transport{Proxy: nil})
	defer tr.CloseIdleConnections()
	mc, err := metaapi.NewClient(m.Addr, metaapi.ClientOptions{TLS: s.Cfg.TLS, HTTPClient: &http.Client{Transport: tr},
		Timeout: kekPeerTimeout, Attempts: 2})
	if err != nil {
		return credapi.KEKStatus{}, err
	}
	return credapi.GetKEKStatus(ctx, mc)
}
