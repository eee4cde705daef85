package s3extra

import (
	"bytes"
	"mime"
	"regexp"
	"strings"

	"github.com/gofiber/fiber/v3"
)

// Browser form uploads (presigned POST) are versitygw's: it parses the
// multipart/form-data body, checks the signed policy (expiration, eq,
// starts-with, content-length-range, every field covered) and hands the
// file to Backend.PutObject with the form's key, Content-Type and other
// headers, x-amz-meta-* fields, tagging and checksums; it answers
// success_action_status and success_action_redirect. What it leaves out
// is S3's ${filename} in the key field: the name the browser gives the
// file part. PostFilename puts it in before versitygw reads the form (so
// that the policy, the object and the answer all see the key S3 would),
// for a form of at most PostFilenameMaxBytes, read whole: the request's
// body stream cannot be handed on once read from (fasthttp releases it),
// so only a body held whole can be rewritten. A larger form keeps
// ${filename} as it is in its key.

// Bounds of the forms PostFilename reads whole.
const (
	// PostFilenameMaxBytes is the largest form (Content-Length) whose
	// ${filename} is replaced.
	PostFilenameMaxBytes = 8 << 20
	// postFilenameParallel bounds the forms held in memory at once
	// (others wait for a turn).
	postFilenameParallel = 8
)

var postFilenameTurns = make(chan struct{}, postFilenameParallel)

var (
	// fileDisposition is the Content-Disposition line of a form part
	// that carries a file, and the end of that part's headers.
	fileDisposition = regexp.MustCompile(`(?i)\r\ncontent-disposition:[^\r\n]*;\s*filename="([^"\r\n]*)"[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n`)
	// keyField is the form's key field: its headers, then its value.
	keyField = regexp.MustCompile(`(?is)(content-disposition:\s*form-data;\s*name="?key"?\r\n(?:[^\r\n]+\r\n)*\r\n)(.*?)(\r\n--)`)
)

// PostFilename replaces ${filename} in a form upload's key field (a POST
// of multipart/form-data of at most PostFilenameMaxBytes) with the file
// part's name, and fixes the request's Content-Length.
func PostFilename(c fiber.Ctx) error {
	if c.Method() != fiber.MethodPost {
		return nil
	}
	if mt, _, err := mime.ParseMediaType(c.Get(fiber.HeaderContentType)); err != nil || mt != fiber.MIMEMultipartForm {
		return nil
	}
	req := c.Request()
	size := req.Header.ContentLength()
	if size < 0 || size > PostFilenameMaxBytes {
		return nil
	}
	select {
	case postFilenameTurns <- struct{}{}:
		defer func() { <-postFilenameTurns }()
	case <-c.Context().Done():
		return c.Context().Err()
	}
	body := req.Body() // reads a stream whole (at most size bytes)
	newBody := rewriteKey(body)
	if len(newBody) != len(body) {
		req.SetBody(newBody)
		req.Header.SetContentLength(len(newBody))
	}
	return nil
}

// rewriteKey is a form's beginning with ${filename} in its key field
// replaced by the file part's name (its base name: some browsers send a
// path); head as it is when either is not there.
func rewriteKey(head []byte) []byte {
	f := fileDisposition.FindSubmatchIndex(head)
	if f == nil {
		return head
	}
	name := string(head[f[2]:f[3]])
	name = name[strings.LastIndexAny(name, `/\`)+1:]
	k := keyField.FindSubmatchIndex(head[:f[0]+2])
	if k == nil || !bytes.Contains(head[k[4]:k[5]], []byte("${filename}")) {
		return head
	}
	value := bytes.ReplaceAll(head[k[4]:k[5]], []byte("${filename}"), []byte(name))
	out := make([]byte, 0, len(head)+len(value))
	out = append(out, head[:k[4]]...)
	out = append(out, value...)
	return append(out, head[k[5]:]...)
}
