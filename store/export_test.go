package store

// DroppedTables is droppedTables, for the tests of package store_test.
var DroppedTables = droppedTables

// Translate is translate, for the tests of package store_test.
var Translate = translate
