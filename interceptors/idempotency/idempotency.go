package idempotency

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
	"github.com/shebasvc/sheba/store"
)

// ReplayedKey is the response metadata set to "true" on a replayed
// outcome; the REST gateway answers it as the Idempotent-Replayed header.
const ReplayedKey = "idempotent-replayed"

// The reasons of the errors this package decides, in their ErrorInfo of
// domain "sheba".
const (
	ReasonReused = reason.IdempotencyKeyReused
	ReasonInUse  = reason.IdempotencyKeyInUse
)

// inUseRetry is the wait suggested to a call whose key is in use.
const inUseRetry = time.Second

// Store keeps the records; *store.Store implements it. The methods are
// those of package store, which document them.
type Store interface {
	InTx(ctx context.Context, fn func(ctx context.Context) error) error
	WithLazyTx(ctx context.Context, onBegin func(ctx context.Context) error) (context.Context, *store.LazyTx)
	LockIdempotencyKey(ctx context.Context, k store.IdempotencyKey) (*store.IdempotencyRecord, bool, error)
	RecordIdempotencyKey(ctx context.Context, k store.IdempotencyKey, rec store.IdempotencyRecord, ttl time.Duration) (bool, error)
	GetIdempotencyKey(ctx context.Context, k store.IdempotencyKey) (store.IdempotencyRecord, error)
}

// recorded are the error codes recorded as outcomes: the handler's answers
// about the data. Every other error leaves no record (see the package
// comment), and so does any code added to gRPC later.
var recorded = map[codes.Code]bool{
	codes.NotFound:           true,
	codes.AlreadyExists:      true,
	codes.FailedPrecondition: true,
	codes.PermissionDenied:   true,
	codes.OutOfRange:         true,
}

var (
	errNoCaller = badKey("needs an API key: keys are scoped to the caller")
	// The error table gives a reused key its REST status (422) too.
	errReused = reason.OutcomeKeyReused.Err()
	errInUse  = reason.Error(codes.Aborted, ReasonInUse,
		"a request with this idempotency key is still running; retry later",
		&errdetails.RetryInfo{RetryDelay: durationpb.New(inUseRetry)})
)

// errAnswered fails the handler's first store call when the claim of the
// key finds the call answered already: by a record that a concurrent call
// committed since the first look, or by the key in use. To the handler the
// call is over, as if its client had gone away: the error wraps
// context.Canceled, so every handler gives up quietly (the error table
// answers Canceled without a log line), and the interceptor answers in its
// place. It never leaves this package.
var errAnswered = fmt.Errorf("idempotency: answered by its key: %w", context.Canceled)

// errRaced ends the transaction without a commit when the record of a
// concurrent call came first; it never leaves this package.
var errRaced = errors.New("idempotency: recorded by a concurrent call")

// UnaryServerInterceptor returns the interceptor over s. caller returns the
// caller's identity (the API key id), which scopes the keys; a call with a
// key and no caller is refused.
func UnaryServerInterceptor(s Store, caller func(context.Context) string, opts ...Option) grpc.UnaryServerInterceptor {
	o := evaluateOptions(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		key, ok, err := keyFromContext(ctx)
		if err != nil {
			return nil, err
		}
		msg, isMsg := req.(proto.Message)
		if !ok || !isMsg {
			return handler(ctx, req)
		}
		id := caller(ctx)
		if id == "" {
			return nil, errNoCaller
		}
		fp, err := fingerprint(msg, o.fingerprintKey)
		if err != nil {
			return nil, o.failure(ctx, "fingerprint request", err)
		}
		fp = withMetadata(ctx, fp, o.fingerprintMetadata)
		c := &call{o: o, s: s, fp: fp, k: store.IdempotencyKey{Caller: id, Method: info.FullMethod, Key: key}}
		return c.run(ctx, req, handler)
	}
}

// call is one call with a key.
type call struct {
	o  *options
	s  Store
	k  store.IdempotencyKey
	fp []byte
}

