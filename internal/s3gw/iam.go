package s3gw

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3gw/idcache"
	"github.com/spindle-store/spindle/internal/s3perm"
)

// iamTimeout bounds one call of the IAM service to the meta service.
const iamTimeout = 10 * time.Second

// IAM is versitygw's auth.IAMService over the meta service's S3 users,
// looked up through the identity cache (package idcache: a deleted user or
// a changed secret applies within 3 s; known users are served through a
// meta leader change). Users are auth.RoleUserPlus (they may create
// buckets, which they then own; nothing else beyond their ACLs); the root
// user is versitygw's and never stored.
type IAM struct {
	meta  *metaapi.Client
	perms *PermCache
	ids   *idcache.Cache
}

var _ auth.IAMService = (*IAM)(nil)

// NewIAM returns the IAM service of the meta service behind mc; it reads
// bucket permissions through pc (iam_policy.go).
func NewIAM(mc *metaapi.Client, pc *PermCache) *IAM {
	return &IAM{meta: mc, perms: pc, ids: idcache.New(mc.UserByAccessKey)}
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

// GetUserAccount returns the user of an access key (auth.ErrNoSuchUser
// when none), through the identity cache.
func (m *IAM) GetUserAccount(access string) (auth.Account, error) {
	u, err := m.ids.Get(access)
	if errors.Is(err, idcache.ErrNoSuchUser) {
		return auth.Account{}, auth.ErrNoSuchUser
	}
	if err != nil {
		return auth.Account{}, err
	}
	return auth.Account{Access: u.AccessKey, Secret: u.SecretKey, Role: auth.RoleUserPlus}, nil
}

// ResolveAccounts returns the access keys that belong to no user.
func (m *IAM) ResolveAccounts(ids []string) ([]string, error) {
	var missing []string
	for _, id := range ids {
		if strings.Contains(id, "=") { // a grantee of PutBucketAcl's x-amz-grant-* headers (perms.go)
			g, err := s3perm.ParseGrantee(id, "")
			if err != nil || g.Type != s3perm.GranteeUser {
				if err != nil {
					missing = append(missing, id)
				}
				continue
			}
			id = g.ID
		}
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

// DeleteUserAccount deletes the user of an access key.
func (m *IAM) DeleteUserAccount(access string) error {
	ctx, cancel := iamCtx()
	defer cancel()
	users, err := m.meta.Users(ctx)
	if err != nil {
		return err
	}
	for _, u := range users {
		if u.AccessKey == access {
			m.ids.Forget(access)
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

// Shutdown stops the identity cache's refresher (idempotent).
func (m *IAM) Shutdown() error {
	m.ids.Close()
	return nil
}
