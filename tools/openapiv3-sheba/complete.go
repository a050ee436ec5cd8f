package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// statusRef is the error body: protoc-gen-openapiv3 adds the schema of
// google.rpc.Status for its default answer.
const statusRef = "#/components/schemas/google.rpc.Status"

// The security schemes: the API key in x-api-key or as a bearer token
// (docs/api.md#authentication); a keyed operation takes either.
const (
	apiKeyScheme = "ApiKey"
	bearerScheme = "Bearer"
)

// errorAnswer is an error answer of the API, a response of the
// components, and when an operation has it.
type errorAnswer struct {
	code, name, description string
	// header is the header the answer carries, "" for none.
	header string
	// of reports whether m answers it.
	of func(m *method) bool
}

// errorAnswers are the errors the method table says an operation can
// answer, besides the default answer the plugin gives every operation
// (docs/api.md#errors-by-route). The texts of 409 and 422 are the
// options file's.
func errorAnswers(t texts) []errorAnswer {
	return []errorAnswer{
		{"400", "BadRequest", "Invalid input (INVALID_ARGUMENT): a google.rpc.BadRequest names every field that breaks its rules.", "",
			func(m *method) bool { return m.desc.Input().Fields().Len() > 0 }},
		{"401", "Unauthenticated", "No API key, or an unknown one (UNAUTHENTICATED, reason API_KEY_MISSING or API_KEY_INVALID).", "",
			func(m *method) bool { return !m.policy.Public }},
		{"404", "NotFound", "What the path names does not exist, or belongs to another API key (NOT_FOUND).", "",
			func(m *method) bool { return strings.Contains(m.http.Path, "{") }},
		{"409", "Conflict", t.conflict, "Retry-After",
			func(m *method) bool { return m.policy.Idempotent }},
		{"422", "IdempotencyKeyReused", t.reused, "",
			func(m *method) bool { return m.policy.Idempotent }},
		{"429", "TooManyRequests", "A rate limit or the concurrency limit was reached (RESOURCE_EXHAUSTED, with google.rpc.RetryInfo).", "Retry-After",
			func(*method) bool { return true }},
		{"503", "Unavailable", "The database is down or unreachable (UNAVAILABLE, reason DATABASE_UNAVAILABLE, with google.rpc.RetryInfo).", "Retry-After",
			func(m *method) bool { return m.policy.Database }},
	}
}

// components are the parts of the document's components that operations
// refer to; each is added when an operation first does, so that none is
// left unused.
type components struct {
	doc, c *object
	defs   map[string]map[string]any // section, name: the definition
}

func newComponents(doc *object, t texts) *components {
	c := doc.obj("components")
	if c == nil {
		c = obj()
		doc.set("components", c)
	}
	comps := &components{doc: doc, c: c, defs: map[string]map[string]any{
		"responses": {},
		"headers": {
			"Retry-After": obj("description", "Whole seconds to wait before a retry, at least 1.",
				"schema", obj("type", "integer", "minimum", 1)),
			replayedHeader: obj("description", t.replayed, "schema", obj("type", "string", "enum", []string{"true"})),
		},
		"parameters": {
			idempotencyHeader: obj("name", idempotencyHeader, "in", "header", "description", t.idempotencyKey,
				"schema", obj("type", "string", "minLength", 1)),
		},
		"securitySchemes": {
			apiKeyScheme: obj("type", "apiKey", "in", "header", "name", "x-api-key", "description", t.apiKey),
			bearerScheme: obj("type", "http", "scheme", "bearer",
				"description", "The API key as a bearer token: `Authorization: Bearer <key>`."),
		},
	}}
	for _, e := range errorAnswers(t) {
		r := obj("description", e.description)
		if e.header != "" {
			r.set("headers", obj(e.header, obj("$ref", comps.ref("headers", e.header))))
		}
		r.set("content", obj("application/json", obj("schema", obj("$ref", statusRef))))
		comps.defs["responses"][e.name] = r
	}
	return comps
}

