package gateway_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shebasvc/sheba/gen/openapiv2"
	"github.com/shebasvc/sheba/gen/openapiv3"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// openAPIDoc is what the tests read of an OpenAPI document, version 2 or
// 3.1 alike.
type openAPIDoc struct {
	Security   []map[string][]string           `json:"security"`
	Paths      map[string]map[string]openAPIOp `json:"paths"`
	Components struct {
		Parameters      map[string]openAPIParam `json:"parameters"`
		SecuritySchemes map[string]struct {
			Type   string `json:"type"`
			In     string `json:"in"`
			Name   string `json:"name"`
			Scheme string `json:"scheme"`
		} `json:"securitySchemes"`
	} `json:"components"`
}

type openAPIOp struct {
	OperationID string                 `json:"operationId"`
	Security    *[]map[string][]string `json:"security"` // nil: absent
	Parameters  []openAPIParam         `json:"parameters"`
	RequestBody *json.RawMessage       `json:"requestBody"`
	Responses   map[string]struct {
		Ref     string                     `json:"$ref"`
		Headers map[string]json.RawMessage `json:"headers"`
	} `json:"responses"`
}

type openAPIParam struct {
	Ref  string `json:"$ref"`
	Name string `json:"name"`
	In   string `json:"in"`
}

// tableOps returns every method of the method table by the operationId
// both plugins give it: Service_Method.
func tableOps() map[string]shebav1.MethodTable {
	ops := map[string]shebav1.MethodTable{}
	for _, s := range shebav1.Services {
		svc := s.Name[strings.LastIndexByte(s.Name, '.')+1:]
		for _, m := range s.Methods {
			ops[svc+"_"+m.Name] = m
		}
	}
	return ops
}

func readOpenAPI(t *testing.T, doc string) openAPIDoc {
	t.Helper()
	var d openAPIDoc
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatalf("document is not JSON: %v", err)
	}
	return d
}

// pathVars matches the variables of a path template, whatever their names:
// version 2 names them by JSON names ({accountId}), version 3.1 and the
// HTTP rules by proto names ({account_id}).
var pathVars = regexp.MustCompile(`\{[^}]*\}`)

// routedOp is an operation of a document and its method in the table.
type routedOp struct {
	id     string
	op     openAPIOp
	method shebav1.MethodTable
}

// checkRoutes checks that the operations of d are the methods of the
// method table, each at its HTTP rule's verb and path, and returns those
// of the table that d has.
func checkRoutes(t *testing.T, d openAPIDoc, samePathNames bool) []routedOp {
	t.Helper()
	table := tableOps()
	ops := map[string]openAPIOp{}
	var got, want []string
	for path, byVerb := range d.Paths {
		for verb, op := range byVerb {
			ops[op.OperationID] = op
			if !samePathNames {
				path = pathVars.ReplaceAllString(path, "{}")
			}
			got = append(got, op.OperationID+" "+strings.ToUpper(verb)+" "+path)
		}
	}
	for id, m := range table {
		path := m.HTTP.Path
		if !samePathNames {
			path = pathVars.ReplaceAllString(path, "{}")
		}
		want = append(want, id+" "+m.HTTP.Method+" "+path)
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("operations, as the method table's HTTP rules (-table +document):\n%s", diff)
	}
	var routed []routedOp
	for id, m := range table {
		if op, ok := ops[id]; ok {
			routed = append(routed, routedOp{id, op, m})
		}
	}
	return routed
}

// keyed reports whether an operation of d needs an API key, by its own
// security or, when it has none, the document's.
func keyed(d openAPIDoc, op openAPIOp) bool {
	sec := d.Security
	if op.Security != nil {
		sec = *op.Security
	}
	// Any requirement met lets a call in; an empty one needs nothing.
	return len(sec) > 0 && !slices.ContainsFunc(sec, func(r map[string][]string) bool { return len(r) == 0 })
}

// headerParams returns the names of op's header parameters, resolving
// references to the components of d.
func headerParams(d openAPIDoc, op openAPIOp) []string {
	var names []string
	for _, p := range op.Parameters {
		if ref, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
			p = d.Components.Parameters[ref]
		}
		if p.In == "header" {
			names = append(names, p.Name)
		}
	}
	return names
}

