// Command openapiv3-sheba completes sheba's OpenAPI 3.1 document: it
// reads the document that grpc-gateway's protoc-gen-openapiv3 writes per
// proto file and openapiv3-merge merges, and adds what those leave out but
// the protos say:
//
//   - on every operation, from the method's option (sheba.v1.policy): the
//     API key it needs (security: none on a public method), the
//     Idempotency-Key header and its answers (Idempotent-Replayed, 409,
//     422) on exactly the idempotent ones, 401 on the keyed ones and 503
//     on those that need the database;
//   - the google.rpc.Status body of the error answers (400, 404, 429 and
//     the rest);
//   - each field's (buf.validate.field) rules as JSON Schema keywords
//     (pattern, minLength, maxLength, format, minimum, maximum, enum,
//     minItems, maxItems, uniqueItems, required), on the request's
//     parameters and body and on the schemas of messages;
//   - the title, version and description, and the texts of the API key and
//     the idempotency key, from protoc-gen-openapiv2's options file
//     (proto/sheba/v1/sheba.openapi.yaml), where they are written once for
//     both documents; and a server, the one that serves the document;
//   - a short summary (the comment's first sentence) beside the
//     description, where the plugin gives the whole comment as summary.
//
// No policy is written here or in an annotation: which methods are
// public, idempotent or need the database is read from the protos, as
// protoc-gen-sheba reads it into the method table (tools/internal/shebaopt).
//
// Usage (make generate runs it):
//
//	openapiv3-sheba -descriptors FILE -options FILE < merged.json > sheba.openapi.json
//
// -descriptors is the protos' FileDescriptorSet, imports included (buf
// build -o FILE).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "openapiv3-sheba:", err)
		os.Exit(1)
	}
}

func run(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("openapiv3-sheba", flag.ContinueOnError)
	descriptors := fs.String("descriptors", "", "the protos' FileDescriptorSet, imports included (buf build -o)")
	options := fs.String("options", "", "protoc-gen-openapiv2's options file (openapi_configuration)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *descriptors == "" || *options == "" || fs.NArg() > 0 {
		return errors.New("usage: openapiv3-sheba -descriptors FILE -options FILE < merged.json > document.json")
	}
	api, err := loadAPI(*descriptors)
	if err != nil {
		return err
	}
	t, err := loadTexts(*options)
	if err != nil {
		return err
	}
	doc, err := readObject(in)
	if err != nil {
		return fmt.Errorf("reading the merged document: %w", err)
	}
	if err := complete(doc, api, t); err != nil {
		return err
	}
	return doc.write(out)
}
