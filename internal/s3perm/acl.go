package s3perm

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"
)

// Permissions of an ACL grant (S3's).
const (
	PermFullControl = "FULL_CONTROL"
	PermRead        = "READ"
	PermWrite       = "WRITE"
	PermReadACP     = "READ_ACP"
	PermWriteACP    = "WRITE_ACP"
)

// Grantee types of a Grant.
const (
	// GranteeUser is a Spindle S3 user by access key (S3's canonical
	// user ID: Spindle's is the access key).
	GranteeUser = "user"
	// GranteeAllUsers is everyone, anonymous requests included (S3's
	// AllUsers group).
	GranteeAllUsers = "all-users"
	// GranteeAuthenticated is every signed request of a known user
	// (S3's AuthenticatedUsers group).
	GranteeAuthenticated = "authenticated-users"
)

// S3's group URIs.
const (
	AllUsersURI           = "http://acs.amazonaws.com/groups/global/AllUsers"
	AuthenticatedUsersURI = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
)

// Object ownership settings (S3's).
const (
	OwnerEnforced  = "BucketOwnerEnforced"
	OwnerPreferred = "BucketOwnerPreferred"
	ObjectWriter   = "ObjectWriter"
)

// ErrACLsDisabled is an ACL other than the owner's own under
// BucketOwnerEnforced (S3's AccessControlListNotSupported).
var ErrACLsDisabled = errors.New("the bucket does not allow ACLs")

// ErrCanned is a canned ACL S3 does not have for objects.
var ErrCanned = errors.New("unsupported canned ACL")

// Grant is one ACL grant besides the owner's FULL_CONTROL (implicit).
type Grant struct {
	Type       string `json:"type"`
	ID         string `json:"id,omitempty"`
	Permission string `json:"perm"`
}

// ACLsEnabled reports whether a bucket's object ownership lets ACLs
// grant anything (empty is BucketOwnerEnforced, S3's default).
func ACLsEnabled(ownership string) bool {
	return ownership != OwnerEnforced
}

// ValidOwnership reports whether s is one of S3's settings.
func ValidOwnership(s string) bool {
	return s == OwnerEnforced || s == OwnerPreferred || s == ObjectWriter
}

// CannedGrants is what a canned object ACL grants besides the owner.
// Under BucketOwnerEnforced (ACLs disabled) only private and
// bucket-owner-full-control are accepted (ErrACLsDisabled otherwise).
func CannedGrants(canned, ownership string) ([]Grant, error) {
	var g []Grant
	switch canned {
	case "", "private", "bucket-owner-full-control":
		return nil, nil
	case "bucket-owner-read":
	case "public-read":
		g = []Grant{{Type: GranteeAllUsers, Permission: PermRead}}
	case "public-read-write":
		g = []Grant{{Type: GranteeAllUsers, Permission: PermRead}, {Type: GranteeAllUsers, Permission: PermWrite}}
	case "authenticated-read":
		g = []Grant{{Type: GranteeAuthenticated, Permission: PermRead}}
	default:
		return nil, fmt.Errorf("%w: %q", ErrCanned, canned)
	}
	if !ACLsEnabled(ownership) {
		return nil, ErrACLsDisabled
	}
	return g, nil
}

// EncodeGrants is the stored form of an object's grants ("" for none:
// private).
func EncodeGrants(g []Grant) string {
	if len(g) == 0 {
		return ""
	}
	b, err := json.Marshal(g)
	if err != nil {
		panic(err) // strings only: cannot fail
	}
	return string(b)
}

// DecodeGrants reads EncodeGrants' form.
func DecodeGrants(s string) ([]Grant, error) {
	if s == "" {
		return nil, nil
	}
	var g []Grant
	if err := json.Unmarshal([]byte(s), &g); err != nil {
		return nil, fmt.Errorf("object ACL: %w", err)
	}
	return g, nil
}

// Allows reports whether grants give access (a user's access key; ""
// for an anonymous request) perm, FULL_CONTROL included.
func Allows(grants []Grant, access, perm string) bool {
	for _, g := range grants {
		if g.Permission != perm && g.Permission != PermFullControl {
			continue
		}
		switch g.Type {
		case GranteeAllUsers:
			return true
		case GranteeAuthenticated:
			if access != "" {
				return true
			}
		case GranteeUser:
			if access != "" && g.ID == access {
				return true
			}
		}
	}
	return false
}

// accessControlPolicy is S3's AccessControlPolicy document.
type accessControlPolicy struct {
	XMLName xml.Name `xml:"AccessControlPolicy"`
	Owner   struct {
		ID string `xml:"ID"`
	} `xml:"Owner"`
	Grants []struct {
		Grantee struct {
			Type string `xml:"http://www.w3.org/2001/XMLSchema-instance type,attr"`
			ID   string `xml:"ID"`
			URI  string `xml:"URI"`
		} `xml:"Grantee"`
		Permission string `xml:"Permission"`
	} `xml:"AccessControlList>Grant"`
}

