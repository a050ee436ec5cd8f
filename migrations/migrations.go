// Package migrations holds sheba's database schema as numbered SQL migrations.
//
// Files are named the golang-migrate way: NNNNNN_name.up.sql applies a
// change and NNNNNN_name.down.sql undoes it. They are embedded in the binary so
// that `sheba migrate`, `sheba serve --migrate` and the tests apply the very
// same files; the store package runs them.
package migrations

import "embed"

// FS holds every migration file, at its root.
//
//go:embed *.sql
var FS embed.FS
