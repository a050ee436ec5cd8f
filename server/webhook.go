package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks/ssrf"
)

// The event types of docs/webhooks.md that the handlers publish; each is
// among the events of its method's policy (EventTypes).
const (
	EventAccountCreated       = "account.created"
	EventSubscriptionCreated  = "subscription.created"
	EventSubscriptionCanceled = "subscription.canceled"
)

// EventTypes lists the event types an endpoint may ask for: those the
// methods emit (option (sheba.v1.policy).events), each once, in the order
// of the method table; CreateWebhookEndpointRequest.event_types's
// constraint allows exactly these (TestEventTypesConstraint).
func EventTypes() []string {
	var types []string
	for _, m := range shebav1.Methods {
		for _, e := range m.Policy.Events {
			if !slices.Contains(types, e) {
				types = append(types, e)
			}
		}
	}
	return types
}

// Publisher announces a change to the webhook endpoints that receive its
// event type (docs/webhooks.md). Publish must write in the transaction that
// ctx carries (store.InTx), so the event commits with the change or not at
// all; resource is what the REST API answers for the changed resource.
type Publisher interface {
	Publish(ctx context.Context, eventType string, resource proto.Message) error
}

// noEvents is the Publisher of services built without webhooks.
type noEvents struct{}

func (noEvents) Publish(context.Context, string, proto.Message) error { return nil }

// webhookServer implements shebav1.WebhookServiceServer.
type webhookServer struct {
	shebav1.UnimplementedWebhookServiceServer
	store        *store.Store
	errs         errorMapper
	allowPrivate bool
	tokens       pageTokens
	resolver     *net.Resolver
	maxEndpoints int
	// errLimit answers a create beyond maxEndpoints.
	errLimit error
	// secretOverlap is how long the secret a rotation replaces still
	// signs.
	secretOverlap time.Duration
}

// newWebhookServer returns the service as opts configure it.
func newWebhookServer(st *store.Store, errs errorMapper, tokens pageTokens, opts Options) *webhookServer {
	maxEndpoints := opts.MaxWebhookEndpoints
	if maxEndpoints <= 0 {
		maxEndpoints = math.MaxInt32
	}
	return &webhookServer{
		store:        st,
		errs:         errs,
		tokens:       tokens,
		allowPrivate: opts.AllowPrivateWebhooks,
		resolver:     opts.WebhookResolver,
		maxEndpoints: maxEndpoints,
		errLimit: reason.Error(codes.FailedPrecondition, reason.WebhookEndpointLimit,
			fmt.Sprintf("this API key already holds the most webhook endpoints allowed (%d): delete one to register another", maxEndpoints)),
		secretOverlap: opts.WebhookSecretOverlap,
	}
}

var errEndpointNotFound = reason.OutcomeNotFound.Error("webhook endpoint not found")

// errNoCaller answers a call that reached the service without an API key
// (only possible if the operator made the methods public): endpoints belong
// to a key.
var errNoCaller = status.Error(codes.Unauthenticated, "webhook endpoints belong to an API key: send one")

// owner returns the id of the caller's API key, which owns its endpoints.
func owner(ctx context.Context) (string, error) {
	if info := callinfo.FromContext(ctx); info != nil && info.CallerID != "" {
		return info.CallerID, nil
	}
	return "", errNoCaller
}

// ownedEndpoint returns the caller's id and the endpoint id req names, in
// lower case: the first step of a call on one endpoint.
func ownedEndpoint(ctx context.Context, req endpointIDRequest) (who, id string, err error) {
	if who, err = owner(ctx); err != nil {
		return "", "", err
	}
	return who, endpointID(req), nil
}

// endpointIDRequest is a request whose one field is an endpoint id:
// GetWebhookEndpoint's, DeleteWebhookEndpoint's, RotateWebhookSecret's and
// ListWebhookDeliveries'.
type endpointIDRequest interface {
	GetEndpointId() string
}

// endpointID returns the endpoint id of req in lower case, as accountID
// does an account's.
func endpointID(req endpointIDRequest) string { return strings.ToLower(req.GetEndpointId()) }

