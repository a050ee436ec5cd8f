package httpcompress_test

import (
	"log/slog"
	"net/http"

	"github.com/shebasvc/sheba/codec/httpcompress"
)

func ExampleNewHandler() {
	var gateway http.Handler = http.NotFoundHandler() // the REST gateway
	h, err := httpcompress.NewHandler(gateway,
		httpcompress.WithMinBytes(1024),         // compression.min_bytes
		httpcompress.WithMaxRequestBytes(1<<20), // http.max_body_bytes
		httpcompress.WithErrorWriter(func(w http.ResponseWriter, r *http.Request, httpStatus int, msg string) {
			// sheba writes a google.rpc.Status here.
			http.Error(w, msg, httpStatus)
		}),
	)
	if err != nil {
		slog.Error("compression", "err", err)
		return
	}
	_ = h
}
