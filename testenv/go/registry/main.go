// Command registry is a TEST-ONLY tool of trainforge-testenv: an in-memory OCI
// registry (github.com/google/go-containerregistry/pkg/registry, with the
// referrers API) on loopback. Nothing is persisted and there is no auth.
//
//	registry [-addr 127.0.0.1:0] [-addr-file FILE] [-tls-cert PEM -tls-key PEM] [-basic-auth USER:PASSWORD]
//	         [-redirect-blobs BASE-URL] [-token-realm URL]
//
// Registries send clients elsewhere two ways, and tests of a client's
// address guard need both from a real registry: -redirect-blobs answers
// every blob read (GET) with 307 to BASE-URL/v2/<name>/blobs/<digest>
// (writes and HEAD are served here), and -token-realm asks every request
// without "Authorization: Bearer testenv" to fetch a token from URL
// (Bearer challenge, as distribution's token auth does). Every registry
// also serves that token at GET /token, so another registry can be the
// realm.
//
// With -addr-file the address actually listened on (host:port) is written to
// FILE once the socket is bound (atomically: a temporary file, then rename).
// Every request is logged to stderr. SIGTERM/SIGINT shut it down.
//
// The package answers a completed blob upload or manifest push (201) without the Location
// header the distribution spec requires; clients that follow the spec (such
// as oci-client) refuse that, so withBlobLocation adds it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	addrFile := flag.String("addr-file", "", "write the actual host:port here after listening")
	tlsCert := flag.String("tls-cert", "", "PEM certificate (HTTPS when given with -tls-key)")
	tlsKey := flag.String("tls-key", "", "PEM private key (HTTPS when given with -tls-cert)")
	basicAuth := flag.String("basic-auth", "", "user:password every request must carry (HTTP Basic)")
	redirectBlobs := flag.String("redirect-blobs", "", "answer blob reads with 307 to this base URL")
	tokenRealm := flag.String("token-realm", "", "require a bearer token fetched from this realm URL")
	flag.Parse()
	logger := log.New(os.Stderr, "registry: ", log.LstdFlags|log.Lmicroseconds)
	if (*tlsCert == "") != (*tlsKey == "") {
		logger.Fatal("-tls-cert and -tls-key must be given together")
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		logger.Fatal(err)
	}
	if *addrFile != "" {
		tmp := *addrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(ln.Addr().String()), 0o644); err != nil {
			logger.Fatal(err)
		}
		if err := os.Rename(tmp, *addrFile); err != nil {
			logger.Fatal(err)
		}
	}

	opts := []registry.Option{registry.Logger(logger), registry.WithReferrersSupport(true)}
	if *redirectBlobs != "" {
		opts = append(opts, registry.WithBlobHandler(redirecting{
			mem:  registry.NewInMemoryBlobHandler(),
			base: strings.TrimSuffix(*redirectBlobs, "/"),
		}))
	}
	var handler http.Handler = withBlobLocation(registry.New(opts...))
	if *tokenRealm != "" {
		handler = withBearer(handler, *tokenRealm, logger)
	}
	handler = withToken(handler, logger)
	if *basicAuth != "" {
		user, password, ok := strings.Cut(*basicAuth, ":")
		if !ok {
			logger.Fatal("-basic-auth must be user:password")
		}
		handler = withBasicAuth(handler, user, password, logger)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          logger, // e.g. the TLS handshake EOF of a readiness probe
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()

	tls := *tlsCert != ""
	logger.Printf("serving on %s (tls=%v, referrers API on)", ln.Addr(), tls)
	if tls {
		err = srv.ServeTLS(ln, *tlsCert, *tlsKey)
	} else {
		err = srv.Serve(ln)
	}
	if !errors.Is(err, http.ErrServerClosed) {
		logger.Fatal(err)
	}
	logger.Print("stopped")
}

// withBlobLocation sets Location: /v2/<name>/blobs/<digest> on the PUT that
// completes a blob upload (/v2/<name>/blobs/uploads/<id>?digest=<digest>),
// and the manifest's own path on a manifest PUT.
func withBlobLocation(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		digest := r.URL.Query().Get("digest")
		if r.Method == http.MethodPut && digest != "" {
			if name, _, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v2/"), "/blobs/uploads/"); ok {
				w.Header().Set("Location", "/v2/"+name+"/blobs/"+digest)
			}
		}
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/") {
			w.Header().Set("Location", r.URL.Path)
		}
		next.ServeHTTP(w, r)
	})
}

// withBasicAuth answers 401 with a Basic challenge to any request without
// the credentials user:password.
func withBasicAuth(next http.Handler, user, password string, logger *log.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != password {
			logger.Printf("%s %s 401 (credentials: %v)", r.Method, r.URL.Path, ok)
			w.Header().Set("WWW-Authenticate", `Basic realm="trainforge-testenv"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// The bearer token this registry's /token hands out and -token-realm wants.
const token = "testenv"

// redirecting stores blobs in memory and answers their reads with a
// redirect to the same path under base.
type redirecting struct {
	mem  registry.BlobHandler
	base string
}

func (r redirecting) Get(_ context.Context, repo string, h v1.Hash) (io.ReadCloser, error) {
	return nil, registry.RedirectError{
		Location: r.base + "/v2/" + repo + "/blobs/" + h.String(),
		Code:     http.StatusTemporaryRedirect,
	}
}

func (r redirecting) Stat(ctx context.Context, repo string, h v1.Hash) (int64, error) {
	return r.mem.(registry.BlobStatHandler).Stat(ctx, repo, h)
}

func (r redirecting) Put(ctx context.Context, repo string, h v1.Hash, rc io.ReadCloser) error {
	return r.mem.(registry.BlobPutHandler).Put(ctx, repo, h, rc)
}

// withBearer answers 401 with a Bearer challenge naming realm to any
// request but GET /token that lacks the token.
func withBearer(next http.Handler, realm string, logger *log.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/token" && r.Header.Get("Authorization") != "Bearer "+token {
			logger.Printf("%s %s 401 (bearer challenge, realm %s)", r.Method, r.URL.Path, realm)
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q,service="trainforge-testenv"`, realm))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// withToken serves GET /token: the token, in both of the fields clients
// read.
func withToken(next http.Handler, logger *log.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/token" {
			next.ServeHTTP(w, r)
			return
		}
		logger.Printf("%s %s 200 (token)", r.Method, r.URL.String())
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"token":%q,"access_token":%q}`, token, token)
	})
}
