package s3gw

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// iamTimeout bounds one call of the IAM service to the meta service.
const iamTimeout = 10 * time.Second

// The identity cache (issue 33 item 6).
const (
	// IdentityFresh: an entry younger is served without asking the meta
	// service. The refresher renews entries older than IdentityRefresh
	// every IdentityRefresh, so that a change (a deleted user, a changed
	// secret) applies within IdentityFresh and one refresh.
	IdentityFresh   = 2 * time.Second
	IdentityRefresh = time.Second
	// IdentityStale: while the meta service does not answer (a leader
	// change), an entry is served up to this old.
	IdentityStale = 60 * time.Second
	// identityIdle: an entry unused this long is dropped; identityMax
	// bounds the entries (beyond: users are asked for, not cached).
	identityIdle = 10 * time.Minute
	identityMax  = 100_000
	// identityWorkers bounds the refresher's calls in flight.
	identityWorkers = 8
)

// IAM is versitygw's auth.IAMService over the meta service's S3 users,
// with an identity cache: a user's account is kept after its first lookup
// and renewed in the background (IdentityRefresh) while it is used; an
// entry is served while younger than IdentityFresh, and, while the meta
// service does not answer (its renewal failing or in flight), up to
// IdentityStale old, so that known users keep working through a meta
// leader change. A user the meta service no longer knows is dropped at
// its renewal. Users are auth.RoleUserPlus (they may create buckets,
// which they then own; nothing else beyond their ACLs); the root user is
// versitygw's (Config.AccessKey) and never asked for.
//
// Concurrency: safe for concurrent use; one refresher goroutine, started
// with the first entry, stopped by Shutdown.
type IAM struct {
	meta  *metaapi.Client
	perms *PermCache
	now   func() time.Time
	// lookup asks the meta service (tests stub it).
	lookup func(ctx context.Context, access string) (metaapi.User, error)

	mu      sync.Mutex
	entries map[string]*identity
	running bool
	stop    chan struct{}
	done    chan struct{}
}

// identity is a cached account, under IAM.mu.
type identity struct {
	acct       auth.Account
	fetched    time.Time // the meta service's last answer
	used       time.Time
	failing    bool // the last renewal found the meta service unavailable
	refreshing bool
}

var _ auth.IAMService = (*IAM)(nil)

// NewIAM returns the IAM service of the meta service behind mc; it reads
// bucket permissions through pc (iam_policy.go).
func NewIAM(mc *metaapi.Client, pc *PermCache) *IAM {
	return &IAM{meta: mc, perms: pc, now: time.Now, lookup: mc.UserByAccessKey, entries: map[string]*identity{},
		stop: make(chan struct{}), done: make(chan struct{})}
}

func iamCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), iamTimeout)
}

// CreateAccount creates a user named after its access key.
func (m *IAM) CreateAccount(a auth.Account) error {
	ctx, cancel := iamCtx()
	defer cancel()
	_, err := m.meta.CreateUser(ctx, metaapi.CreateUser{Name: a.Access, AccessKey: a.Access, SecretKey: a.Secret})
	if errors.Is(err, metaapi.ErrExists) {
		return auth.ErrUserExists
	}
	return err
}

// definite says err is the meta service's answer that the user does not
// exist (as opposed to the meta service not answering).
func definite(err error) bool {
	return errors.Is(err, metaapi.ErrNotFound) || errors.Is(err, metaapi.ErrInvalid)
}

// GetUserAccount returns the user of an access key (auth.ErrNoSuchUser
// when none), from the cache when it may (IAM's comment).
func (m *IAM) GetUserAccount(access string) (auth.Account, error) {
	now := m.now()
	m.mu.Lock()
	e := m.entries[access]
	if e != nil {
		e.used = now
		age := now.Sub(e.fetched)
		if age < IdentityFresh || (age < IdentityStale && (e.failing || e.refreshing)) {
			a := e.acct
			m.mu.Unlock()
			return a, nil
		}
	}
	m.mu.Unlock()
	ctx, cancel := iamCtx()
	defer cancel()
	u, err := m.lookup(ctx, access)
	if definite(err) {
		m.forget(access)
		return auth.Account{}, auth.ErrNoSuchUser
	}
	if err != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		if e := m.entries[access]; e != nil && m.now().Sub(e.fetched) < IdentityStale {
			e.failing = true
			return e.acct, nil
		}
		return auth.Account{}, fmt.Errorf("s3gw: user lookup: %w", err)
	}
	a := auth.Account{Access: u.AccessKey, Secret: u.SecretKey, Role: auth.RoleUserPlus}
	m.remember(access, a, now)
	return a, nil
}

