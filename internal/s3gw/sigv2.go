package s3gw

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/gofiber/fiber/v3"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3api/utils"
	"github.com/versity/versitygw/s3err"
)

// Presigned URLs of AWS Signature Version 2 (what `aws s3 presign` of
// aws-cli v1 writes: ?AWSAccessKeyId=&Expires=&Signature=). versitygw
// verifies Signature V4 only; this middleware, mounted before its routes,
// verifies a V2 presigned request (HMAC-SHA1 of S3's V2 string to sign,
// with the user's secret; not expired) and replaces its query by a V4
// presigned query for the same user, method, path and remaining lifetime,
// which versitygw then verifies as usual. A request that fails the V2
// check is refused here (SignatureDoesNotMatch, AccessDenied for an expired
// URL, InvalidAccessKeyId). GET, HEAD and PUT (boto3's presigned
// put_object), path-style; a PUT's Content-Type and Content-MD5 are part of
// the V2 signature, its body is verified by versitygw as any V4 presigned
// PUT (UNSIGNED-PAYLOAD, Content-MD5 when sent).

// v2SubResources are the query parameters S3's V2 canonical resource
// includes.
var v2SubResources = []string{"acl", "cors", "delete", "lifecycle", "location", "logging", "notification",
	"partNumber", "policy", "requestPayment", "response-cache-control", "response-content-disposition",
	"response-content-encoding", "response-content-language", "response-content-type", "response-expires",
	"restore", "tagging", "torrent", "uploadId", "uploads", "versionId", "versioning", "versions", "website"}

// maxPresignSeconds bounds a presigned URL's remaining lifetime (S3's 7 days).
const maxPresignSeconds = 7 * 24 * 3600

type sigV2 struct {
	access, secret string // the root user
	iam            auth.IAMService
	region         string
	now            func() time.Time
}

// handle is the middleware: V2 presigned requests are checked and
// re-signed, others pass; a refusal is answered here as an S3 error.
func (s *sigV2) handle(ctx fiber.Ctx) error {
	args := ctx.Request().URI().QueryArgs()
	access, sig, exp := string(args.Peek("AWSAccessKeyId")), string(args.Peek("Signature")), string(args.Peek("Expires"))
	if access == "" || sig == "" || exp == "" {
		return ctx.Next()
	}
	if err := s.resign(ctx, access, sig, exp); err != nil {
		var se s3err.S3Error
		if !errors.As(err, &se) {
			se = s3err.GetAPIError(s3err.ErrInternalError)
		}
		requestID, hostID := utils.EnsureRequestIDs(ctx)
		ctx.Response().Header.SetContentType(fiber.MIMEApplicationXML)
		return ctx.Status(se.StatusCode()).Send(se.XMLBody(requestID, hostID))
	}
	return ctx.Next()
}

// resign verifies a V2 presigned request and rewrites its query as V4.
func (s *sigV2) resign(ctx fiber.Ctx, access, sig, exp string) error {
	method := ctx.Method()
	if method != http.MethodGet && method != http.MethodHead && method != http.MethodPut {
		return s3err.GetAPIError(s3err.ErrUnsupportedAuthorizationMechanism)
	}
	expires, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return s3err.GetAPIError(s3err.ErrInvalidRequest)
	}
	left := expires - s.now().Unix()
	if left <= 0 {
		return s3err.GetAPIError(s3err.ErrExpiredPresignRequest)
	}
	secret := s.secret
	if access != s.access {
		acct, err := s.iam.GetUserAccount(access)
		if err != nil {
			return s3err.GetInvalidAccessKeyIdErr(access)
		}
		secret = acct.Secret
	}
	rawPath := string(ctx.Request().URI().PathOriginal())
	if i := strings.IndexByte(rawPath, '?'); i >= 0 {
		rawPath = rawPath[:i]
	}
	q, err := url.ParseQuery(string(ctx.Request().URI().QueryString()))
	if err != nil {
		return s3err.GetAPIError(s3err.ErrInvalidRequest)
	}
	var amz []string
	for k, v := range ctx.Request().Header.All() {
		if name := strings.ToLower(string(k)); strings.HasPrefix(name, "x-amz-") {
			amz = append(amz, name+":"+strings.TrimSpace(string(v)))
		}
	}
	slices.Sort(amz)
	resource := rawPath
	var subs []string
	for _, k := range v2SubResources {
		if vs, ok := q[k]; ok {
			if vs[0] == "" {
				subs = append(subs, k)
			} else {
				subs = append(subs, k+"="+vs[0])
			}
		}
	}
	if len(subs) > 0 {
		resource += "?" + strings.Join(subs, "&")
	}
	var b strings.Builder
	b.WriteString(method + "\n" + ctx.Get("Content-Md5") + "\n" + ctx.Get("Content-Type") + "\n" + exp + "\n")
	for _, h := range amz {
		b.WriteString(h + "\n")
	}
	b.WriteString(resource)
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write([]byte(b.String()))
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) != 1 {
		return s3err.GetAPIError(s3err.ErrSignatureDoesNotMatch)
	}

	// Re-sign as V4 for versitygw: same method, path and other parameters.
	q.Del("AWSAccessKeyId")
	q.Del("Signature")
	q.Del("Expires")
	q.Set("X-Amz-Expires", strconv.FormatInt(min(left, maxPresignSeconds), 10))
	host := string(ctx.Request().Host())
	u := &url.URL{Scheme: "http", Host: host, RawPath: rawPath, RawQuery: q.Encode()}
	if u.Path, err = url.PathUnescape(rawPath); err != nil {
		return s3err.GetAPIError(s3err.ErrInvalidRequest)
	}
	req := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{}}
	signed, _, err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).PresignHTTP(
		context.Background(), aws.Credentials{AccessKeyID: access, SecretAccessKey: secret}, req,
		"UNSIGNED-PAYLOAD", "s3", s.region, s.now())
	if err != nil {
		return err
	}
	su, err := url.Parse(signed)
	if err != nil {
		return err
	}
	ctx.Request().SetRequestURI(rawPath + "?" + su.RawQuery)
	return nil
}
