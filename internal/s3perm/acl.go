package s3perm

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
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