// run runs the call as the package comment says.
//
// Why the transaction is lazy, beginning and claiming the key at the
// handler's first store call rather than before the handler: a handler may
// wait for a scarce resource before it touches the database (CreateAccount
// waits for a password hash slot, then hashes for about 30 ms of a core).
// A transaction opened before the handler held a connection, idle in the
// transaction, all that time, and 16 concurrent keyed sign-ups took every
// connection of the pool from the other calls. The first look, outside any
// transaction, answers a retry, a reused key and a key in use before the
// handler runs, so they cost no hash either. The alternatives were worse:
// a "prepare" step for the interceptor to run before it opens the
// transaction splits every keyed handler in two, and ties the interceptor
// to them; a claim committed on its own before the handler is a record
// without its change, which needs recovery of its own after a crash. With
// the lazy transaction the handlers do not change, and the change, its
// record and its event still commit in one transaction.
func (c *call) run(ctx context.Context, req any, handler grpc.UnaryHandler) (any, error) {
	// The first look: one statement on the pool, whose lock ends with it.
	rec, free, err := c.s.LockIdempotencyKey(ctx, c.k)
	switch {
	case err != nil:
		return nil, c.o.failure(ctx, "check idempotency key", err)
	case rec != nil:
		return c.replay(ctx, *rec)
	case !free:
		return c.inUse(ctx)
	}

	// The claim, when the transaction begins: the key's record and its
	// lock again, since another call may have taken the key meanwhile.
	var (
		found *store.IdempotencyRecord
		held  bool
	)
	txCtx, tx := c.s.WithLazyTx(ctx, func(ctx context.Context) error {
		rec, locked, err := c.s.LockIdempotencyKey(ctx, c.k)
		switch {
		case err != nil:
			return err
		case rec != nil:
			found = rec
			return errAnswered
		case !locked:
			held = true
			return errAnswered
		}
		return nil
	})
	defer tx.Rollback(ctx)
	resp, handlerErr := handler(txCtx, req)
	if handlerErr == nil {
		// In the handler's transaction; a handler that made no store
		// call claims the key here.
		err = c.s.InTx(txCtx, func(ctx context.Context) error {
			outcome, err := okRecord(c.fp, resp)
			if err != nil {
				return err
			}
			inserted, err := c.s.RecordIdempotencyKey(ctx, c.k, outcome, c.o.ttl)
			if err != nil {
				return err
			}
			if !inserted {
				return errRaced
			}
			return c.o.beforeCommit(ctx)
		})
		if err == nil {
			err = tx.Commit(ctx)
		}
	}
	switch {
	case found != nil:
		return c.replay(ctx, *found)
	case held:
		return c.inUse(ctx)
	case handlerErr != nil:
		// The failed statement aborted the transaction: the error is
		// recorded, if at all, after the rollback.
		tx.Rollback(ctx)
		return c.recordError(ctx, handlerErr)
	case errors.Is(err, errRaced):
		tx.Rollback(ctx)
		return c.replayRecorded(ctx)
	case err != nil:
		return nil, c.o.failure(ctx, "idempotent call", err)
	}
	return resp, nil
}

// inUse answers a call whose key another call holds.
func (c *call) inUse(ctx context.Context) (any, error) {
	retryafter.Set(ctx, inUseRetry)
	return nil, errInUse
}

