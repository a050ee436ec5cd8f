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
			count := func(h http2.FrameHeader) {
				switch {
				case h.Type == http2.FrameRSTStream:
					resets++
				case h.Type == http2.FrameHeaders && h.Flags.Has(http2.FlagHeadersEndStream):
					ends++
				}
			}
			for p := test.bytes; len(p) > 0; {
				k := min(size, len(p))
				f.scan(p[:k], count)
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

// TestResetOfEndedStream: a client reset of a stream the server has ended
// already (as grpc-go's tap refuses a call without a key before the
// client's reset is read) takes back that stream's completion, so a client
// that opens and resets keyed methods' streams without a key runs dry as
// fast as one whose streams the server never ends; a reset of a stream
// the server has not ended costs one.
func TestResetOfEndedStream(t *testing.T) {
	const budget = 10
	var cut int
	c := New(budget, nil).Conn(nil).(*conn)
	hdr := func(typ http2.FrameType, flags http2.Flags, id uint32) http2.FrameHeader {
		return http2.FrameHeader{Type: typ, Flags: flags, StreamID: id}
	}
	id := uint32(1)
	for i := range 2 * budget {
		c.serverFrame(hdr(http2.FrameHeaders, http2.FlagHeadersEndStream, id))
		c.clientFrame(hdr(http2.FrameRSTStream, 0, id))
		id += 2
		if c.cut && cut == 0 {
			cut = i + 1
		}
	}
	// A completion is never banked beyond the budget, so from the second
	// stream on each costs one, as a reset of a stream never ended does.
	if cut == 0 || cut > budget+1 {
		t.Errorf("ended then reset: cut after %d streams, want within %d", cut, budget+1)
	}

	// Reset, then ended (grpc-go writes its answer to the tap's refusal
	// after reading the reset): no completion.
	c = New(budget, nil).Conn(nil).(*conn)
	cut = 0
	for i := range 2 * budget {
		c.clientFrame(hdr(http2.FrameRSTStream, 0, id))
		c.serverFrame(hdr(http2.FrameHeaders, http2.FlagHeadersEndStream, id))
		id += 2
		if c.cut && cut == 0 {
			cut = i + 1
		}
	}
	if cut != budget+1 {
		t.Errorf("reset then ended: cut after %d streams, want %d", cut, budget+1)
	}

	c = New(budget, nil).Conn(nil).(*conn)
	for range budget {
		// Answered and not reset, or reset and never answered.
		c.serverFrame(hdr(http2.FrameHeaders, http2.FlagHeadersEndStream, id))
		c.clientFrame(hdr(http2.FrameRSTStream, 0, id+2))
		id += 4
	}
	if c.cut {
		t.Error("as many resets as completed calls cut the connection")
	}
}
