package sigcompat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/mail"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/gofiber/fiber/v3"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3api/utils"
	"github.com/versity/versitygw/s3err"
)

// Bounds of the bodies of unknown length read before their request.
const (
	MaxChunkedBodyBytes   = 16 << 20
	ChunkedBodiesInFlight = 8
)

// emptySHA256 is the hash of the empty payload, hex.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

const amzDateFormat = "20060102T150405Z"

// Compat is the middleware (see the package comment).
type Compat struct {
	access, secret string // the root user
	iam            auth.IAMService
	region         string
	chunked        chan struct{} // a slot per body of unknown length being held
}

// New returns the middleware for the root user's keys, the IAM service of
// the other users and the gateway's region.
func New(access, secret string, iam auth.IAMService, region string) *Compat {
	return &Compat{access: access, secret: secret, iam: iam, region: region, chunked: make(chan struct{}, ChunkedBodiesInFlight)}
}

// Handle is the middleware: it calls next for a request it lets go on,
// and answers a refusal itself as an S3 error.
func (s *Compat) Handle(ctx fiber.Ctx, next func() error) error {
	release, err := s.readChunked(ctx)
	if err == nil {
		defer release()
		err = s.fixHeaderAuth(ctx)
	}
	if err != nil {
		return sendS3Error(ctx, err)
	}
	return next()
}

// sendS3Error answers err as versitygw does (InternalError for an error
// that is not an S3 one).
func sendS3Error(ctx fiber.Ctx, err error) error {
	var se s3err.S3Error
	if !errors.As(err, &se) {
		se = s3err.GetAPIError(s3err.ErrInternalError)
	}
	requestID, hostID := utils.EnsureRequestIDs(ctx)
	ctx.Response().Header.SetContentType(fiber.MIMEApplicationXML)
	return ctx.Status(se.StatusCode()).Send(se.XMLBody(requestID, hostID))
}

// readChunked reads the body of a request of unknown length (chunked, not
// aws-chunked) and hands it on with its length; release lets its slot go.
func (s *Compat) readChunked(ctx fiber.Ctx) (release func(), err error) {
	release = func() {}
	stream := ctx.Request().BodyStream()
	if ctx.Request().Header.ContentLength() != -1 || stream == nil || utils.IsStreamingPayload(ctx.Get("X-Amz-Content-Sha256")) {
		return release, nil
	}
	select {
	case s.chunked <- struct{}{}:
	default:
		return release, s3err.GetAPIError(s3err.ErrSlowDown)
	}
	release = func() { <-s.chunked }
	body, err := io.ReadAll(io.LimitReader(stream, MaxChunkedBodyBytes+1))
	if err != nil {
		return release, s3err.GetAPIError(s3err.ErrIncompleteBody)
	}
	if len(body) > MaxChunkedBodyBytes {
		return release, s3err.GetAPIError(s3err.ErrMissingContentLength)
	}
	ctx.Request().SetBodyStream(bytes.NewReader(body), len(body))
	return release, nil
}

// fixHeaderAuth verifies and re-signs a header-signed request with a Date
// and no X-Amz-Date, or without x-amz-content-sha256; others pass as they are.
func (s *Compat) fixHeaderAuth(ctx fiber.Ctx) error {
	authz := ctx.Get("Authorization")
	if !strings.HasPrefix(authz, "AWS4-HMAC-SHA256 ") {
		return nil
	}
	amzDate, hash := ctx.Get("X-Amz-Date"), ctx.Get("X-Amz-Content-Sha256")
	if amzDate != "" && hash != "" || utils.IsStreamingPayload(hash) {
		return nil // as is; a streaming upload's chunks are signed from its seed signature
	}
	tdate, ok := requestTime(ctx)
	if !ok {
		return nil // versitygw answers it
	}
	signedHash, newHash := hash, hash
	if hash == "" {
		signedHash, newHash = emptySHA256, emptySHA256
		if ctx.Request().Header.ContentLength() > 0 {
			newHash = "UNSIGNED-PAYLOAD"
		}
	}
	ad, secret, err := s.verify(ctx, tdate, signedHash)
	if err != nil {
		return err
	}
	return s.resign(ctx, ad, secret, tdate, newHash)
}

