package server

import (
	"context"

	"google.golang.org/grpc/metadata"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/internal/etag"
	"github.com/shebasvc/sheba/store"
)

// subscriptionServer implements shebav1.SubscriptionServiceServer.
type subscriptionServer struct {
	shebav1.UnimplementedSubscriptionServiceServer
	store  *store.Store
	errs   errorMapper
	events Publisher
	tokens pageTokens
}

// listSubscriptionsBinding is what a ListSubscriptions page token is bound
// to: the listing and its filter.
func listSubscriptionsBinding(plan string) string {
	return "sheba.v1.SubscriptionService/ListSubscriptions\x00plan=" + plan
}

// CreateSubscription starts a subscription. Codes: NotFound (unknown
// account), AlreadyExists (one is active).
func (s *subscriptionServer) CreateSubscription(ctx context.Context, req *shebav1.CreateSubscriptionRequest) (*shebav1.CreateSubscriptionResponse, error) {
	id := accountID(req)
	sub, err := s.changeSubscription(ctx, EventSubscriptionCreated, func(ctx context.Context) (store.Subscription, error) {
		return s.store.CreateSubscription(ctx, id, req.GetPlan())
	})
	if err != nil {
		return nil, s.errs.toStatus(ctx, "create subscription", err, reason.Own{
			NotFound: errAccountNotFound,
			Conflict: errSubscriptionActive,
		})
	}
	return &shebav1.CreateSubscriptionResponse{Subscription: sub}, nil
}

// changeSubscription runs change and publishes its event in one transaction,
// and returns the changed subscription.
func (s *subscriptionServer) changeSubscription(ctx context.Context, eventType string, change func(context.Context) (store.Subscription, error)) (*shebav1.Subscription, error) {
	var sub *shebav1.Subscription
	err := s.store.InTx(ctx, func(ctx context.Context) error {
		changed, err := change(ctx)
		if err != nil {
			return err
		}
		sub = subscriptionToProto(changed)
		return s.events.Publish(ctx, eventType, sub)
	})
	return sub, err
}

// GetSubscription returns the active subscription. Codes: NotFound.
func (s *subscriptionServer) GetSubscription(ctx context.Context, req *shebav1.GetSubscriptionRequest) (*shebav1.GetSubscriptionResponse, error) {
	sub, err := s.store.GetActiveSubscription(ctx, accountID(req))
	if err != nil {
		return nil, s.errs.toStatus(ctx, "get subscription", err, reason.Own{NotFound: errNoSubscription})
	}
	return &shebav1.GetSubscriptionResponse{Subscription: subscriptionToProto(sub)}, nil
}

// condition returns the condition (AIP-154) of a change of a call with ctx
// whose request carries field as its etag: that field, and the call's
// if-match metadata (the If-Match header of a REST call), alike on every
// transport.
func condition(ctx context.Context, field string) etag.Condition {
	return etag.NewCondition(field, metadata.ValueFromIncomingContext(ctx, etag.MetadataKey))
}

// CancelSubscription cancels the active subscription. Codes: NotFound,
// Aborted (etag mismatch: nothing changed).
func (s *subscriptionServer) CancelSubscription(ctx context.Context, req *shebav1.CancelSubscriptionRequest) (*shebav1.CancelSubscriptionResponse, error) {
	id := accountID(req)
	cond := condition(ctx, req.GetEtag())
	sub, err := s.changeSubscription(ctx, EventSubscriptionCanceled, func(ctx context.Context) (store.Subscription, error) {
		return s.store.CancelSubscription(ctx, id, cond)
	})
	if err != nil {
		return nil, s.errs.toStatus(ctx, "cancel subscription", err, reason.Own{NotFound: errNoSubscription})
	}
	return &shebav1.CancelSubscriptionResponse{Subscription: sub}, nil
}

// EventSubscriptionUpdated is the event of a subscription whose plan
// UpdateSubscription changed.
const EventSubscriptionUpdated = "subscription.updated"

// UpdateSubscription changes the plan of the active subscription (AIP-134).
// Codes: InvalidArgument (an update mask naming a field of the plan),
// NotFound, Aborted (etag mismatch: nothing changed).
func (s *subscriptionServer) UpdateSubscription(ctx context.Context, req *shebav1.UpdateSubscriptionRequest) (*shebav1.UpdateSubscriptionResponse, error) {
	// The mask's constraint admits "plan" and "*" and their subpaths; the
	// plan, a string, has none. Whatever the mask, the change is the
	// plan's: the one field that can change.
	var v reason.Violations
	for _, p := range req.GetUpdateMask().GetPaths() {
		if p != "plan" && p != "*" {
			v.Add("update_mask", reason.Quote(p)+" names no field of the plan's")
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	id := accountID(req)
	cond := condition(ctx, req.GetSubscription().GetEtag())
	var sub *shebav1.Subscription
	err := s.store.InTx(ctx, func(ctx context.Context) error {
		updated, changed, err := s.store.UpdateSubscriptionPlan(ctx, id, req.GetSubscription().GetPlan(), cond)
		if err != nil {
			return err
		}
		sub = subscriptionToProto(updated)
		if !changed {
			return nil
		}
		return s.events.Publish(ctx, EventSubscriptionUpdated, sub)
	})
	if err != nil {
		return nil, s.errs.toStatus(ctx, "update subscription", err, reason.Own{NotFound: errNoSubscription})
	}
	return &shebav1.UpdateSubscriptionResponse{Subscription: sub}, nil
}

// ListSubscriptions returns one keyset page. Codes: InvalidArgument (a
// page_token not issued for this listing and filter).
func (s *subscriptionServer) ListSubscriptions(ctx context.Context, req *shebav1.ListSubscriptionsRequest) (*shebav1.ListSubscriptionsResponse, error) {
	pg, err := s.tokens.page(req.GetPageSize(), req.GetPageToken(), listSubscriptionsBinding(req.GetPlan()))
	if err != nil {
		return nil, err
	}
	// One row more than the page tells whether there is a next page.
	subs, err := s.store.ListSubscriptions(ctx, store.ListSubscriptionsParams{
		Plan:  req.GetPlan(),
		Limit: pg.size + 1,
		After: pg.after,
	})
	if err != nil {
		return nil, s.errs.toStatus(ctx, "list subscriptions", err, reason.Own{})
	}
	resp := &shebav1.ListSubscriptionsResponse{}
	subs, resp.NextPageToken = nextPage(s.tokens, subs, pg, func(sub store.Subscription) store.Cursor {
		return store.Cursor{CreateTime: sub.CreateTime, ID: sub.ID}
	})
	resp.Subscriptions = toProtos(subs, subscriptionToProto)
	return resp, nil
}
