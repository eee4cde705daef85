package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/authz"
)

// CookieName is the session cookie's name.
const CookieName = "spindle_console"

// maxSessions bounds the sessions kept (the oldest go first).
const maxSessions = 10_000

// session is a signed-in user.
type session struct {
	id      string
	csrf    string
	user    string // the meta calls' user: an access key or authz.S3Root
	name    string // shown: the S3 user's name, or "admin"
	admin   bool
	expires time.Time
}

// sessions are the signed-in users, by session ID.
type sessions struct {
	ttl time.Duration
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*session
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{ttl: ttl, now: now, m: map[string]*session{}}
}

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("console: no randomness: " + err.Error()) // crypto/rand never fails on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// add starts a session.
func (s *sessions) add(user, name string, admin bool) *session {
	ss := &session{id: randomToken(), csrf: randomToken(), user: user, name: name, admin: admin, expires: s.now().Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for id, o := range s.m {
		if now.After(o.expires) {
			delete(s.m, id)
		}
	}
	for len(s.m) >= maxSessions {
		var oldest *session
		for _, o := range s.m {
			if oldest == nil || o.expires.Before(oldest.expires) {
				oldest = o
			}
		}
		delete(s.m, oldest.id)
	}
	s.m[ss.id] = ss
	return ss
}

// get is the live session of id (nil: none).
func (s *sessions) get(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[id]
	if ss != nil && s.now().After(ss.expires) {
		delete(s.m, id)
		return nil
	}
	return ss
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// errBadCredentials: the access key is unknown or the secret wrong (the
// page does not say which).
var errBadCredentials = errors.New("wrong access key or secret")

// verify checks an access key and secret: the admin credential, or an S3
// user of the meta service. It returns the session's user and name.
func (c *Console) verify(ctx context.Context, access, secret string) (user, name string, admin bool, err error) {
	if access == "" || secret == "" {
		return "", "", false, errBadCredentials
	}
	a := c.cfg.Admin
	if a.AccessKey != "" && a.SecretKey != "" && subtle.ConstantTimeCompare([]byte(access), []byte(a.AccessKey)) == 1 {
		if subtle.ConstantTimeCompare([]byte(secret), []byte(a.SecretKey)) == 1 {
			return authz.S3Root, "admin", true, nil
		}
		return "", "", false, errBadCredentials
	}
	u, err := c.cfg.Store.LookupUser(ctx, access)
	switch {
	case errors.Is(err, metaapi.ErrNotFound), errors.Is(err, metaapi.ErrInvalid):
		return "", "", false, errBadCredentials
	case err != nil:
		return "", "", false, err
	}
	if u.SecretKey == "" || subtle.ConstantTimeCompare([]byte(secret), []byte(u.SecretKey)) != 1 {
		return "", "", false, errBadCredentials
	}
	return access, u.Name, false, nil
}

// sessionOf is r's session (nil: none).
func (c *Console) sessionOf(r *http.Request) *session {
	ck, err := r.Cookie(CookieName)
	if err != nil || ck.Value == "" {
		return nil
	}
	return c.sessions.get(ck.Value)
}

// setCookie sends the session cookie (value "" and maxAge -1: cleared).
func setCookie(w http.ResponseWriter, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: value, Path: "/ui/", MaxAge: maxAge,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

// sameOrigin says a change request comes from the console's own pages:
// Sec-Fetch-Site (when sent) is same-origin, and Origin (when sent)
// names this host over https.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Scheme != "https" || u.Host != r.Host {
			return false
		}
	}
	return true
}

// checkCSRF refuses a change without the session's token (the form field
// "csrf" or the header X-CSRF-Token) or from another origin.
func checkCSRF(r *http.Request, ss *session, token string) bool {
	if token == "" {
		token = r.Header.Get("X-CSRF-Token")
	}
	return sameOrigin(r) && token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(ss.csrf)) == 1
}

// handleLogin serves GET (the form) and POST (sign-in) /ui/login.
func (c *Console) handleLogin(w http.ResponseWriter, r *http.Request) {
	next := r.FormValue("next")
	if u, err := url.Parse(next); err != nil || next == "" || u.IsAbs() || u.Host != "" || len(next) < 4 || next[:4] != "/ui/" {
		next = "/ui/"
	}
	if r.Method != http.MethodPost {
		c.render(w, r, nil, "login", http.StatusOK, map[string]any{"Next": next})
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "cross-origin sign-in refused", http.StatusForbidden)
		return
	}
	user, name, admin, err := c.verify(r.Context(), r.PostFormValue("access_key"), r.PostFormValue("secret_key"))
	if err != nil {
		status := http.StatusUnauthorized
		msg := errBadCredentials.Error()
		if !errors.Is(err, errBadCredentials) {
			status, msg = http.StatusServiceUnavailable, "the meta service did not answer: "+err.Error()
		}
		c.cfg.Logger.Info("console sign-in refused", "access_key", r.PostFormValue("access_key"), "remote", r.RemoteAddr, "err", err)
		c.render(w, r, nil, "login", status, map[string]any{"Next": next, "Error": msg})
		return
	}
	ss := c.sessions.add(user, name, admin)
	c.cfg.Logger.Info("console sign-in", "user", name, "admin", admin, "remote", r.RemoteAddr)
	setCookie(w, ss.id, int(c.cfg.SessionTTL/time.Second))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// handleLogout ends the session (POST with its CSRF token).
func (c *Console) handleLogout(w http.ResponseWriter, r *http.Request, ss *session) {
	c.sessions.remove(ss.id)
	setCookie(w, "", -1)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// authed wraps a page: no session → the sign-in page; a POST without
// the CSRF token → 403 (a multipart upload checks its own token, which
// comes in the body: change is false for it here).
func (c *Console) authed(change bool, h func(w http.ResponseWriter, r *http.Request, ss *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss := c.sessionOf(r)
		if ss == nil {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				http.Error(w, "not signed in", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if change && !checkCSRF(r, ss, r.PostFormValue("csrf")) {
			http.Error(w, "refused: missing or wrong CSRF token, or another origin", http.StatusForbidden)
			return
		}
		h(w, r, ss)
	}
}
