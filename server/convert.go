package server

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
)

func accountToProto(a store.Account) *shebav1.Account {
	return &shebav1.Account{
		Id:         a.ID,
		Username:   a.Username,
		CreateTime: timestamppb.New(a.CreateTime),
	}
}

func subscriptionToProto(s store.Subscription) *shebav1.Subscription {
	p := &shebav1.Subscription{
		Id:         s.ID,
		AccountId:  s.AccountID,
		Plan:       s.Plan,
		Status:     statusToProto(s.Status),
		CreateTime: timestamppb.New(s.CreateTime),
		Etag:       s.ETag(),
	}
	if s.CancelTime != nil {
		p.CancelTime = timestamppb.New(*s.CancelTime)
	}
	return p
}

func statusToProto(s store.Status) shebav1.SubscriptionStatus {
	switch s {
	case store.StatusActive:
		return shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_ACTIVE
	case store.StatusCanceled:
		return shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_CANCELED
	default:
		return shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_UNSPECIFIED
	}
}

// toProtos converts the rows of a page with convert.
func toProtos[R, P any](rows []R, convert func(R) P) []P {
	out := make([]P, len(rows))
	for i, r := range rows {
		out[i] = convert(r)
	}
	return out
}
