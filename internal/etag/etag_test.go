package etag_test

import (
	"regexp"
	"testing"

	"github.com/shebasvc/sheba/internal/etag"
)

// TestOf checks that an etag is 16 characters of base64url, the same for
// the same id and version, and another for another id or version.
func TestOf(t *testing.T) {
	const id = "1fde274f-8d33-45cf-aae5-fdb389a005d6"
	got := etag.Of(id, 1)
	if !regexp.MustCompile(`^[A-Za-z0-9_-]{16}$`).MatchString(got) {
		t.Errorf("Of(%q, 1) = %q, want 16 characters of base64url", id, got)
	}
	if again := etag.Of(id, 1); again != got {
		t.Errorf("Of twice: got %q and %q, want the same", got, again)
	}
	seen := map[string]string{got: "id, 1"}
	for name, e := range map[string]string{
		"id, 2":       etag.Of(id, 2),
		"other id, 1": etag.Of("5b0132f7-1502-4bf7-8225-9cc93b0cfb5d", 1),
		// The separator keeps id and version apart.
		"id1, 1": etag.Of(id+"1", 1),
		"id, 11": etag.Of(id, 11),
	} {
		if prev, ok := seen[e]; ok {
			t.Errorf("Of(%s) = Of(%s) = %q, want them different", name, prev, e)
		}
		seen[e] = name
	}
	if got, want := etag.Quote("abc"), `"abc"`; got != want {
		t.Errorf("Quote: got %s, want %s", got, want)
	}
}

// TestCondition checks which etags a request's etag field and If-Match
// values let a change apply to.
func TestCondition(t *testing.T) {
	const cur = "AAAAAAAAAAAAAAAA"
	for _, test := range []struct {
		name        string
		field       string
		ifMatch     []string
		want        bool
		wantIfMatch bool
	}{
		{"none", "", nil, true, false},
		{"empty header", "", []string{"", "  "}, true, false},
		{"field matches", cur, nil, true, false},
		{"field differs", "BBBBBBBBBBBBBBBB", nil, false, false},
		{"field quoted", `"` + cur + `"`, nil, false, false},
		{"strong tag", "", []string{`"` + cur + `"`}, true, true},
		{"other tag", "", []string{`"BBBBBBBBBBBBBBBB"`}, false, true},
		{"unquoted", "", []string{cur}, false, true},
		{"star", "", []string{"*"}, true, true},
		{"list, second", "", []string{`"x", "` + cur + `"`}, true, true},
		{"list, no space", "", []string{`"x","` + cur + `"`}, true, true},
		{"list, none", "", []string{`"x", "y"`}, false, true},
		{"second line", "", []string{`"x"`, `"` + cur + `"`}, true, true},
		{"weak", "", []string{`W/"` + cur + `"`}, false, true},
		{"weak, then strong", "", []string{`W/"` + cur + `", "` + cur + `"`}, true, true},
		{"malformed, then tag", "", []string{`x, "` + cur + `"`}, false, true},
		{"tag, then malformed", "", []string{`"` + cur + `", x`}, true, true},
		{"unterminated", "", []string{`"` + cur}, false, true},
		{"space inside", "", []string{`"a b"`}, false, true},
		{"empty tag", "", []string{`""`}, false, true},
		{"both match", cur, []string{`"` + cur + `"`}, true, true},
		{"field differs, header matches", "BBBBBBBBBBBBBBBB", []string{"*"}, false, true},
		{"field matches, header differs", cur, []string{`"x"`}, false, true},
	} {
		t.Run(test.name, func(t *testing.T) {
			c := etag.NewCondition(test.field, test.ifMatch)
			if got := c.Match(cur); got != test.want {
				t.Errorf("Match: got %v, want %v", got, test.want)
			}
			if got := c.HasIfMatch(); got != test.wantIfMatch {
				t.Errorf("HasIfMatch: got %v, want %v", got, test.wantIfMatch)
			}
			if got, want := c.IsZero(), test.field == "" && !test.wantIfMatch; got != want {
				t.Errorf("IsZero: got %v, want %v", got, want)
			}
		})
	}
	var zero etag.Condition
	if !zero.IsZero() || !zero.Match(cur) {
		t.Error("the zero Condition must ask nothing")
	}
}