// ref adds the component name of section when it is not there yet, and
// returns its reference.
func (c *components) ref(section, name string) string {
	s := c.c.obj(section)
	if s == nil {
		s = obj()
		c.c.set(section, s)
	}
	if s.get(name) == nil {
		s.set(name, c.defs[section][name])
		slices.Sort(s.keys) // as the plugin orders its components
	}
	return "#/components/" + section + "/" + name
}

// complete adds to doc, the merged document of protoc-gen-openapiv3, what
// the protos say and the plugin leaves out (see the package comment).
func complete(doc *object, a *api, t texts) error {
	doc.set("info", obj("title", t.title, "version", t.version, "description", t.description))
	doc.setAfter("info", "servers", []any{obj("url", "/",
		"description", "The sheba that serves this document (GET /openapi.v3.json).")})
	comps := newComponents(doc, t)
	// The rules of every message that has a schema, requests' parts and
	// answers alike (a valid answer keeps them).
	if schemas := comps.c.obj("schemas"); schemas != nil {
		for _, name := range schemas.keys {
			if md := a.message(name); md != nil {
				applyMessage(schemas.obj(name), md)
			}
		}
	}

	byID := map[string]*method{}
	for _, m := range a.methods {
		byID[m.operationID()] = m
	}
	seen := map[string]bool{}
	paths := doc.obj("paths")
	if paths == nil {
		return fmt.Errorf("the document has no paths")
	}
	for _, path := range paths.keys {
		item := paths.obj(path)
		for _, verb := range item.keys {
			op := item.obj(verb)
			id := op.str("operationId")
			m := byID[id]
			if m == nil {
				return fmt.Errorf("%s %s: operation %q is no method of the protos", verb, path, id)
			}
			if seen[id] {
				return fmt.Errorf("%s: two operations (one route per RPC)", m.desc.FullName())
			}
			seen[id] = true
			if got, want := strings.ToUpper(verb)+" "+path, m.http.Verb+" "+m.http.Path; got != want {
				return fmt.Errorf("%s: operation %s, want the HTTP rule's %s", m.desc.FullName(), got, want)
			}
			if err := completeOperation(op, m, comps, t); err != nil {
				return fmt.Errorf("%s: %w", m.desc.FullName(), err)
			}
		}
	}
	for _, m := range a.methods {
		if !seen[m.operationID()] {
			return fmt.Errorf("%s: no operation in the document", m.desc.FullName())
		}
	}
	// The sections in the order of the OpenAPI specification.
	order := []string{"schemas", "responses", "parameters", "examples", "requestBodies", "headers", "securitySchemes", "links", "callbacks", "pathItems"}
	slices.SortStableFunc(comps.c.keys, func(a, b string) int {
		return cmp.Compare(slices.Index(order, a), slices.Index(order, b))
	})
	return nil
}

