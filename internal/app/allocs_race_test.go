//go:build race

package app

// raceEnabled: the tests run under the race detector (go test -race).
const raceEnabled = true
