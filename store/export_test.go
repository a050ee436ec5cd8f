package store

// DroppedTables is droppedTables, for the tests of package store_test.
var DroppedTables = droppedTables
