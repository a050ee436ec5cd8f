package store

import "time"

// DroppedTables is droppedTables, for the tests of package store_test.
var DroppedTables = droppedTables

// Translate is translate, for the tests of package store_test.
var Translate = translate

// SetStandbyClock sets the clock of s, for tests that move it.
func SetStandbyClock(s *Standby, now func() time.Duration) { s.now = now }