// requestTime is the request's X-Amz-Date, else its Date (HTTP or
// ISO 8601 basic format).
func requestTime(ctx fiber.Ctx) (time.Time, bool) {
	if v := ctx.Get("X-Amz-Date"); v != "" {
		t, err := time.Parse(amzDateFormat, v)
		return t, err == nil
	}
	v := ctx.Get("Date")
	if t, err := mail.ParseDate(v); err == nil { // RFC 1123 with GMT or a zone (botocore: -0000)
		return t.UTC(), true
	}
	t, err := time.Parse(amzDateFormat, v)
	return t, err == nil
}

// verify checks a header-signed SigV4 request's signature, made at tdate
// over payloadHash: versitygw's canonical request and checks, the user's
// key. It returns the parsed authorization and the user's secret.
func (s *Compat) verify(ctx fiber.Ctx, tdate time.Time, payloadHash string) (utils.AuthData, string, error) {
	ad, err := utils.ParseAuthorization(ctx.Get("Authorization"))
	if err != nil {
		return ad, "", err
	}
	if ad.Region != s.region {
		return ad, "", s3err.MalformedAuth.IncorrectRegion(s.region, ad.Region)
	}
	if err := utils.ValidateDate(tdate); err != nil {
		return ad, "", err
	}
	if tdate.Format("20060102") != ad.Date {
		return ad, "", s3err.MalformedAuth.DateMismatch()
	}
	root := auth.Account{Access: s.access, Secret: s.secret, Role: auth.RoleAdmin}
	key, acct, err := auth.ResolveDerivedKey(s.iam, root, ad.Access, "", ad.Date, ad.Region, "s3")
	if errors.Is(err, auth.ErrNoSuchUser) {
		return ad, "", s3err.GetInvalidAccessKeyIdErr(ad.Access)
	}
	if err != nil {
		return ad, "", err
	}
	// versitygw verifies after its DecodeURL has set the path unescaped
	// (its canonical request escapes it again): the same here.
	uri := ctx.Request().URI()
	raw := string(uri.PathOriginal())
	path, err := url.PathUnescape(raw)
	if err != nil {
		return ad, "", s3err.GetAPIError(s3err.ErrInvalidRequest)
	}
	uri.SetPath(path)
	_, err = utils.CheckValidSignature(ctx, ad, key, payloadHash, tdate, int64(max(ctx.Request().Header.ContentLength(), 0)))
	uri.SetPath(raw)
	return ad, acct.Secret, err
}

// escapePath is a path as SigV4 canonicalizes it for S3: every byte but
// the unreserved ones and '/' percent-encoded.
func escapePath(p string) string {
	var b strings.Builder
	for i := range len(p) {
		c := p[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-._~/", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// resign signs the request again for the same user, at tdate, over the
// headers it signed plus X-Amz-Date and x-amz-content-sha256 (payloadHash).
func (s *Compat) resign(ctx fiber.Ctx, ad utils.AuthData, secret string, tdate time.Time, payloadHash string) error {
	h := &ctx.Request().Header
	h.Set("X-Amz-Content-Sha256", payloadHash)
	hdr := http.Header{"X-Amz-Content-Sha256": {payloadHash}}
	var contentLength int64
	for _, name := range strings.Split(ad.SignedHeaders, ";") {
		switch name {
		case "host", "x-amz-date", "x-amz-content-sha256":
		case "content-length":
			contentLength = int64(h.ContentLength())
		default:
			for _, v := range h.PeekAll(name) {
				hdr.Add(name, string(v))
			}
		}
	}
	path, err := url.PathUnescape(string(ctx.Request().URI().PathOriginal()))
	if err != nil {
		return s3err.GetAPIError(s3err.ErrInvalidRequest)
	}
	host := string(ctx.Request().Host())
	u := &url.URL{Scheme: "http", Host: host, Path: path, RawPath: escapePath(path), RawQuery: string(ctx.Request().URI().QueryString())}
	req := &http.Request{Method: ctx.Method(), URL: u, Host: host, Header: hdr, ContentLength: contentLength}
	err = v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: ad.Access, SecretAccessKey: secret}, req, payloadHash, "s3", s.region, tdate)
	if err != nil {
		return err
	}
	h.Set("X-Amz-Date", req.Header.Get("X-Amz-Date"))
	h.Set("Authorization", req.Header.Get("Authorization"))
	return nil
}