// CreateWebhookEndpoint registers an endpoint. Codes: InvalidArgument (a
// URL Go's parser refuses or the caller registered already; reason
// WEBHOOK_URL_NOT_ALLOWED for a target that is not public),
// FailedPrecondition (the key holds maxEndpoints), Unauthenticated.
func (s *webhookServer) CreateWebhookEndpoint(ctx context.Context, req *shebav1.CreateWebhookEndpointRequest) (*shebav1.CreateWebhookEndpointResponse, error) {
	who, err := owner(ctx)
	if err != nil {
		return nil, err
	}
	// The URL's form is its constraint's (scheme, host, no user or
	// fragment); what else Go's parser refuses (a bad escape, a bad port)
	// is said here, as the target needs the URL parsed anyway, and may
	// take a DNS lookup.
	var v reason.Violations
	u, err := ssrf.ParseURL(req.GetUrl())
	if err != nil {
		v.Add("url", err.Error())
		return nil, v.Err()
	}
	if !s.allowPrivate {
		err := ssrf.CheckTarget(ctx, u, s.resolver)
		if errors.Is(err, ssrf.ErrNotAllowed) {
			v.Add("url", err.Error())
			return nil, v.ErrAs(reason.WebhookURLNotAllowed)
		}
		if err != nil {
			return nil, s.errs.toStatus(ctx, "check webhook target", err, reason.Own{})
		}
	}
	secret, err := newWebhookSecret()
	if err != nil {
		return nil, s.errs.toStatus(ctx, "create webhook endpoint", err, reason.Own{})
	}
	e, err := s.store.CreateWebhookEndpoint(ctx, store.WebhookEndpoint{
		Owner:       who,
		URL:         req.GetUrl(),
		EventTypes:  req.GetEventTypes(),
		Description: req.GetDescription(),
		Secret:      secret,
	}, s.maxEndpoints)
	switch {
	case errors.Is(err, store.ErrConflict):
		v.Add("url", "an endpoint with this URL is already registered")
		return nil, v.Err()
	case errors.Is(err, store.ErrLimit):
		return nil, s.errLimit
	case err != nil:
		return nil, s.errs.toStatus(ctx, "create webhook endpoint", err, reason.Own{})
	}
	p := endpointToProto(e)
	p.Secret = &e.Secret
	return &shebav1.CreateWebhookEndpointResponse{WebhookEndpoint: p}, nil
}

// GetWebhookEndpoint returns one endpoint of the caller. Codes: NotFound,
// Unauthenticated.
func (s *webhookServer) GetWebhookEndpoint(ctx context.Context, req *shebav1.GetWebhookEndpointRequest) (*shebav1.GetWebhookEndpointResponse, error) {
	who, id, err := ownedEndpoint(ctx, req)
	if err != nil {
		return nil, err
	}
	e, err := s.store.GetWebhookEndpoint(ctx, who, id)
	if err != nil {
		return nil, s.errs.toStatus(ctx, "get webhook endpoint", err, reason.Own{NotFound: errEndpointNotFound})
	}
	return &shebav1.GetWebhookEndpointResponse{WebhookEndpoint: endpointToProto(e)}, nil
}

// ListWebhookEndpoints returns one keyset page of the caller's endpoints.
// Codes: InvalidArgument (a page_token not issued to the caller),
// Unauthenticated.
func (s *webhookServer) ListWebhookEndpoints(ctx context.Context, req *shebav1.ListWebhookEndpointsRequest) (*shebav1.ListWebhookEndpointsResponse, error) {
	who, err := owner(ctx)
	if err != nil {
		return nil, err
	}
	// The page token is bound to the owner, as a subscription token is to
	// its plan filter.
	pg, err := s.tokens.page(req.GetPageSize(), req.GetPageToken(), "webhookEndpoints/"+who)
	if err != nil {
		return nil, err
	}
	es, err := s.store.ListWebhookEndpoints(ctx, who, pg.size+1, pg.after)
	if err != nil {
		return nil, s.errs.toStatus(ctx, "list webhook endpoints", err, reason.Own{})
	}
	resp := &shebav1.ListWebhookEndpointsResponse{}
	es, resp.NextPageToken = nextPage(s.tokens, es, pg, func(e store.WebhookEndpoint) store.Cursor {
		return store.Cursor{CreateTime: e.CreateTime, ID: e.ID}
	})
	resp.WebhookEndpoints = toProtos(es, endpointToProto)
	return resp, nil
}

