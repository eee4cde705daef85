package sigcompat

import (
	"log/slog"
	"reflect"
	"strings"
	"unsafe"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"
	"github.com/versity/versitygw/s3api"
)

// ExpectHook returns the s3api options that install the Expect handler
// (for one gateway: its options are used once).
func ExpectHook(v4c *Compat, log *slog.Logger) []s3api.Option {
	var srv *s3api.S3ApiServer
	return []s3api.Option{
		func(s *s3api.S3ApiServer) { srv = s },
		s3api.WithOnListen(func() {
			app := fiberApp(srv)
			if app == nil {
				log.Warn("s3 gateway: versitygw's server not found: Expect: 100-continue is answered before the signature is checked")
				return
			}
			app.Server().ExpectHandler = v4c.expectHandler(app)
		}),
	}
}

// fiberApp is versitygw's fiber.App of s (nil when it is not where this
// version keeps it).
func fiberApp(s *s3api.S3ApiServer) *fiber.App {
	if s == nil {
		return nil
	}
	f := reflect.ValueOf(s).Elem().FieldByName("app")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*fiber.App]() {
		return nil
	}
	return *(**fiber.App)(unsafe.Pointer(f.UnsafeAddr()))
}

// expectHandler checks a request's signature from its headers and answers
// 100 to go on, or the error's status with its S3 error body.
func (s *Compat) expectHandler(app *fiber.App) func(*fasthttp.RequestCtx) int {
	return func(fctx *fasthttp.RequestCtx) int {
		c := app.AcquireCtx(fctx)
		defer app.ReleaseCtx(c)
		err := s.checkSignature(c)
		if err == nil {
			return fasthttp.StatusContinue
		}
		if err := sendS3Error(c, err); err != nil {
			return fasthttp.StatusInternalServerError
		}
		return fctx.Response.StatusCode()
	}
}

// checkSignature verifies a header-signed SigV4 request's signature
// (nil for the others: versitygw checks them).
func (s *Compat) checkSignature(ctx fiber.Ctx) error {
	if !strings.HasPrefix(ctx.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		return nil
	}
	tdate, ok := requestTime(ctx)
	if !ok {
		return nil
	}
	hash := ctx.Get("X-Amz-Content-Sha256")
	if hash == "" {
		hash = emptySHA256 // what a client that sends none signed (fixHeaderAuth)
	}
	_, _, err := s.verify(ctx, tdate, hash)
	return err
}