// ParseAccessControlPolicy reads an AccessControlPolicy document: its
// owner ID and its grants but the owner's FULL_CONTROL. Grantees are
// canonical users (ID: an access key) and the AllUsers and
// AuthenticatedUsers groups (URI); permissions S3's five.
func ParseAccessControlPolicy(body []byte) (owner string, grants []Grant, err error) {
	var acp accessControlPolicy
	if err := xml.Unmarshal(body, &acp); err != nil {
		return "", nil, fmt.Errorf("AccessControlPolicy: %w", err)
	}
	for _, g := range acp.Grants {
		switch g.Permission {
		case PermFullControl, PermRead, PermWrite, PermReadACP, PermWriteACP:
		default:
			return "", nil, fmt.Errorf("AccessControlPolicy: permission %q", g.Permission)
		}
		var gr Grant
		switch {
		case g.Grantee.Type == "CanonicalUser" && g.Grantee.ID != "":
			if g.Grantee.ID == acp.Owner.ID && g.Permission == PermFullControl {
				continue // the owner's own: implicit
			}
			gr = Grant{Type: GranteeUser, ID: g.Grantee.ID}
		case g.Grantee.Type == "Group" && g.Grantee.URI == AllUsersURI:
			gr = Grant{Type: GranteeAllUsers}
		case g.Grantee.Type == "Group" && g.Grantee.URI == AuthenticatedUsersURI:
			gr = Grant{Type: GranteeAuthenticated}
		default:
			return "", nil, fmt.Errorf("AccessControlPolicy: grantee %q %q%q", g.Grantee.Type, g.Grantee.ID, g.Grantee.URI)
		}
		gr.Permission = g.Permission
		grants = append(grants, gr)
	}
	return acp.Owner.ID, grants, nil
}

// AccessControlPolicyXML is S3's answer to GetObjectAcl: the owner, its
// FULL_CONTROL, then grants, each grantee typed by xsi:type
// (CanonicalUser with its ID, Group with its URI), as S3 writes it and
// as ParseAccessControlPolicy reads it.
func AccessControlPolicyXML(owner string, grants []Grant) []byte {
	var b strings.Builder
	esc := func(s string) string {
		var e strings.Builder
		_ = xml.EscapeText(&e, []byte(s)) // a strings.Builder does not fail
		return e.String()
	}
	grant := func(typ, inner, perm string) {
		fmt.Fprintf(&b, `<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="%s">%s</Grantee><Permission>%s</Permission></Grant>`, typ, inner, esc(perm))
	}
	user := func(id string) string { return "<ID>" + esc(id) + "</ID><DisplayName>" + esc(id) + "</DisplayName>" }
	b.WriteString(xml.Header)
	b.WriteString(`<AccessControlPolicy xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Owner>` + user(owner) + `</Owner><AccessControlList>`)
	grant("CanonicalUser", user(owner), PermFullControl)
	for _, g := range grants {
		switch g.Type {
		case GranteeUser:
			grant("CanonicalUser", user(g.ID), g.Permission)
		case GranteeAllUsers:
			grant("Group", "<URI>"+AllUsersURI+"</URI>", g.Permission)
		case GranteeAuthenticated:
			grant("Group", "<URI>"+AuthenticatedUsersURI+"</URI>", g.Permission)
		}
	}
	b.WriteString(`</AccessControlList></AccessControlPolicy>`)
	return []byte(b.String())
}

// GrantHeaders are the x-amz-grant-* headers and the permission each
// gives.
var GrantHeaders = []struct{ Header, Perm string }{
	{"X-Amz-Grant-Read", PermRead}, {"X-Amz-Grant-Write", PermWrite}, {"X-Amz-Grant-Read-Acp", PermReadACP},
	{"X-Amz-Grant-Write-Acp", PermWriteACP}, {"X-Amz-Grant-Full-Control", PermFullControl},
}

// ErrGrantee is a grantee of an x-amz-grant-* header Spindle does not
// know (emailAddress=, a group other than AllUsers and
// AuthenticatedUsers, a malformed entry).
var ErrGrantee = errors.New("unsupported grantee")

// ParseGrantee reads one grantee of an x-amz-grant-* header, with perm:
// id="ACCESS-KEY" (a user; Spindle's canonical IDs are access keys) or
// uri="GROUP-URI" (AllUsers, AuthenticatedUsers); quotes and spaces
// around are optional.
func ParseGrantee(s, perm string) (Grant, error) {
	k, v, ok := strings.Cut(strings.TrimSpace(s), "=")
	v = strings.Trim(strings.TrimSpace(v), `"`)
	if !ok || v == "" {
		return Grant{}, fmt.Errorf("%w: %q", ErrGrantee, s)
	}
	switch {
	case strings.EqualFold(strings.TrimSpace(k), "id"):
		return Grant{Type: GranteeUser, ID: v, Permission: perm}, nil
	case strings.EqualFold(strings.TrimSpace(k), "uri") && v == AllUsersURI:
		return Grant{Type: GranteeAllUsers, Permission: perm}, nil
	case strings.EqualFold(strings.TrimSpace(k), "uri") && v == AuthenticatedUsersURI:
		return Grant{Type: GranteeAuthenticated, Permission: perm}, nil
	}
	return Grant{}, fmt.Errorf("%w: %q", ErrGrantee, s)
}

// ParseGrantHeaders reads the x-amz-grant-* headers header gives (""
// for a header not sent): their grants (none: no header), each header a
// comma-separated list of grantees (ParseGrantee).
func ParseGrantHeaders(header func(name string) string) ([]Grant, error) {
	var out []Grant
	for _, h := range GrantHeaders {
		v := header(h.Header)
		if v == "" {
			continue
		}
		for _, s := range strings.Split(v, ",") {
			g, err := ParseGrantee(s, h.Perm)
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		}
	}
	return out, nil
}
