package gateway_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// TestDocsRoutes keeps the route table of docs/api.md ("## Routes") true
// to the method table the protos generate: one row per method (in any order), with its
// full gRPC name, HTTP verb and path template (the query string a row
// shows is left out). A method added to the protos and not to the page
// fails here.
func TestDocsRoutes(t *testing.T) {
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Routes\n")
	if !ok {
		t.Fatal(`docs/api.md has no "## Routes" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `(/[^`]+)` \\| `([A-Z]+) ([^`?]+)[^`]*` \\|")
	var got []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		got = append(got, m[1]+" "+m[2]+" "+m[3])
	}
	var want []string
	for _, svc := range shebav1.Services {
		for _, m := range svc.Methods {
			want = append(want, m.FullName+" "+m.HTTP.Method+" "+m.HTTP.Path)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("docs/api.md's route table is not the methods' (-from the protos +in the page):\n%s", diff)
	}
}