// completeOperation completes op, the operation of m.
func completeOperation(op *object, m *method, comps *components, t texts) error {
	// The plugin gives the whole comment as the summary, which renderers
	// show as a title: its first sentence is the summary, the comment the
	// description.
	if comment := op.str("summary"); comment != "" && op.get("description") == nil {
		op.set("summary", firstSentence(comment))
		op.setAfter("summary", "description", comment)
	}

	in := m.desc.Input()
	var params []any
	if p, ok := op.get("parameters").([]any); ok {
		params = p
	}
	for _, p := range params {
		p, _ := p.(*object)
		// Path parameters are named by the fields' proto names, query
		// parameters by their JSON names (grpc-gateway's reading).
		var fd protoreflect.FieldDescriptor
		switch p.str("in") {
		case "path":
			fd = fieldByPath(in, p.str("name"), false)
		case "query":
			fd = fieldByPath(in, p.str("name"), true)
		}
		if fd == nil {
			return fmt.Errorf("parameter %q: no field of %s", p.str("name"), in.FullName())
		}
		if applyField(p.obj("schema"), fd) && p.str("in") == "query" {
			p.setAfter("description", "required", true)
		}
	}
	if m.policy.Idempotent {
		params = append(params, obj("$ref", comps.ref("parameters", idempotencyHeader)))
	}
	if len(params) > 0 {
		op.setAfter("operationId", "parameters", params)
	}

	if body := op.obj("requestBody"); body != nil {
		schema := body.obj("content").obj("application/json").obj("schema")
		required := false
		switch {
		case m.http.Body == "*":
			// The request's fields that the path does not hold, inline.
			required = len(applyMessage(schema, in)) > 0
		case m.http.Body != "":
			fd := in.Fields().ByName(protoreflect.Name(m.http.Body))
			if fd == nil {
				return fmt.Errorf("body %q: no field of %s", m.http.Body, in.FullName())
			}
			// The field's message has its schema among the components,
			// completed there; what is said here is whether it must come.
			required = applyField(obj(), fd)
		}
		// The plugin says every body is required; grpc-gateway reads an
		// empty one as an empty message, which is valid unless a field
		// must be present (CancelSubscription takes an empty body).
		body.set("required", required)
	}

	responses := op.obj("responses")
	if m.policy.Idempotent {
		ok := responses.obj("200")
		if ok == nil {
			return fmt.Errorf("no 200 answer")
		}
		ok.setAfter("description", "headers", obj(replayedHeader, obj("$ref", comps.ref("headers", replayedHeader))))
	}
	for _, e := range errorAnswers(t) {
		if e.of(m) {
			responses.set(e.code, obj("$ref", comps.ref("responses", e.name)))
		}
	}
	// The plugin's order: default first, then by code.
	slices.SortStableFunc(responses.keys, func(a, b string) int {
		if a == "default" || b == "default" {
			return strings.Compare(b, a) // "default" is after every code
		}
		return strings.Compare(a, b)
	})

	security := []any{}
	if !m.policy.Public {
		security = []any{
			obj(apiKeyScheme, []any{}),
			obj(bearerScheme, []any{}),
		}
		comps.ref("securitySchemes", apiKeyScheme)
		comps.ref("securitySchemes", bearerScheme)
	}
	op.set("security", security)
	return nil
}

// applyMessage adds to schema, the schema of an object of md's fields
// (those it lists in its properties), the keywords of their rules, and
// the list of those that must be present as required, which it returns.
func applyMessage(schema *object, md protoreflect.MessageDescriptor) []any {
	props := schema.obj("properties")
	if props == nil {
		return nil
	}
	var required []any
	for i := range md.Fields().Len() {
		fd := md.Fields().Get(i)
		p := props.obj(fd.JSONName())
		if p == nil {
			continue
		}
		if applyField(p, fd) {
			required = append(required, fd.JSONName())
		}
	}
	if len(required) > 0 {
		schema.setAfter("properties", "required", required)
	}
	return required
}

// fieldByPath returns the field of md that path names (a.b: field b of
// the message of field a), by JSON names or proto names, or nil.
func fieldByPath(md protoreflect.MessageDescriptor, path string, jsonNames bool) protoreflect.FieldDescriptor {
	var fd protoreflect.FieldDescriptor
	for i, name := range strings.Split(path, ".") {
		if i > 0 {
			if fd.Message() == nil {
				return nil
			}
			md = fd.Message()
		}
		if jsonNames {
			fd = md.Fields().ByJSONName(name)
		} else {
			fd = md.Fields().ByName(protoreflect.Name(name))
		}
		if fd == nil {
			return nil
		}
	}
	return fd
}

// firstSentence returns the text up to the end of its first sentence (a
// period before a space or the end), on one line.
func firstSentence(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	if i := strings.Index(text, ". "); i >= 0 {
		return text[:i+1]
	}
	return text
}
