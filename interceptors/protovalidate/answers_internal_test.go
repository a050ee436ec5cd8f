package protovalidate

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestAnswersBounded adds many more answers than the cache holds, some
// with keys too long to hold: it never holds more than maxAnswers, nor a
// long key, and finds what it holds.
func TestAnswersBounded(t *testing.T) {
	var c answers
	for i := range 10 * maxAnswers {
		key := []byte("username\x00rule " + strconv.Itoa(i) + "\x00")
		err := errors.New(string(key))
		c.add(key, err)
		if got := c.get(key); got != err {
			t.Fatalf("answer %d: got %v, want the one just added", i, got)
		}
		long := []byte(strings.Repeat("x", maxAnswerKey+1+i))
		c.add(long, err)
		if got := c.get(long); got != nil {
			t.Fatalf("a key of %d bytes: got %v, want it not held", len(long), got)
		}
		if n := len(c.m); n > maxAnswers {
			t.Fatalf("holds %d answers, want at most %d", n, maxAnswers)
		}
	}
	var none *answers
	none.add([]byte("k"), errors.New("e"))
	if got := none.get([]byte("k")); got != nil {
		t.Errorf("no cache: got %v, want nil", got)
	}
}
