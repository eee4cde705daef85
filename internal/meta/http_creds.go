package meta

import (
	"net/http"

	"github.com/spindle-store/spindle/internal/credapi"
	"github.com/spindle-store/spindle/internal/meta/creds"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// routeCreds adds the credential routes (package credapi, meta/creds): a
// user's keys set, the keyring's status (every member answers, leader or
// not, its file reread first) and its rotation.
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
		if err := s.Cfg.KEK.Reload(); err != nil {
			metaapi.WriteError(w, http.StatusServiceUnavailable, metaapi.CodeUnavailable, "reread the keyring: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, creds.Status(s.Cfg.KEK, s.MetaStatus().ID))
	})))
	route("POST "+credapi.KEKRoute+"/rotate", "kek_rotate", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		st := s.MetaStatus()
		// Each kind of record sealed with the KEK adds its re-sealing
		// here (a token-signing key), so that a rotation leaves nothing
		// under an old key.
		rot, err := creds.Rotate(r.Context(), s.State, st.ID, st.Members, []func() (int, error){s.ResealUsers})
		return rot, http.StatusOK, err
	})
}
