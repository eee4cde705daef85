package meta

import (
	"net/http"

	"github.com/spindle-store/spindle/internal/meta/httpio"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// routeS3Perms adds the S3 permissions' routes (s3permapi) to the mux.
func (s *Service) routeS3Perms(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("GET /v1/s3/buckets/{bucket}/perms", "get_bucket_perms", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		b, err := s.BucketPerms(r.PathValue("bucket"))
		return b, http.StatusOK, err
	})
	route("PUT /v1/s3/buckets/{bucket}/perms", "put_bucket_perms", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req s3permapi.PutBucket
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		return nil, http.StatusNoContent, s.PutBucketPerms(r.PathValue("bucket"), &req)
	})
	route("PUT /v1/s3/object-acl", "put_object_acl", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req s3permapi.ObjectACL
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		return nil, http.StatusNoContent, s.PutObjectACL(&req)
	})
}