// DeleteWebhookEndpoint deletes an endpoint of the caller and its
// deliveries. Codes: NotFound, Unauthenticated.
func (s *webhookServer) DeleteWebhookEndpoint(ctx context.Context, req *shebav1.DeleteWebhookEndpointRequest) (*shebav1.DeleteWebhookEndpointResponse, error) {
	who, id, err := ownedEndpoint(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := s.store.DeleteWebhookEndpoint(ctx, who, id); err != nil {
		return nil, s.errs.toStatus(ctx, "delete webhook endpoint", err, reason.Own{NotFound: errEndpointNotFound})
	}
	return &shebav1.DeleteWebhookEndpointResponse{}, nil
}

// RotateWebhookSecret gives an endpoint of the caller a new secret and
// returns it; the secret it replaces signs beside it for secretOverlap
// (docs/webhooks.md#rotating-the-secret). Codes: NotFound, Unauthenticated.
func (s *webhookServer) RotateWebhookSecret(ctx context.Context, req *shebav1.RotateWebhookSecretRequest) (*shebav1.RotateWebhookSecretResponse, error) {
	who, id, err := ownedEndpoint(ctx, req)
	if err != nil {
		return nil, err
	}
	secret, err := newWebhookSecret()
	if err != nil {
		return nil, s.errs.toStatus(ctx, "rotate webhook secret", err, reason.Own{})
	}
	e, err := s.store.RotateWebhookSecret(ctx, who, id, secret, time.Now().Add(s.secretOverlap))
	if err != nil {
		return nil, s.errs.toStatus(ctx, "rotate webhook secret", err, reason.Own{NotFound: errEndpointNotFound})
	}
	return &shebav1.RotateWebhookSecretResponse{Secret: e.Secret}, nil
}

// ListWebhookDeliveries returns one keyset page of the deliveries to an
// endpoint of the caller. Codes: InvalidArgument (a page_token not issued
// for this endpoint), NotFound, Unauthenticated.
func (s *webhookServer) ListWebhookDeliveries(ctx context.Context, req *shebav1.ListWebhookDeliveriesRequest) (*shebav1.ListWebhookDeliveriesResponse, error) {
	who, id, err := ownedEndpoint(ctx, req)
	if err != nil {
		return nil, err
	}
	pg, err := s.tokens.page(req.GetPageSize(), req.GetPageToken(), "webhookEndpoints/"+id+"/deliveries")
	if err != nil {
		return nil, err
	}
	// The ownership check and the page read need not be atomic: a delete in
	// between leaves an empty page, as it would a moment later.
	if _, err := s.store.GetWebhookEndpoint(ctx, who, id); err != nil {
		return nil, s.errs.toStatus(ctx, "list webhook deliveries", err, reason.Own{NotFound: errEndpointNotFound})
	}
	ds, err := s.store.ListWebhookDeliveries(ctx, id, pg.size+1, pg.after)
	if err != nil {
		return nil, s.errs.toStatus(ctx, "list webhook deliveries", err, reason.Own{})
	}
	resp := &shebav1.ListWebhookDeliveriesResponse{}
	ds, resp.NextPageToken = nextPage(s.tokens, ds, pg, func(d store.WebhookDelivery) store.Cursor {
		return store.Cursor{CreateTime: d.CreateTime, ID: d.EventID}
	})
	resp.Deliveries = toProtos(ds, deliveryToProto)
	return resp, nil
}

// newWebhookSecret returns "whsec_" and the base64 of 32 random bytes, the
// Standard Webhooks form of a signing secret.
func newWebhookSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b[:]), nil
}

func endpointToProto(e store.WebhookEndpoint) *shebav1.WebhookEndpoint {
	state := shebav1.WebhookEndpointState_ENABLED
	if e.State == store.EndpointDisabled {
		state = shebav1.WebhookEndpointState_DISABLED
	}
	return &shebav1.WebhookEndpoint{
		Id:          e.ID,
		Url:         e.URL,
		EventTypes:  e.EventTypes,
		Description: e.Description,
		State:       state,
		CreateTime:  timestamppb.New(e.CreateTime),
	}
}

func deliveryToProto(d store.WebhookDelivery) *shebav1.WebhookDelivery {
	p := &shebav1.WebhookDelivery{
		EventId:        d.EventID,
		EventType:      d.EventType,
		Attempts:       int32(d.Attempts),
		LastHttpStatus: int32(d.LastHTTPStatus),
		LastError:      d.LastError,
		CreateTime:     timestamppb.New(d.CreateTime),
	}
	switch d.State {
	case store.DeliveryPending:
		p.State = shebav1.WebhookDeliveryState_PENDING
	case store.DeliverySucceeded:
		p.State = shebav1.WebhookDeliveryState_SUCCEEDED
	case store.DeliveryFailed:
		p.State = shebav1.WebhookDeliveryState_FAILED
	}
	if d.NextAttemptTime != nil {
		p.NextAttemptTime = timestamppb.New(*d.NextAttemptTime)
	}
	if d.LastAttemptTime != nil {
		p.LastAttemptTime = timestamppb.New(*d.LastAttemptTime)
	}
	return p
}
