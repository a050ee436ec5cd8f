package config

import (
	"fmt"
	"slices"
	"strings"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// The keys that name methods (auth.public, hook.methods) name those of the
// method table, which the protos generate (gen/sheba/v1/methods.sheba.go);
// auth.public's default is the table's public methods (option
// (sheba.v1.policy).public).

// publicMethods returns the full names of the methods whose policy is
// public, in the table's order.
func publicMethods() []string {
	var public []string
	for _, m := range shebav1.Methods {
		if m.Policy.Public {
			public = append(public, m.FullName)
		}
	}
	return public
}

// isMethod reports whether full is the full name of a method of the table.
func isMethod(full string) bool { return shebav1.Method(full) != nil }

// checkMethods checks that every entry of the list key names a method of
// the table: a name that is none would leave the method keyed (auth.public)
// or out of the hook's calls (hook.methods) without a word. example shows
// the form.
func checkMethods(key string, methods []string, example string) *Error {
	for i, m := range methods {
		k := fmt.Sprintf("%s[%d]", key, i)
		if !validMethod(m) {
			return bad(k, "must be a full gRPC method name such as %q, got %q", example, m)
		}
		if !isMethod(m) {
			return bad(k, "%q is not a method of sheba (docs/api.md)", m)
		}
	}
	return nil
}

// policyWarning returns the warning that names every method whose policy
// public differs from the table's: the methods it makes public that the
// protos keep keyed, and those it keeps keyed that the protos make public.
// "" when it says what the table says.
func policyWarning(public []string) string {
	var made, kept []string
	for _, m := range shebav1.Methods {
		switch configured := slices.Contains(public, m.FullName); {
		case configured && !m.Policy.Public:
			made = append(made, m.FullName)
		case !configured && m.Policy.Public:
			kept = append(kept, m.FullName)
		}
	}
	if len(made) == 0 && len(kept) == 0 {
		return ""
	}
	var parts []string
	if len(made) > 0 {
		parts = append(parts, "makes public "+strings.Join(made, ", ")+", which need a key by the API's policy")
	}
	if len(kept) > 0 {
		parts = append(parts, "makes "+strings.Join(kept, ", ")+" need a key, public by the API's policy")
	}
	return "auth.public " + strings.Join(parts, "; and ") + " (docs/api.md#authentication)"
}
