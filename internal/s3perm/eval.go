package s3perm

// Request is what Allowed decides: who asks (an access key; "" for an
// anonymous request), the action (S3's name, "s3:GetObject"), whether the
// resource is an object, and the bucket's owner, object ownership and
// grants (ObjectGrants: the object's, for an object action).
type Request struct {
	Access       string
	Action       string
	Object       bool
	Owner        string
	Ownership    string
	BucketGrants []Grant
	ObjectGrants []Grant
}

// aclPerms maps the actions an ACL can grant to the permission they need
// and whether the object's ACL (rather than the bucket's) answers.
var aclPerms = map[string]struct {
	perm   string
	object bool
}{
	"s3:GetObject":                  {PermRead, true},
	"s3:GetObjectAttributes":        {PermRead, true},
	"s3:GetObjectAcl":               {PermReadACP, true},
	"s3:PutObjectAcl":               {PermWriteACP, true},
	"s3:ListBucket":                 {PermRead, false},
	"s3:ListBucketVersions":         {PermRead, false},
	"s3:ListBucketMultipartUploads": {PermRead, false},
	"s3:PutObject":                  {PermWrite, false},
	"s3:DeleteObject":               {PermWrite, false},
	"s3:AbortMultipartUpload":       {PermWrite, false},
	"s3:GetBucketAcl":               {PermReadACP, false},
	"s3:PutBucketAcl":               {PermWriteACP, false},
}

// Allowed is the identity side of a decision: whether the request is
// allowed by the bucket owner's rights (every action on its bucket and
// its objects) or by an ACL grant, ACLs counting only where the bucket's
// ownership enables them. It never denies explicitly: a bucket policy's
// Deny is checked before it, and false is an implicit deny unless the
// bucket policy allows.
func Allowed(r Request) bool {
	if r.Access != "" && r.Access == r.Owner {
		return true
	}
	if !ACLsEnabled(r.Ownership) {
		return false
	}
	p, ok := aclPerms[r.Action]
	if !ok {
		return false
	}
	if p.object {
		return r.Object && Allows(r.ObjectGrants, r.Access, p.perm)
	}
	return Allows(r.BucketGrants, r.Access, p.perm)
}

// NeedsObjectGrants reports whether Allowed reads ObjectGrants for the
// action (so that a caller looks the object's ACL up only then).
func NeedsObjectGrants(action string) bool { return aclPerms[action].object }