// remember caches a (answered by the meta service at t) and starts the
// refresher with the first entry.
func (m *IAM) remember(access string, a auth.Account, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[access]
	if e == nil {
		if len(m.entries) >= identityMax {
			return
		}
		e = &identity{used: t}
		m.entries[access] = e
	}
	e.acct, e.fetched, e.failing = a, t, false
	if !m.running {
		select {
		case <-m.stop: // shut down: no refresher (entries expire)
		default:
			m.running = true
			go m.refresher()
		}
	}
}

func (m *IAM) forget(access string) {
	m.mu.Lock()
	delete(m.entries, access)
	m.mu.Unlock()
}

// refresher renews, every IdentityRefresh, the entries older than that
// and drops the idle ones, until Shutdown.
func (m *IAM) refresher() {
	defer close(m.done)
	t := time.NewTicker(IdentityRefresh)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.refreshOnce()
		}
	}
}

// refreshOnce renews the entries due (identityWorkers at a time) and
// returns once all are answered or have failed.
func (m *IAM) refreshOnce() {
	now := m.now()
	var due []string
	m.mu.Lock()
	for access, e := range m.entries {
		switch {
		case now.Sub(e.used) > identityIdle:
			delete(m.entries, access)
		case !e.refreshing && now.Sub(e.fetched) >= IdentityRefresh:
			e.refreshing = true
			due = append(due, access)
		}
	}
	m.mu.Unlock()
	sem := make(chan struct{}, identityWorkers)
	var wg sync.WaitGroup
	for _, access := range due {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.renew(access)
		}()
	}
	wg.Wait()
}

// renew asks the meta service for one entry.
func (m *IAM) renew(access string) {
	ctx, cancel := iamCtx()
	defer cancel()
	u, err := m.lookup(ctx, access)
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[access]
	if e == nil {
		return
	}
	e.refreshing = false
	switch {
	case definite(err):
		delete(m.entries, access)
	case err != nil:
		e.failing = true
	default:
		e.acct, e.fetched, e.failing = auth.Account{Access: u.AccessKey, Secret: u.SecretKey, Role: auth.RoleUserPlus}, now, false
	}
}

// ResolveAccounts returns the access keys that belong to no user.
func (m *IAM) ResolveAccounts(ids []string) ([]string, error) {
	var missing []string
	for _, id := range ids {
		if _, err := m.GetUserAccount(id); err != nil {
			if errors.Is(err, auth.ErrNoSuchUser) {
				missing = append(missing, id)
				continue
			}
			return nil, err
		}
	}
	return missing, nil
}

// UpdateUserAccount is not supported (users are managed with spindle admin user).
func (m *IAM) UpdateUserAccount(string, auth.MutableProps) error {
	return s3err.GetAPIError(s3err.ErrAdminMethodNotSupported)
}

// DeleteUserAccount deletes the user of an access key (forgotten here at
// once).
func (m *IAM) DeleteUserAccount(access string) error {
	ctx, cancel := iamCtx()
	defer cancel()
	users, err := m.meta.Users(ctx)
	if err != nil {
		return err
	}
	for _, u := range users {
		if u.AccessKey == access {
			m.forget(access)
			return m.meta.DeleteUser(ctx, u.Name)
		}
	}
	return auth.ErrNoSuchUser
}

// ListUserAccounts lists the users, without secrets.
func (m *IAM) ListUserAccounts() ([]auth.Account, error) {
	ctx, cancel := iamCtx()
	defer cancel()
	users, err := m.meta.Users(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]auth.Account, 0, len(users))
	for _, u := range users {
		out = append(out, auth.Account{Access: u.AccessKey, Role: auth.RoleUserPlus})
	}
	return out, nil
}

// Shutdown stops the refresher (idempotent).
func (m *IAM) Shutdown() error {
	m.mu.Lock()
	select {
	case <-m.stop:
		m.mu.Unlock()
		return nil
	default:
	}
	close(m.stop)
	running := m.running
	m.mu.Unlock()
	if running {
		<-m.done
	}
	return nil
}
