package migrations_test

import (
	"io/fs"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shebasvc/sheba/migrations"
)

// TestFSPairs checks that every embedded file follows golang-migrate's naming
// and that each version has both directions.
func TestFSPairs(t *testing.T) {
	names, err := fs.Glob(migrations.FS, "*")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("got no embedded migrations, want at least one")
	}
	valid := regexp.MustCompile(`^([0-9]{6})_([a-z0-9_]+)\.(up|down)\.sql$`)
	type pair struct{ up, down bool }
	got := map[string]pair{}
	nameOf := map[string]string{} // version -> name
	for _, name := range names {
		m := valid.FindStringSubmatch(name)
		if m == nil {
			t.Errorf("file %q: want NNNNNN_name.up.sql or NNNNNN_name.down.sql", name)
			continue
		}
		if prev, ok := nameOf[m[1]]; ok && prev != m[2] {
			t.Errorf("version %s: got names %q and %q, want one", m[1], prev, m[2])
		}
		nameOf[m[1]] = m[2]
		key := m[1] + "_" + m[2]
		p := got[key]
		if m[3] == "up" {
			p.up = true
		} else {
			p.down = true
		}
		got[key] = p
	}
	want := map[string]pair{}
	for key := range got {
		want[key] = pair{up: true, down: true}
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(pair{})); diff != "" {
		t.Errorf("migration pairs mismatch (-want +got):\n%s", diff)
	}
}
