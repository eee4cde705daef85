package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/spindle-store/spindle/internal/httpdirect"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// MetaStore is the Store of a meta service: a meta client with the S3
// gateway's certificate (role s3, which may look users up and name the
// user a call acts for), every call naming its user
// (authz.UserContext), and a key client over it for the data.
type MetaStore struct {
	mc *metaapi.Client
	kc *keyclient.Client
}

// NewMetaStore is the Store of the meta service at addr (every member's,
// comma-separated), reached with sec (the s3 role's pair; nil: plaintext).
func NewMetaStore(addr string, sec *tlsconf.Settings, log *slog.Logger) (*MetaStore, error) {
	base := httpdirect.ForMeta(sec)
	// No batching: a batch would carry one user's header for several.
	mc, err := metaapi.NewClient(addr, metaapi.ClientOptions{TLS: sec, NoBatching: true,
		HTTPClient: &http.Client{Transport: &authz.Transport{Base: base}}})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	kc, err := keyclient.New(mc, keyclient.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return &MetaStore{mc: mc, kc: kc}, nil
}

// Close releases the key client.
func (s *MetaStore) Close() error { return s.kc.Close() }

// LookupUser implements Store (the gateway's look-up by access key).
func (s *MetaStore) LookupUser(ctx context.Context, access string) (metaapi.User, error) {
	return s.mc.UserByAccessKey(ctx, access)
}

// Buckets implements Store.
func (s *MetaStore) Buckets(ctx context.Context, user string) ([]metaapi.Bucket, error) {
	l, err := s.mc.ListBuckets(authz.UserContext(ctx, user))
	return l.Buckets, err
}

// List implements Store.
func (s *MetaStore) List(ctx context.Context, user, bucket string, o metaapi.ListOptions) (metaapi.KeyList, error) {
	return s.mc.List(authz.UserContext(ctx, user), bucket, o)
}

// Stat implements Store.
func (s *MetaStore) Stat(ctx context.Context, user, bucket, key string) (metaapi.KeyInfo, error) {
	return s.kc.Stat(authz.UserContext(ctx, user), bucket, key)
}

// Get implements Store.
func (s *MetaStore) Get(ctx context.Context, user, bucket, key string, w io.Writer) error {
	_, err := s.kc.Get(authz.UserContext(ctx, user), bucket, key, w, keyclient.GetOptions{})
	return err
}

// Put implements Store.
func (s *MetaStore) Put(ctx context.Context, user, bucket, key string, r io.Reader, size int64) (metaapi.KeyInfo, error) {
	res, err := s.kc.Put(authz.UserContext(ctx, user), bucket, key, r, keyclient.PutOptions{SizeHintBytes: size})
	return res.Key, err
}

// Delete implements Store.
func (s *MetaStore) Delete(ctx context.Context, user, bucket, key string) error {
	return s.kc.Delete(authz.UserContext(ctx, user), bucket, key)
}
