package meta

import (
	"net/http"

	"github.com/spindle-store/spindle/internal/credapi"
	"github.com/spindle-store/spindle/internal/meta/creds"
)

// routeCreds adds the credential routes (credapi, meta/creds); the rotation's list holds
// every kind of record sealed with the KEK (S3 users; a token-signing key adds its own).
func (s *Service) routeCreds(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("PUT "+credapi.UsersRoute+"{name}/keys", "set_user_keys", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		return creds.SetUserKeys(w, r, s.SetUserKeys)
	})
	route("GET "+credapi.KEKRoute, "kek_status", func(http.ResponseWriter, *http.Request) (any, int, error) {
		return creds.MemberStatus(s.Cfg.KEK, s.MetaStatus().ID)
	})
	route("POST "+credapi.KEKRoute+"/rotate", "kek_rotate", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		return creds.Rotate(r.Context(), s.State, s.MetaStatus(), []func() (int, error){s.ResealUsers})
	})
}
