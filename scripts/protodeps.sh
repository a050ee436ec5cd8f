#!/usr/bin/env bash
# protodeps.sh puts the .proto files that proto/ imports but does not own
# where buf finds them: .build/protodeps, a buf module per source, outside
# git (buf.yaml lists them beside proto/). Nothing is copied into the repo,
# and each source is pinned:
#
#   - google/api (annotations.proto, http.proto, field_behavior.proto): the
#     npm package google-proto-files, pinned with its integrity hash in
#     tools/ts/package-lock.json (make's npm ci installs it);
#   - buf/validate/validate.proto: the Go module
#     github.com/bufbuild/protovalidate at PROTOVALIDATE_VERSION, whose
#     module sum must be PROTOVALIDATE_SUM. Its descriptor is the one that
#     buf.build/go/protovalidate's Go types register (server's
#     TestValidateProtoIsTheRuntimes compares them): a newer file would
#     let constraints be skipped without a word.
#
# Their Go types come from their Go modules (google.golang.org/genproto,
# buf.build/gen/go/bufbuild/protovalidate), so buf.gen.yaml generates code
# for proto/ only.
#
#   scripts/protodeps.sh    # from the repo's root
set -euo pipefail

PROTOVALIDATE_VERSION=v1.2.2
PROTOVALIDATE_SUM='h1:2H/9/Kr97etSRqW3IJjTTb09z+zutkK2GDhDRbOnqr4='

out=.build/protodeps
npm_dir=tools/ts/node_modules/google-proto-files
if [[ ! -f $npm_dir/google/api/annotations.proto ]]; then
	echo "protodeps.sh: $npm_dir is missing: run make generate (it runs npm ci in tools/ts)" >&2
	exit 1
fi

json=$(GOWORK=off GOFLAGS=-mod=mod go mod download -json "github.com/bufbuild/protovalidate@$PROTOVALIDATE_VERSION")
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$json")
sum=$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p' <<<"$json")
if [[ $sum != "$PROTOVALIDATE_SUM" ]]; then
	echo "protodeps.sh: github.com/bufbuild/protovalidate@$PROTOVALIDATE_VERSION has sum '$sum', want $PROTOVALIDATE_SUM" >&2
	exit 1
fi

rm -rf "$out"
mkdir -p "$out/googleapis/google/api" "$out/protovalidate/buf/validate"
for f in annotations http field_behavior; do
	cp "$npm_dir/google/api/$f.proto" "$out/googleapis/google/api/"
done
cp "$dir/proto/protovalidate/buf/validate/validate.proto" "$out/protovalidate/buf/validate/"
# The module cache's files are read-only; these are ours to replace.
chmod -R u+w "$out"
