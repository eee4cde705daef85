package meta

import (
	"net/http"

	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
)

// routeS3Conf adds the routes of the S3 gateway's object tags and bucket
// configuration documents (metaapi/s3meta) to the mux.
func (s *Service) routeS3Conf(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("PUT /v1/s3/buckets/{bucket}/conf/{name}", "put_bucket_conf", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req s3meta.BucketConf
		if err := decodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		return nil, http.StatusNoContent, s.PutBucketConf(r.PathValue("bucket"), r.PathValue("name"), req.Doc)
	})
	route("GET /v1/s3/buckets/{bucket}/conf/{name}", "get_bucket_conf", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		doc, err := s.GetBucketConf(r.PathValue("bucket"), r.PathValue("name"))
		return s3meta.BucketConf{Doc: doc}, http.StatusOK, err
	})
	route("DELETE /v1/s3/buckets/{bucket}/conf/{name}", "delete_bucket_conf", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		return nil, http.StatusNoContent, s.PutBucketConf(r.PathValue("bucket"), r.PathValue("name"), nil)
	})
	route("PUT /v1/s3/tagging", "put_object_tagging", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req s3meta.ObjectTagging
		if err := decodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		return nil, http.StatusNoContent, s.PutObjectTagging(&req)
	})
}
