// Package peers holds the frameworks sheba's users would pick instead,
// each serving sheba's ping over REST and gRPC with its usual production
// middleware on, for the peer-rest and peer-grpc rows of `make bench`
// (bench/README.md): kratos, gozero and gateway, one program each. It is a
// module of its own so that their dependencies stay out of the service's
// go.mod; the wire types are sheba's own (gen/sheba/v1, through the replace
// directive in go.mod).
package peers
