package resetguard

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"
)

// TestScan follows a client's bytes (preface, SETTINGS, requests, resets,
// DATA whose payload looks like frame headers) and a server's, cut into
// pieces of every size, and counts the resets and the HEADERS frames that
// end their stream.
func TestScan(t *testing.T) {
	var client, server bytes.Buffer
	client.WriteString(http2.ClientPreface)
	cf := http2.NewFramer(&client, nil)
	_ = cf.WriteSettings()
	// A payload of bytes that read as RST_STREAM headers if the scan lost
	// its place.
	fake := bytes.Repeat([]byte{0, 0, 4, byte(http2.FrameRSTStream), 0, 0, 0, 0, 1}, 30)
	for id := uint32(1); id <= 9; id += 2 {
		_ = cf.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x82}, EndHeaders: true})
		_ = cf.WriteData(id, true, fake)
		if id%3 == 0 {
			_ = cf.WriteRSTStream(id, http2.ErrCodeCancel)
		}
	}
	sf := http2.NewFramer(&server, nil)
	_ = sf.WriteSettings()
	for id := uint32(1); id <= 9; id += 2 {
		_ = sf.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x88}, EndHeaders: true})
		_ = sf.WriteData(id, false, fake)
		_ = sf.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte{0x88}, EndHeaders: true, EndStream: id != 9})
	}
	for _, test := range []struct {
		name         string
		bytes        []byte
		preface      int
		resets, ends int
	}{
		{"client", client.Bytes(), len(http2.ClientPreface), 2, 0},
		{"server", server.Bytes(), 0, 0, 4},
	} {
		for size := 1; size <= 40; size++ {
			f := frames{preface: test.preface}
			resets, ends := 0, 0
			for p := test.bytes; len(p) > 0; {
				k := min(size, len(p))
				r, e := f.scan(p[:k])
				resets, ends = resets+r, ends+e
				p = p[k:]
			}
			if resets != test.resets || ends != test.ends {
				t.Errorf("%s in pieces of %d: %d resets and %d ends, want %d and %d", test.name, size, resets, ends, test.resets, test.ends)
			}
		}
	}
}

// TestAccount spends and refills a budget of 3.
func TestAccount(t *testing.T) {
	a := New(3, nil).newAccount()
	a.complete(5) // nothing banked beyond the budget
	if a.reset(3) {
		t.Fatal("3 resets of a budget of 3 ended the connection")
	}
	a.complete(2)
	if a.reset(2) {
		t.Fatal("2 resets after 2 completed calls ended the connection")
	}
	if !a.reset(1) {
		t.Fatal("a reset beyond the budget did not end the connection")
	}
	if a.reset(1) {
		t.Error("the connection was ended twice")
	}
}
