package meta

import (
	"net/http"

	"github.com/spindle-store/spindle/internal/meta/httpio"
	"github.com/spindle-store/spindle/internal/metaapi"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// routeS3 adds the S3 gateway's routes (metaapi/s3.go) to the mux.
func (s *Service) routeS3(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("POST /v1/users", "create_user", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.CreateUser
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		u, err := s.CreateUser(&req)
		return u, http.StatusCreated, err
	})
	route("GET /v1/users", "list_users", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		l, err := s.Users()
		return l, http.StatusOK, err
	})
	route("DELETE /v1/users/{name}", "delete_user", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		return nil, http.StatusNoContent, s.DeleteUser(r.PathValue("name"))
	})
	route("GET /v1/users/by-access/{access}", "user_by_access", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		u, err := s.UserByAccessKey(r.PathValue("access"))
		return u, http.StatusOK, err
	})
	route("POST /v1/s3/buckets/{bucket}", "create_s3_bucket", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req s3permapi.CreateBucket
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		b, err := s.CreateS3Bucket(r.PathValue("bucket"), &req)
		return b, http.StatusCreated, err
	})
	route("GET /v1/s3/buckets/{bucket}", "get_bucket", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		b, err := s.GetBucket(r.PathValue("bucket"))
		return b, http.StatusOK, err
	})
	route("PUT /v1/s3/buckets/{bucket}/acl", "put_bucket_acl", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.BucketACL
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "put_bucket_acl", api.Admin, r.PathValue("bucket"), ""); err != nil {
			return nil, 0, err
		}
		err := s.PutBucketACL(r.PathValue("bucket"), req.ACL)
		s.gate.Record(s.gate.Who(r), "put_bucket_acl", r.PathValue("bucket"), "", err)
		return nil, http.StatusNoContent, err
	})
	s.routeS3Perms(route)
	route("POST /v1/uploads/create", "create_upload", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.CreateUpload
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "create_upload", api.Write, req.Bucket, req.Key); err != nil {
			return nil, 0, err
		}
		u, err := s.CreateUpload(&req)
		return u, http.StatusOK, err
	})
	route("POST /v1/uploads/part", "commit_part", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.CommitPart
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "commit_part", api.Write, req.Bucket, req.Key); err != nil {
			return nil, 0, err
		}
		p, err := s.CommitPart(&req)
		return p, http.StatusOK, err
	})
	route("POST /v1/uploads/complete", "complete_upload", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.CompleteUpload
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		id := s.gate.Who(r)
		check, d := s.gate.CommitCheck(id) // write, and delete for an overwrite: inside the completion's mutation
		ki, err := s.CompleteUploadAs(&req, check)
		s.gate.Flush(d)
		s.gate.Record(id, "complete_upload", req.Bucket, req.Key, err)
		return ki, http.StatusOK, err
	})
	route("POST /v1/uploads/abort", "abort_upload", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.UploadRef
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "abort_upload", api.Write, req.Bucket, req.Key); err != nil {
			return nil, 0, err
		}
		return nil, http.StatusNoContent, s.AbortUpload(req)
	})
	route("POST /v1/uploads/get", "get_upload", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.UploadRef
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "get_upload", api.Write, req.Bucket, req.Key); err != nil {
			return nil, 0, err
		}
		u, err := s.GetUpload(req)
		return u, http.StatusOK, err
	})
	route("POST /v1/uploads/parts", "list_parts", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.ListParts
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "list_parts", api.Write, req.Bucket, req.Key); err != nil {
			return nil, 0, err
		}
		l, err := s.ListParts(&req)
		return l, http.StatusOK, err
	})
	route("POST /v1/uploads/list", "list_uploads", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.ListUploads
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "list_uploads", api.Read, req.Bucket, req.Prefix); err != nil {
			return nil, 0, err
		}
		l, err := s.ListUploads(&req)
		return l, http.StatusOK, err
	})
}