// TestOpenAPIv3FollowsTheTable checks the OpenAPI 3.1 document against the
// method table: its operations are the table's HTTP rules, its keyed
// operations the methods that are not public (an API key in x-api-key or
// as a bearer token), its operations with an Idempotency-Key and its
// answers (Idempotent-Replayed, 409, 422) the idempotent ones, its 503s
// those that need the database.
func TestOpenAPIv3FollowsTheTable(t *testing.T) {
	d := readOpenAPI(t, openapiv3.Document)
	for _, r := range checkRoutes(t, d, true) {
		id, op, pol := r.id, r.op, r.method.Policy
		if op.Security == nil {
			t.Errorf("%s: no security of its own: every operation says whether it needs a key", id)
		}
		checkKeyAndIdempotency(t, d, id, op, pol, "")
		if op.Security != nil {
			for _, req := range *op.Security {
				for name := range req {
					s, ok := d.Components.SecuritySchemes[name]
					switch {
					case !ok:
						t.Errorf("%s: security scheme %q is not defined", id, name)
					case !(s.Type == "apiKey" && s.In == "header" && s.Name == "x-api-key") && !(s.Type == "http" && s.Scheme == "bearer"):
						t.Errorf("%s: security scheme %q is neither x-api-key nor a bearer token: %+v", id, name, s)
					}
				}
			}
		}
		if _, ok := op.Responses["401"]; ok != !pol.Public {
			t.Errorf("%s: 401 answer: %v, want %v (public: %v)", id, ok, !pol.Public, pol.Public)
		}
		if _, ok := op.Responses["503"]; ok != pol.Database {
			t.Errorf("%s: 503 answer: %v, want %v (database)", id, ok, pol.Database)
		}
		if got, want := op.RequestBody != nil, r.method.HTTP.Body != ""; got != want {
			t.Errorf("%s: request body: %v, want %v (body %q)", id, got, want, r.method.HTTP.Body)
		}
	}
}

// TestOpenAPIv2FollowsTheTable holds the hand annotations of the OpenAPI 2
// document (proto/sheba/v1/sheba.openapi.yaml: no key for Ping, the
// Idempotency-Key header and its answers on the idempotent methods) to
// the method table, which says the same from the protos: /openapi.json
// stays as its clients know it, and cannot drift from the policies.
func TestOpenAPIv2FollowsTheTable(t *testing.T) {
	d := readOpenAPI(t, openapiv2.Document)
	for _, r := range checkRoutes(t, d, false) {
		checkKeyAndIdempotency(t, d, r.id, r.op, r.method.Policy, ": see proto/sheba/v1/sheba.openapi.yaml")
	}
}

// checkKeyAndIdempotency checks that op, the operation id of d, needs an
// API key unless pol says it is public, and has the Idempotency-Key
// parameter, the Idempotent-Replayed header of its 200 and the 409 and 422
// answers if and only if pol says it is idempotent. hint ends each error.
func checkKeyAndIdempotency(t *testing.T, d openAPIDoc, id string, op openAPIOp, pol shebav1.MethodPolicyTable, hint string) {
	t.Helper()
	if got := keyed(d, op); got != !pol.Public {
		t.Errorf("%s: needs a key: %v, want %v (public: %v)%s", id, got, !pol.Public, pol.Public, hint)
	}
	if got := slices.Contains(headerParams(d, op), "Idempotency-Key"); got != pol.Idempotent {
		t.Errorf("%s: Idempotency-Key parameter: %v, want %v (idempotent)%s", id, got, pol.Idempotent, hint)
	}
	_, replayed := op.Responses["200"].Headers["Idempotent-Replayed"]
	_, conflict := op.Responses["409"]
	_, reused := op.Responses["422"]
	if replayed != pol.Idempotent || conflict != pol.Idempotent || reused != pol.Idempotent {
		t.Errorf("%s: Idempotent-Replayed %v, 409 %v, 422 %v; want each %v (idempotent)%s", id, replayed, conflict, reused, pol.Idempotent, hint)
	}
}
