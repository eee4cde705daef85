package meta

import (
	"net/http"

	"github.com/spindle-store/spindle/internal/meta/httpio"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
)

// routeS3Conf adds the routes of the S3 gateway's object tags and bucket
// configuration documents (metaapi/s3meta) to the mux. Changing a
// bucket's document takes the admin right on it (as its ACL does),
// tagging a key the write right on the key; both are audited.
func (s *Service) routeS3Conf(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	putConf := func(name string, r *http.Request, doc []byte) error {
		bucket := r.PathValue("bucket")
		if err := s.gate.Authorize(r, name, api.Admin, bucket, ""); err != nil {
			return err
		}
		err := s.PutBucketConf(bucket, r.PathValue("name"), doc)
		s.gate.Record(s.gate.Who(r), name, bucket, "", err, r.PathValue("name"))
		return err
	}
	route("PUT /v1/s3/buckets/{bucket}/conf/{name}", "put_bucket_conf", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req s3meta.BucketConf
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		return nil, http.StatusNoContent, putConf("put_bucket_conf", r, req.Doc)
	})
	route("GET /v1/s3/buckets/{bucket}/conf/{name}", "get_bucket_conf", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		doc, err := s.GetBucketConf(r.PathValue("bucket"), r.PathValue("name"))
		return s3meta.BucketConf{Doc: doc}, http.StatusOK, err
	})
	route("DELETE /v1/s3/buckets/{bucket}/conf/{name}", "delete_bucket_conf", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		return nil, http.StatusNoContent, putConf("delete_bucket_conf", r, nil)
	})
	route("PUT /v1/s3/tagging", "put_object_tagging", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req s3meta.ObjectTagging
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		if err := s.gate.Authorize(r, "put_object_tagging", api.Write, req.Bucket, req.Key); err != nil {
			return nil, 0, err
		}
		err := s.PutObjectTagging(&req)
		s.gate.Record(s.gate.Who(r), "put_object_tagging", req.Bucket, req.Key, err)
		return nil, http.StatusNoContent, err
	})
}
