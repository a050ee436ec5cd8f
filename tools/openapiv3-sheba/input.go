package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/shebasvc/sheba/tools/internal/shebaopt"
)

// method is one RPC as the protos describe it.
type method struct {
	desc   protoreflect.MethodDescriptor
	http   shebaopt.HTTPRule
	policy shebaopt.Policy
}

// operationID is the method's operationId in protoc-gen-openapiv3's
// documents: Service_Method.
func (m *method) operationID() string {
	return string(m.desc.Parent().Name()) + "_" + string(m.desc.Name())
}

// api is what the protos say.
type api struct {
	files   *protoregistry.Files
	methods []*method // in the order of the protos
}

// loadAPI reads the FileDescriptorSet at path: the rules of buf.validate
// and the HTTP rules are read with their Go types, the policy as
// protoc-gen-sheba reads it.
func loadAPI(path string) (*api, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	d, err := files.FindDescriptorByName(shebaopt.PolicyExtension)
	if err != nil {
		return nil, fmt.Errorf("%s: no extension %s: import sheba/v1/options.proto", path, shebaopt.PolicyExtension)
	}
	xd := d.(protoreflect.ExtensionDescriptor)
	a := &api{files: files}
	var errs []error
	for _, fd := range set.GetFile() {
		f, _ := files.FindFileByPath(fd.GetName())
		for i := range f.Services().Len() {
			s := f.Services().Get(i)
			for j := range s.Methods().Len() {
				md := s.Methods().Get(j)
				pol, err := shebaopt.ReadPolicy(md, xd)
				errs = append(errs, err)
				rule, err := shebaopt.ReadHTTP(md)
				errs = append(errs, err)
				a.methods = append(a.methods, &method{desc: md, http: rule, policy: pol})
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(a.methods) == 0 {
		return nil, fmt.Errorf("%s: no services", path)
	}
	return a, nil
}

// message returns the message of full name name, or nil.
func (a *api) message(name string) protoreflect.MessageDescriptor {
	d, _ := a.files.FindDescriptorByName(protoreflect.FullName(name))
	md, _ := d.(protoreflect.MessageDescriptor)
	return md
}

// texts are the words of the document that the options file of
// protoc-gen-openapiv2 holds, written there once for both documents.
type texts struct {
	title, version, description string
	// apiKey describes the API key.
	apiKey string
	// idempotencyKey describes the Idempotency-Key header, replayed the
	// Idempotent-Replayed one, conflict and reused the 409 and 422 of an
	// idempotent method.
	idempotencyKey, replayed, conflict, reused string
}

// v2Options is the part of protoc-gen-openapiv2's options file
// (openapi_configuration) that texts come from.
type v2Options struct {
	OpenAPIOptions struct {
		File []struct {
			Option struct {
				Info struct {
					Title, Version, Description string
				}
				SecurityDefinitions struct {
					Security map[string]struct {
						Description string
					}
				} `yaml:"securityDefinitions"`
			}
		}
		Method []struct {
			Option struct {
				Parameters struct {
					Headers []struct {
						Name, Description string
					}
				}
				Responses map[string]struct {
					Description string
					Headers     map[string]struct {
						Description string
					}
				}
			}
		}
	} `yaml:"openapiOptions"`
}

// idempotencyHeader is the request header of an idempotency key.
const idempotencyHeader = "Idempotency-Key"

// replayedHeader is the answer's header that says it was replayed.
const replayedHeader = "Idempotent-Replayed"

// loadTexts reads the options file at path: the info of its first file
// option, its ApiKey scheme, and the texts of the first method option that
// has an Idempotency-Key header (the methods share them).
func loadTexts(path string) (texts, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return texts{}, err
	}
	var o v2Options
	if err := yaml.Unmarshal(b, &o); err != nil {
		return texts{}, fmt.Errorf("%s: %w", path, err)
	}
	var t texts
	if files := o.OpenAPIOptions.File; len(files) > 0 {
		info := files[0].Option.Info
		t.title, t.version, t.description = info.Title, info.Version, info.Description
		t.apiKey = files[0].Option.SecurityDefinitions.Security["ApiKey"].Description
	}
	for _, m := range o.OpenAPIOptions.Method {
		for _, h := range m.Option.Parameters.Headers {
			if h.Name != idempotencyHeader || t.idempotencyKey != "" {
				continue
			}
			r := m.Option.Responses
			t.idempotencyKey = h.Description
			t.replayed = r["200"].Headers[replayedHeader].Description
			t.conflict, t.reused = r["409"].Description, r["422"].Description
		}
	}
	var missing []string
	for _, f := range []struct{ name, text string }{
		{"info.title", t.title}, {"info.version", t.version}, {"info.description", t.description},
		{"the ApiKey security definition's description", t.apiKey},
		{"an Idempotency-Key header's description", t.idempotencyKey},
		{"its 200's Idempotent-Replayed header's description", t.replayed},
		{"its 409's description", t.conflict}, {"its 422's description", t.reused},
	} {
		if strings.TrimSpace(f.text) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return texts{}, fmt.Errorf("%s: no %s", path, strings.Join(missing, ", "))
	}
	return t, nil
}
