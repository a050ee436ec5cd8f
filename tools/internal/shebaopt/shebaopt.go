// Package shebaopt reads the two options every RPC of sheba.v1 carries:
// its policy, option (sheba.v1.policy) (proto/sheba/v1/options.proto), and
// its REST route, option (google.api.http). protoc-gen-sheba writes them
// into the method table; openapiv3-sheba writes them into the OpenAPI 3.1
// document. Both read them here, so the two cannot read them differently.
package shebaopt

import (
	"fmt"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// PolicyExtension is the full name of the policy option.
const PolicyExtension = "sheba.v1.policy"

// Policy is one method's (sheba.v1.policy).
type Policy struct {
	Public, Idempotent, Database, ReadOnly bool
	Events                                 []string
}

// HTTPRule is one method's (google.api.http).
type HTTPRule struct {
	// Verb is GET, POST, PUT, DELETE or PATCH.
	Verb string
	// Path is the path template: /v1/accounts/{account_id}.
	Path string
	// Body and ResponseBody are the rule's body and response_body.
	Body, ResponseBody string
}

// ReadPolicy returns the policy of m; xd is the policy extension (found
// among the files of the protos: the tools link no Go type of sheba's own).
// A method without one is an error: every RPC says its policy.
func ReadPolicy(m protoreflect.MethodDescriptor, xd protoreflect.ExtensionDescriptor) (Policy, error) {
	opts, _ := m.Options().(*descriptorpb.MethodOptions)
	// The option arrives among the unknown fields (no Go type of it is
	// linked): its occurrences, concatenated, are one message (the wire
	// format merges them).
	var raw []byte
	found := false
	for b := opts.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Policy{}, protowire.ParseError(n)
		}
		b = b[n:]
		if num == xd.Number() && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return Policy{}, protowire.ParseError(n)
			}
			raw, found = append(raw, v...), true
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return Policy{}, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if !found {
		return Policy{}, fmt.Errorf("%s: no option (%s): every RPC says its policy (proto/sheba/v1/options.proto)", m.FullName(), PolicyExtension)
	}
	msg := dynamicpb.NewMessage(xd.Message())
	if err := proto.Unmarshal(raw, msg); err != nil {
		return Policy{}, fmt.Errorf("%s: option (%s): %w", m.FullName(), PolicyExtension, err)
	}
	field := func(name string) protoreflect.Value {
		return msg.Get(msg.Descriptor().Fields().ByName(protoreflect.Name(name)))
	}
	pol := Policy{
		Public:     field("public").Bool(),
		Idempotent: field("idempotent").Bool(),
		Database:   field("database").Bool(),
		ReadOnly:   field("read_only").Bool(),
	}
	events := field("events").List()
	for i := range events.Len() {
		pol.Events = append(pol.Events, events.Get(i).String())
	}
	return pol, nil
}

// ReadHTTP returns the REST route of m. A method without one, with
// additional bindings or with a custom verb is an error: one route per RPC.
func ReadHTTP(m protoreflect.MethodDescriptor) (HTTPRule, error) {
	opts, _ := m.Options().(*descriptorpb.MethodOptions)
	rule, _ := proto.GetExtension(opts, annotations.E_Http).(*annotations.HttpRule)
	if rule == nil || rule.GetPattern() == nil {
		return HTTPRule{}, fmt.Errorf("%s: no option (google.api.http): every RPC has a REST route", m.FullName())
	}
	if len(rule.GetAdditionalBindings()) > 0 {
		return HTTPRule{}, fmt.Errorf("%s: additional_bindings are not supported: one route per RPC", m.FullName())
	}
	r := HTTPRule{Body: rule.GetBody(), ResponseBody: rule.GetResponseBody()}
	switch pat := rule.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		r.Verb, r.Path = "GET", pat.Get
	case *annotations.HttpRule_Post:
		r.Verb, r.Path = "POST", pat.Post
	case *annotations.HttpRule_Put:
		r.Verb, r.Path = "PUT", pat.Put
	case *annotations.HttpRule_Delete:
		r.Verb, r.Path = "DELETE", pat.Delete
	case *annotations.HttpRule_Patch:
		r.Verb, r.Path = "PATCH", pat.Patch
	default:
		return HTTPRule{}, fmt.Errorf("%s: custom HTTP verbs are not supported", m.FullName())
	}
	return r, nil
}
