package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// secretPrefix starts every signing secret.
const secretPrefix = "whsec_"

// Sign returns the webhook-signature header of a message in the Standard
// Webhooks scheme, one signature for each of secrets, in their order,
// separated by a space: "v1," and the base64 of the HMAC-SHA256, keyed with
// the bytes the secret encodes (the base64 after "whsec_"), of
// "<id>.<timestamp>.<body>". A receiver holding any one of the secrets
// verifies it. Secrets must not be empty.
func Sign(secrets []string, id string, timestamp int64, body []byte) (string, error) {
	if len(secrets) == 0 {
		return "", errors.New("no webhook secret to sign with")
	}
	var sig strings.Builder
	for i, secret := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
		if err != nil || len(key) == 0 {
			return "", errors.New("webhook secret is not whsec_ and base64")
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write(strconv.AppendInt(nil, timestamp, 10))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			sig.WriteByte(' ')
		}
		sig.WriteString("v1,")
		sig.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return sig.String(), nil
}
