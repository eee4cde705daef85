// Package sigcompat takes, in front of versitygw's S3 routes, requests
// that S3-compatible servers take and versitygw's SigV4 check refuses,
// and answers Expect: 100-continue in S3's order. It is mounted by
// internal/s3gw as a middleware (Compat.Handle) and a fasthttp hook
// (ExpectHook).
//
// # What it takes
//
//   - A Date header (RFC 1123, with GMT or a numeric zone) and no
//     X-Amz-Date: what botocore's own signer sends when given a Date. The
//     request time is the Date's.
//   - No x-amz-content-sha256: curl --aws-sigv4 signs the empty payload's
//     hash and sends none (MinIO and SeaweedFS take it so). The body, when
//     there is one, is taken unverified, as with UNSIGNED-PAYLOAD; a
//     Content-MD5 or checksum header still is verified (by versitygw).
//   - A PUT with Transfer-Encoding: chunked and no Content-Length (which
//     versitygw refuses, MissingContentLength): its body is read first, up
//     to MaxChunkedBodyBytes (more: 411 MissingContentLength, as S3 answers
//     every such PUT), ChunkedBodiesInFlight at once (more: SlowDown).
//
// # Invariants
//
//   - A request is re-signed only after its own signature was verified
//     here, with versitygw's canonical request (the path unescaped, as
//     versitygw verifies it after its DecodeURL), the user's key (root or
//     IAM) and the 15-minute window; re-signing is for the same user, at
//     the same time, over the headers it signed plus X-Amz-Date and
//     x-amz-content-sha256. versitygw then verifies the re-signed request
//     as any other, and authorizes it. A request whose signature fails is
//     refused here (SignatureDoesNotMatch, InvalidAccessKeyId, ...).
//   - A request that says Expect: 100-continue and is header-signed with
//     SigV4 is answered 100 only once its signature verifies; otherwise
//     its error (403) before the body, and the connection is closed.
//     Anonymous, presigned and V2 requests are answered 100 and checked
//     with their body by versitygw. The hook is fasthttp's
//     Server.ExpectHandler, set before the server accepts its first
//     connection (versitygw's OnListen); versitygw keeps its fiber.App
//     unexported, so ExpectHook reaches it by reflection, pinned to the
//     versitygw version in go.mod (s3gw's TestExpectContinueAfterSignature
//     fails if it no longer finds it; the gateway then logs it and answers
//     100 first).
//   - Memory: at most ChunkedBodiesInFlight bodies of MaxChunkedBodyBytes.
//
// # Concurrency
//
// Compat is safe for concurrent use (its IAM service is; the slots of
// chunked bodies are a channel). ExpectHook's options serve one gateway.
package sigcompat
