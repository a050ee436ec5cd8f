package metrics

// HandlingBuckets are the buckets of grpc_server_handling_seconds.
var HandlingBuckets = handlingBuckets
