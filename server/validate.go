package server

import (
	"context"
	"fmt"
	"regexp"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// ValidateRequest checks req, the request message of a sheba.v1 method
// called with ctx, by the input rules its handler applies before any lookup
// (docs/api.md#validation-rules), and returns the handler's own
// InvalidArgument error for it, or nil. The rules are the very functions
// the handlers call. A message of a type no method takes is an error too
// (not a status).
//
// Some rules need more than req, and are applied as the handler applies
// them: a page token is checked under the services' paging key
// (Options.PageTokenKey), and a ListWebhookEndpoints token against the
// caller in ctx (callinfo), to whom it is bound. A WebhookService handler
// answers a call without a caller Unauthenticated before it validates
// anything: for such a call ValidateRequest answers nil and leaves that to
// the handler.
//
// What a handler checks only after a lookup is not applied, and is still
// the handler's to answer when it runs: for CreateWebhookEndpoint, whether
// the URL's target is allowed (unless webhooks.allow_private_networks; it
// may take a DNS lookup; reason WEBHOOK_URL_NOT_ALLOWED) and whether the
// caller registered the URL already. Login's throttle is no input rule.
func (s *Services) ValidateRequest(ctx context.Context, req proto.Message) error {
	switch req := req.(type) {
	case *shebav1.PingRequest:
		return nil
	case *shebav1.CreateAccountRequest:
		return checkCredentials(req)
	case *shebav1.LoginRequest:
		return checkCredentials(req)
	case *shebav1.GetAccountRequest:
		return errOf(checkAccountID(req))
	case *shebav1.CreateSubscriptionRequest:
		return errOf(checkCreateSubscription(req))
	case *shebav1.GetSubscriptionRequest:
		return errOf(checkAccountID(req))
	case *shebav1.CancelSubscriptionRequest:
		return errOf(checkAccountID(req))
	case *shebav1.ListSubscriptionsRequest:
		return errOf(checkListSubscriptions(s.subscription.tokens, req))
	case *shebav1.CreateWebhookEndpointRequest:
		return ofCaller(ctx, func(string) error { return errOf(checkCreateWebhookEndpoint(req)) })
	case *shebav1.GetWebhookEndpointRequest:
		return ofCaller(ctx, func(string) error { return errOf(checkEndpointID(req)) })
	case *shebav1.ListWebhookEndpointsRequest:
		return ofCaller(ctx, func(who string) error { return errOf(checkListWebhookEndpoints(s.webhook.tokens, who, req)) })
	case *shebav1.DeleteWebhookEndpointRequest:
		return ofCaller(ctx, func(string) error { return errOf(checkEndpointID(req)) })
	case *shebav1.RotateWebhookSecretRequest:
		return ofCaller(ctx, func(string) error { return errOf(checkEndpointID(req)) })
	case *shebav1.ListWebhookDeliveriesRequest:
		return ofCaller(ctx, func(string) error {
			_, _, err := checkListWebhookDeliveries(s.webhook.tokens, req)
			return err
		})
	default:
		return fmt.Errorf("server: %T is the request of no sheba.v1 method", req)
	}
}

// errOf returns the error of a check, for a caller that needs only that.
func errOf[T any](_ T, err error) error { return err }

// ofCaller returns check's answer for the caller of ctx, the owner of
// webhook endpoints, or nil without one, whom the handler answers
// errNoCaller before validating anything.
func ofCaller(ctx context.Context, check func(who string) error) error {
	who, err := owner(ctx)
	if err != nil {
		return nil
	}
	return check(who)
}

// The input rules of docs/api.md.
var (
	usernameRE = regexp.MustCompile(`^[a-z0-9._-]{3,64}$`)
	planRE     = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)
)

const (
	minPasswordBytes = 8
	maxPasswordBytes = 256

	defaultPageSize = 50
	maxPageSize     = 1000
)

// maxViolations is the most field violations an answer lists: a request
// with a list of many bad entries gets the first ones, so that no error
// answer grows with what was sent (docs/api.md#errors).
const maxViolations = 8

// violations collects the field violations of one request.
type violations []*errdetails.BadRequest_FieldViolation

// add records a violation, unless maxViolations are recorded already. A
// description that quotes the request is made valid UTF-8, so the answer
// can always be marshaled; what it quotes goes through reason.Quote.
func (v *violations) add(field, description string) {
	if len(*v) >= maxViolations {
		return
	}
	*v = append(*v, &errdetails.BadRequest_FieldViolation{Field: field, Description: reason.ValidUTF8(description)})
}

// err returns nil when there are no violations, else an InvalidArgument status
// whose message names the first one and whose details are the ErrorInfo
// (INVALID_ARGUMENT) and a BadRequest listing them all.
func (v violations) err() error { return v.errAs(reason.InvalidArgument) }

// errAs is err with reason r in the ErrorInfo, for a rule that has a
// reason of its own (docs/api.md#reasons).
func (v violations) errAs(r string) error {
	if len(v) == 0 {
		return nil
	}
	msg := fmt.Sprintf("invalid %s: %s", v[0].Field, v[0].Description)
	return reason.Error(codes.InvalidArgument, r, msg, &errdetails.BadRequest{FieldViolations: v})
}

func (v *violations) checkUsername(field, username string) {
	if !usernameRE.MatchString(username) {
		v.add(field, "must be 3 to 64 characters of a-z, 0-9, '.', '_' and '-'")
	}
}

func (v *violations) checkPassword(field, password string) {
	if n := len(password); n < minPasswordBytes || n > maxPasswordBytes {
		v.add(field, fmt.Sprintf("must be %d to %d bytes, got %d", minPasswordBytes, maxPasswordBytes, n))
	}
}

func (v *violations) checkPlan(field, plan string) {
	if !planRE.MatchString(plan) {
		v.add(field, "must be 1 to 64 characters of a-z, 0-9 and '-'")
	}
}

// checkID accepts only the canonical 36-character UUID form and returns it in
// lower case, the form the database answers with.
func (v *violations) checkID(field, id string) string {
	if len(id) != 36 {
		v.add(field, "must be a UUID")
		return id
	}
	u, err := uuid.Parse(id)
	if err != nil {
		v.add(field, "must be a UUID")
		return id
	}
	return u.String()
}

// checkOnlyID is the validation of a request whose one rule is that field
// is a UUID; it returns the id in lower case.
func checkOnlyID(field, raw string) (string, error) {
	var v violations
	id := v.checkID(field, raw)
	return id, v.err()
}

// checkPageSize applies the page_size rules of docs/api.md.
func (v *violations) checkPageSize(field string, size int32) int {
	switch {
	case size < 0:
		v.add(field, "must not be negative")
		return 0
	case size == 0:
		return defaultPageSize
	case size > maxPageSize:
		return maxPageSize
	default:
		return int(size)
	}
}
