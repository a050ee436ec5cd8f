package cborpb

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"

	"github.com/fxamacker/cbor/v2"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// MediaType is the media type this package reads and writes.
const MediaType = "application/cbor"

// maxNesting bounds how deep maps and arrays may nest in an input, which
// also bounds the recursion that turns it into a message.
const maxNesting = 64

var (
	encMode = mustEncMode()
	decMode = mustDecMode()
)

func mustEncMode() cbor.EncMode {
	opts := cbor.CoreDetEncOptions()
	// An empty list or bytes field is [] or h'' as in JSON, not null.
	opts.NilContainers = cbor.NilContainerAsEmpty
	em, err := opts.EncMode()
	if err != nil {
		panic(err)
	}
	return em
}

func mustDecMode() cbor.DecMode {
	dm, err := decOptions(DecodeLimits{}).DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}

func decOptions(l DecodeLimits) cbor.DecOptions {
	return cbor.DecOptions{
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		MaxNestedLevels:  cmp.Or(l.MaxNesting, maxNesting),
		MaxArrayElements: l.MaxArrayElements,
		MaxMapPairs:      l.MaxMapPairs,
		DefaultMapType:   reflect.TypeFor[map[string]any](),
		// Tags 0 and 1 become time.Time; other tags stay cbor.Tag and
		// are then rejected as a value of the wrong type.
		TimeTagToAny: cbor.TimeTagToTime,
	}
}

// DecodeLimits bound the CBOR a Marshaler decodes. They are checked while
// the input is scanned, before any of it is turned into values, so an input
// over them costs no more than reading it. Zero means fxamacker/cbor's
// default for that limit (131,072 array elements and map pairs), and 64 for
// MaxNesting.
type DecodeLimits struct {
	// MaxNesting is how deep maps, arrays and tags may nest: 4 to 65535.
	MaxNesting int
	// MaxArrayElements is the most elements in one array: 16 to
	// 2147483647.
	MaxArrayElements int
	// MaxMapPairs is the most pairs in one map: 16 to 2147483647.
	MaxMapPairs int
}

// Marshaler is a runtime.Marshaler for application/cbor. The zero value is
// ready to use and safe for concurrent use.
//
// Register it on the gateway with
//
//	runtime.WithMarshalerOption(cborpb.MediaType, &cborpb.Marshaler{})
type Marshaler struct {
	// Resolver finds the message types named in google.protobuf.Any;
	// nil means protoregistry.GlobalTypes.
	Resolver protoregistry.MessageTypeResolver
	// Limits bound what Unmarshal decodes. A server decoding requests
	// should set them as tight as its messages allow. Invalid limits make
	// every Unmarshal fail.
	Limits DecodeLimits

	decOnce sync.Once
	dec     cbor.DecMode
	decErr  error
}

// decMode returns the decoding mode of m's limits, built once.
func (m *Marshaler) decMode() (cbor.DecMode, error) {
	if m.Limits == (DecodeLimits{}) {
		return decMode, nil
	}
	m.decOnce.Do(func() {
		m.dec, m.decErr = decOptions(m.Limits).DecMode()
		if m.decErr != nil {
			m.decErr = fmt.Errorf("cborpb: limits: %w", m.decErr)
		}
	})
	return m.dec, m.decErr
}

var _ runtime.Marshaler = (*Marshaler)(nil)

// ContentType returns MediaType, whatever v is.
func (*Marshaler) ContentType(any) string { return MediaType }

// Marshal encodes v. A proto.Message follows the mapping of the package
// comment; anything else (the gateway passes plain values for some
// response_body mappings) is encoded by fxamacker/cbor as it is.
func (m *Marshaler) Marshal(v any) ([]byte, error) {
	msg, ok := v.(proto.Message)
	if !ok {
		return encMode.Marshal(v)
	}
	tree, err := m.encoder().message(msg.ProtoReflect())
	if err != nil {
		return nil, err
	}
	return encMode.Marshal(tree)
}

// Unmarshal decodes data, which must hold exactly one CBOR data item, into
// v. A proto.Message is reset first, as protojson does.
func (m *Marshaler) Unmarshal(data []byte, v any) error {
	dm, err := m.decMode()
	if err != nil {
		return err
	}
	msg, ok := v.(proto.Message)
	if !ok {
		// grpc-gateway decodes a body that is one message field of the
		// request (an HTTP rule's body: "subscription") into a pointer to
		// that field: a pointer to a message pointer, which JSONPb takes
		// too.
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() && rv.Elem().Kind() == reflect.Pointer {
			if _, isMessage := rv.Elem().Interface().(proto.Message); isMessage {
				if rv.Elem().IsNil() {
					rv.Elem().Set(reflect.New(rv.Elem().Type().Elem()))
				}
				return m.Unmarshal(data, rv.Elem().Interface())
			}
		}
		return dm.Unmarshal(data, v)
	}
	var tree any
	if err := dm.Unmarshal(data, &tree); err != nil {
		return fmt.Errorf("cborpb: %w", err)
	}
	if err := checkItems(data); err != nil {
		return err
	}
	proto.Reset(msg)
	d := m.decoder()
	if err := d.message(tree, msg.ProtoReflect()); err != nil {
		return err
	}
	if err := proto.CheckInitialized(msg); err != nil {
		return fmt.Errorf("cborpb: %w", err)
	}
	return nil
}

// NewDecoder returns a Decoder that reads all of r and decodes it as one
// CBOR data item. An empty r gives io.EOF, which the gateway takes as an
// empty body; a truncated one gives an error that is not io.EOF.
func (m *Marshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return io.EOF
		}
		err = m.Unmarshal(data, v)
		if errors.Is(err, io.EOF) {
			// The body was not empty, so running out of it is a
			// truncation, which must not read as an empty body.
			err = fmt.Errorf("cborpb: %w", io.ErrUnexpectedEOF)
		}
		return err
	})
}

// NewEncoder returns an Encoder that writes each value to w as one CBOR
// data item.
func (m *Marshaler) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v any) error {
		b, err := m.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
}

func (m *Marshaler) resolver() protoregistry.MessageTypeResolver {
	if m.Resolver != nil {
		return m.Resolver
	}
	return protoregistry.GlobalTypes
}

func (m *Marshaler) encoder() encoder { return encoder{resolver: m.resolver()} }
func (m *Marshaler) decoder() decoder { return decoder{resolver: m.resolver()} }