// recordError records handlerErr as the outcome if its code is recorded,
// and returns it, or the outcome a concurrent call recorded first.
func (c *call) recordError(ctx context.Context, handlerErr error) (any, error) {
	st := status.Convert(handlerErr)
	if !recorded[st.Code()] {
		return nil, handlerErr
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(st.Proto())
	if err != nil {
		return nil, handlerErr
	}
	rec := store.IdempotencyRecord{Fingerprint: c.fp, Code: int32(st.Code()), Response: b}
	inserted, err := c.s.RecordIdempotencyKey(ctx, c.k, rec, c.o.ttl)
	if err != nil {
		// The answer stands: it changed nothing, so a retry that runs anew
		// is safe.
		c.o.log.WarnContext(ctx, "idempotency: outcome not recorded", "method", c.k.Method, "error", err)
		return nil, handlerErr
	}
	if !inserted {
		return c.replayRecorded(ctx)
	}
	return nil, handlerErr
}

// replayRecorded answers the record that a concurrent call committed.
func (c *call) replayRecorded(ctx context.Context) (any, error) {
	rec, err := c.s.GetIdempotencyKey(ctx, c.k)
	if err != nil {
		return nil, c.o.failure(ctx, "read idempotency record", err)
	}
	return c.replay(ctx, rec)
}

// replay answers rec: its outcome if the request is the same, else the
// reuse error.
func (c *call) replay(ctx context.Context, rec store.IdempotencyRecord) (any, error) {
	if !bytes.Equal(rec.Fingerprint, c.fp) {
		return nil, errReused
	}
	if rec.Code == int32(codes.OK) {
		var a anypb.Any
		if err := proto.Unmarshal(rec.Response, &a); err != nil {
			return nil, c.o.failure(ctx, "decode idempotency record", err)
		}
		resp, err := a.UnmarshalNew()
		if err != nil {
			return nil, c.o.failure(ctx, "decode idempotency record", err)
		}
		setReplayed(ctx)
		return resp, nil
	}
	var st spb.Status
	if err := proto.Unmarshal(rec.Response, &st); err != nil {
		return nil, c.o.failure(ctx, "decode idempotency record", err)
	}
	setReplayed(ctx)
	return nil, status.ErrorProto(&st)
}

func setReplayed(ctx context.Context) {
	// Fails only outside a server call (a direct test call); the outcome
	// stands without the marker.
	_ = grpc.SetHeader(ctx, metadata.Pairs(ReplayedKey, "true"))
}

// okRecord returns the record of a successful response. The response is
// kept as an Any, so the replay needs no table of response types.
func okRecord(fp []byte, resp any) (store.IdempotencyRecord, error) {
	m, ok := resp.(proto.Message)
	if !ok || resp == nil {
		return store.IdempotencyRecord{}, fmt.Errorf("response %T is not a protobuf message", resp)
	}
	deterministic := proto.MarshalOptions{Deterministic: true}
	var a anypb.Any
	if err := anypb.MarshalFrom(&a, m, deterministic); err != nil {
		return store.IdempotencyRecord{}, err
	}
	b, err := deterministic.Marshal(&a)
	if err != nil {
		return store.IdempotencyRecord{}, err
	}
	return store.IdempotencyRecord{Fingerprint: fp, Code: int32(codes.OK), Response: b}, nil
}

// failure answers err, an error of the database or of a record, as the
// handlers answer theirs (the error table of package reason), with no
// detail: the caller learns only whether to retry. A record that is not
// found or in conflict here is a bug: Internal.
func (o *options) failure(ctx context.Context, op string, err error) error {
	return reason.Answer(ctx, o.log, op, err, reason.Own{})
}

// fingerprint returns the SHA-256 of m in deterministic protobuf encoding,
// in which each field marked debug_redact (the password) stands as the
// HMAC-SHA256 under key of its own encoding. Every field counts, so a
// retry with another password is another request; a secret enters the
// record only through the keyed MAC, so a copy of the table cannot be
// searched for passwords with a fast hash.
//
// Deterministic encoding writes the fields of a message in field-number
// order whatever way the message was built, so the REST gateway (decoding
// JSON or CBOR) and gRPC (decoding protobuf) give the same bytes for the
// same logical request; proto3 leaves default values out, so an absent
// field and an empty one agree too. The MAC takes its field's place in a
// clone: the field is cleared and the MAC appended as an unknown field of
// its number and of wire type bytes, which for a string field (the
// password) is exactly the encoding the MAC would have as its value; the
// fields of one message go in number order.
func fingerprint(m proto.Message, key []byte) ([]byte, error) {
	if len(redacted(m.ProtoReflect())) > 0 {
		m = proto.Clone(m)
		secrets := redacted(m.ProtoReflect())
		slices.SortStableFunc(secrets, func(a, b redactedField) int {
			return cmp.Compare(a.field.Number(), b.field.Number())
		})
		for _, f := range secrets {
			mac, err := fieldMAC(key, f)
			if err != nil {
				return nil, err
			}
			f.msg.Clear(f.field)
			raw := protowire.AppendTag(f.msg.GetUnknown(), f.field.Number(), protowire.BytesType)
			f.msg.SetUnknown(protowire.AppendBytes(raw, mac))
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// withMetadata returns the fingerprint fp of a call's message extended by
// the call's values of the metadata keys: the SHA-256 of fp and, for each
// key the call carries, the key and its values, each length-prefixed so
// that no two lists of values read alike. A call that carries none of them
// keeps fp, so its records are those it had before the keys were named.
func withMetadata(ctx context.Context, fp []byte, keys []string) []byte {
	var b []byte
	for _, k := range keys {
		vs := metadata.ValueFromIncomingContext(ctx, k)
		if len(vs) == 0 {
			continue
		}
		if b == nil {
			b = append(b, fp...)
		}
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	if b == nil {
		return fp
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

// appendString appends s to b, prefixed by its length.
func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// fieldMAC returns the HMAC-SHA256 under key of f, encoded alone.
func fieldMAC(key []byte, f redactedField) ([]byte, error) {
	alone := f.msg.New()
	alone.Set(f.field, f.msg.Get(f.field))
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(alone.Interface())
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	return mac.Sum(nil), nil
}

// redactedField is a set field marked debug_redact.
type redactedField struct {
	msg   protoreflect.Message
	field protoreflect.FieldDescriptor
}

// redacted returns the set fields of m, and of the messages in it, that are
// marked debug_redact.
func redacted(m protoreflect.Message) []redactedField {
	var found []redactedField
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if o, ok := fd.Options().(*descriptorpb.FieldOptions); ok && o.GetDebugRedact() {
			found = append(found, redactedField{m, fd})
			return true
		}
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					found = append(found, redacted(mv.Message())...)
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := range v.List().Len() {
					found = append(found, redacted(v.List().Get(i).Message())...)
				}
			}
		case fd.Message() != nil:
			found = append(found, redacted(v.Message())...)
		}
		return true
	})
	return found
}
