// Package s3lc is the S3 gateway's (internal/s3gw) side of bucket
// lifecycle (issue 35 item 3): PutBucketLifecycleConfiguration,
// GetBucketLifecycleConfiguration and DeleteBucketLifecycle. versitygw
// routes them (authenticating the request, reading the bucket's ACL) to a
// handler that answers NotImplemented; Answer, in the gateway's
// middleware, takes such an answer over once versitygw has given it: it
// authorizes the request as S3 does (the bucket's policy and ACLs:
// s3:PutLifecycleConfiguration, s3:GetLifecycleConfiguration), checks the
// document (package lifecycle: MalformedXML, InvalidArgument,
// NotImplemented for transitions) and keeps it as the bucket's
// configuration document s3meta.ConfLifecycle (the meta service checks it
// again and its leader runs it: package meta/lcmeta).
//
// Invariants: Answer changes nothing but a lifecycle request's
// NotImplemented answer (an authentication failure, or any other request,
// keeps versitygw's answer); the meta service authorizes the call again
// (the bucket's admin right, or the gateway's S3 decision).
//
// Concurrency: a Handler keeps no state; safe for concurrent use.
package s3lc

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v3"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3api/utils"
	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/lifecycle"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
)

// Handler answers the lifecycle requests.
type Handler struct {
	Meta s3meta.Doer
	Be   backend.Backend   // for versitygw's access check (bucket policy)
	IAM  auth.IAMService   // the same
	ToS3 func(error) error // a meta service error as S3's (s3gw's)
}

// NoSuchLifecycleConfiguration is S3's answer for a bucket without one.
var NoSuchLifecycleConfiguration = s3err.APIError{Code: "NoSuchLifecycleConfiguration", Description: "The lifecycle configuration does not exist", HTTPStatusCode: http.StatusNotFound}

// Answer takes over versitygw's NotImplemented answer of a lifecycle
// request (after versitygw authenticated it).
func (h *Handler) Answer(c fiber.Ctx) {
	if c.Response().StatusCode() != http.StatusNotImplemented || !c.Request().URI().QueryArgs().Has("lifecycle") {
		return
	}
	bucket := strings.Trim(c.Path(), "/")
	if bucket == "" || strings.Contains(bucket, "/") {
		return
	}
	var err error
	switch c.Method() {
	case fiber.MethodPut:
		err = h.put(c, bucket)
	case fiber.MethodGet:
		err = h.get(c, bucket)
	case fiber.MethodDelete:
		err = h.delete(c, bucket)
	default:
		return
	}
	if err != nil {
		send(c, err)
	}
}

// send answers err as versitygw does.
func send(c fiber.Ctx, err error) {
	var se s3err.S3Error
	if !errors.As(err, &se) {
		se = s3err.GetAPIError(s3err.ErrInternalError)
	}
	requestID, hostID := utils.EnsureRequestIDs(c)
	c.Response().Header.SetContentType(fiber.MIMEApplicationXML)
	c.Status(se.StatusCode())
	c.Response().SetBody(se.XMLBody(requestID, hostID))
}

// verify authorizes the request for action as versitygw's controllers do.
func (h *Handler) verify(c fiber.Ctx, bucket string, action auth.Action, perm auth.Permission) error {
	acl, _ := utils.ContextKeyParsedAcl.Get(c).(auth.ACL)
	acct, _ := utils.ContextKeyAccount.Get(c).(auth.Account)
	isRoot, _ := utils.ContextKeyIsRoot.Get(c).(bool)
	if acct.Access == "" && !isRoot {
		return s3err.GetAPIError(s3err.ErrAccessDenied)
	}
	return auth.VerifyAccess(c, h.Be, auth.AccessOptions{
		Acl: acl, AclPermission: perm, IsRoot: isRoot, Acc: acct, Bucket: bucket,
		Actions: []auth.Action{action}, IsPublicRequest: utils.ContextKeyPublicBucket.IsSet(c), Iam: h.IAM,
	})
}

func (h *Handler) ctx(c fiber.Ctx) context.Context { return c.RequestCtx() }

func (h *Handler) put(c fiber.Ctx, bucket string) error {
	if err := h.verify(c, bucket, auth.PutLifecycleConfigurationAction, auth.PermissionWrite); err != nil {
		return err
	}
	conf, err := lifecycle.Parse(c.Body())
	if err != nil {
		var le *lifecycle.Error
		if errors.As(err, &le) {
			return s3err.APIError{Code: le.Code, Description: le.Msg, HTTPStatusCode: map[bool]int{true: http.StatusNotImplemented, false: http.StatusBadRequest}[le.Code == "NotImplemented"]}
		}
		return s3err.GetAPIError(s3err.ErrMalformedXML)
	}
	doc := conf.XML()
	if len(doc) > s3meta.MaxBucketConfBytes {
		return s3err.APIError{Code: "InvalidArgument", Description: "the lifecycle configuration, once its rules have IDs, is larger than Spindle keeps (64 KiB): use fewer rules or shorter IDs", HTTPStatusCode: http.StatusBadRequest}
	}
	if err := s3meta.PutBucketConf(h.ctx(c), h.Meta, bucket, s3meta.ConfLifecycle, doc); err != nil {
		return h.ToS3(err)
	}
	c.Response().ResetBody()
	c.Status(http.StatusOK)
	return nil
}

func (h *Handler) get(c fiber.Ctx, bucket string) error {
	if err := h.verify(c, bucket, auth.GetLifecycleConfigurationAction, auth.PermissionRead); err != nil {
		return err
	}
	doc, err := s3meta.GetBucketConf(h.ctx(c), h.Meta, bucket, s3meta.ConfLifecycle)
	if err != nil {
		return h.ToS3(err)
	}
	if len(doc) == 0 {
		return NoSuchLifecycleConfiguration
	}
	c.Status(http.StatusOK)
	c.Response().Header.SetContentType(fiber.MIMEApplicationXML)
	c.Response().SetBody(doc)
	return nil
}

func (h *Handler) delete(c fiber.Ctx, bucket string) error {
	if err := h.verify(c, bucket, auth.PutLifecycleConfigurationAction, auth.PermissionWrite); err != nil {
		return err
	}
	// S3 answers 204 whether or not there was one; a bucket that does
	// not exist is NoSuchBucket.
	if err := s3meta.DeleteBucketConf(h.ctx(c), h.Meta, bucket, s3meta.ConfLifecycle); err != nil {
		if errors.Is(err, metaapi.ErrNotFound) && !errors.Is(err, metaapi.ErrNoSuchBucket) {
			err = nil
		}
		if err != nil {
			return h.ToS3(err)
		}
	}
	c.Response().ResetBody()
	c.Status(http.StatusNoContent)
	return nil
}
