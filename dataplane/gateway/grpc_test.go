package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// gRPC through the gateway: a real grpc-go server behind it (grpc's own
// test service: unary, server-streaming and bidirectional calls), a
// grpc-go client in front of it over h2c, with routes-file routes to an
// h2c upstream.

// grpcBackend is grpc.testing.TestService. UnaryCall answers with the
// payload it got, the header x-backend, the trailer x-trailer and, when
// the call's metadata x-report-cost says N, the trailer x-usage-tokens: N;
// a payload "hold" waits until the call is canceled (counted in
// canceled). StreamingOutputCall sends the responses asked for, then, when
// the last one's size is 0, waits for the client to cancel. FullDuplexCall
// echoes each message. The deadline of the last unary call is kept.
type grpcBackend struct {
	testpb.UnimplementedTestServiceServer
	addr     string
	calls    atomic.Int64
	canceled chan string
	deadline atomic.Pointer[time.Time]
}

func startGRPCBackend(t *testing.T) *grpcBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &grpcBackend{addr: ln.Addr().String(), canceled: make(chan string, 64)}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, b)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return b
}

func (b *grpcBackend) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	b.calls.Add(1)
	if d, ok := ctx.Deadline(); ok {
		b.deadline.Store(&d)
	}
	body := req.GetPayload().GetBody()
	if string(body) == "hold" {
		<-ctx.Done()
		b.canceled <- "unary"
		return nil, ctx.Err()
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-backend", "grpc"))
	trailer := metadata.Pairs("x-trailer", "kept")
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-report-cost")) == 1 {
		trailer.Set("x-usage-tokens", md.Get("x-report-cost")[0])
	}
	_ = grpc.SetTrailer(ctx, trailer)
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: body}}, nil
}

func (b *grpcBackend) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	b.calls.Add(1)
	params := req.GetResponseParameters()
	for i, p := range params {
		if p.GetSize() == 0 && i == len(params)-1 {
			<-stream.Context().Done()
			b.canceled <- "stream"
			return stream.Context().Err()
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
			return err
		}
	}
	return nil
}

func (b *grpcBackend) FullDuplexCall(stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	b.calls.Add(1)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// grpcRoutes are routes-file routes to backend: the unary method alone,
// and the rest of the service.
func grpcRoutes(backend string) string {
	return fmt.Sprintf(`routes:
  - {id: grpc-unary, methods: [POST], path: /grpc.testing.TestService/UnaryCall, upstream: 'h2c://%[1]s'}
  - {id: grpc-test, methods: [POST], pathPrefix: /grpc.testing.TestService, upstream: 'h2c://%[1]s'}
  - {id: grpc-broken, methods: [POST], pathPrefix: /grpc.testing.UnimplementedService, upstream: 'h2c://127.0.0.1:1'}
`, backend)
}

// grpcGateway starts a gateway with --h2c in front of backend, with rules.
func grpcGateway(t *testing.T, srv *redistest.Server, backend *grpcBackend, rules string, tune func(*gateway.Options)) *running {
	t.Helper()
	e := newEnv(t, "http://127.0.0.1:1", rules)
	e.writeRoutes(t, grpcRoutes(backend.addr))
	o := e.options(srv.Addr())
	o.H2C = true
	if tune != nil {
		tune(&o)
	}
	return start(t, o, testLogger(t))
}

// grpcClient is a TestService client of the gateway at addr, over h2c.
func grpcClient(t *testing.T, addr string) testpb.TestServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// withKey is ctx with the API key of tenant as the call's metadata.
func withKey(ctx context.Context, tenant string, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, append([]string{"x-api-key", tenant}, kv...)...)
}

// unary makes a unary call for tenant and returns its status, header and
// trailer.
func unary(t *testing.T, c testpb.TestServiceClient, tenant string, kv ...string) (*status.Status, metadata.MD, metadata.MD) {
	t.Helper()
	var header, trailer metadata.MD
	ctx, cancel := context.WithTimeout(withKey(context.Background(), tenant, kv...), 20*time.Second)
	defer cancel()
	res, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hi")}}, grpc.Header(&header), grpc.Trailer(&trailer))
	if err == nil && string(res.GetPayload().GetBody()) != "hi" {
		t.Fatalf("payload %q", res.GetPayload().GetBody())
	}
	return status.Convert(err), header, trailer
}

// TestGRPCCalls: unary, server-streaming and bidirectional calls go
// through, the backend's header and trailers reach the client untouched,
// and the gateway's limit headers come as metadata.
func TestGRPCCalls(t *testing.T) {
	srv := redistest.Start(t)
	backend := startGRPCBackend(t)
	gw := grpcGateway(t, srv, backend, rule("r", "*", "*", 100, slow), nil)
	c := grpcClient(t, gw.Addr())

	st, header, trailer := unary(t, c, "shop")
	if st.Code() != codes.OK || header.Get("x-backend")[0] != "grpc" || len(trailer.Get("x-trailer")) != 1 || trailer.Get("x-trailer")[0] != "kept" {
		t.Fatalf("unary: %v header %v trailer %v", st, header, trailer)
	}
	if got := header.Get("x-ratelimit-remaining"); len(got) != 1 || got[0] != "99" {
		t.Fatalf("unary: x-ratelimit-remaining %v, want 99", got)
	}

	stream, err := c.StreamingOutputCall(withKey(context.Background(), "shop"), &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{Size: 1}, {Size: 2}, {Size: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; ; i++ {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if i != 4 {
				t.Fatalf("server stream ended after %d messages, want 3", i-1)
			}
			break
		}
		if err != nil || len(msg.GetPayload().GetBody()) != i {
			t.Fatalf("server stream message %d: %v %v", i, msg, err)
		}
	}

	bidi, err := c.FullDuplexCall(withKey(context.Background(), "shop"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		body := []byte("ping " + strconv.Itoa(i))
		if err := bidi.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}}); err != nil {
			t.Fatal(err)
		}
		// Each answer arrives before the next message is sent.
		msg, err := bidi.Recv()
		if err != nil || string(msg.GetPayload().GetBody()) != string(body) {
			t.Fatalf("bidi %d: %v %v", i, msg, err)
		}
	}
	if err := bidi.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := bidi.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("bidi end: %v, want EOF", err)
	}
}

// TestGRPCRefusals: the gateway's own answers in gRPC's form, which gRPC
// clients understand: over the limit RESOURCE_EXHAUSTED with the limit
// headers and retry-after as metadata (not an HTTP 429, which grpc-go turns
// into UNAVAILABLE); no API key UNAUTHENTICATED; a malformed cost
// INVALID_ARGUMENT; no route UNIMPLEMENTED; an unreachable backend
// UNAVAILABLE.
func TestGRPCRefusals(t *testing.T) {
	srv := redistest.Start(t)
	backend := startGRPCBackend(t)
	rules := rule("unary", "shop", "grpc-unary", 2, slow) + rule("cost", "*", "grpc-test", 100, slow, "cost: {request: {header: X-Cost}}")
	gw := grpcGateway(t, srv, backend, rules, nil)
	c := grpcClient(t, gw.Addr())
	for i := range 2 {
		if st, _, _ := unary(t, c, "shop"); st.Code() != codes.OK {
			t.Fatalf("call %d: %v", i+1, st)
		}
	}
	st, header, trailer := unary(t, c, "shop")
	if st.Code() != codes.ResourceExhausted || st.Message() != "rate limit exceeded" {
		t.Fatalf("over the limit: %v, want RESOURCE_EXHAUSTED: rate limit exceeded", st)
	}
	// A Trailers-Only answer: its metadata are the call's trailer.
	if fmt.Sprint(trailer.Get("retry-after"), trailer.Get("x-ratelimit-remaining"), trailer.Get("x-ratelimit-limit")) != "[604800] [0] [2]" {
		t.Fatalf("over the limit: trailer %v (header %v), want retry-after 604800, remaining 0, limit 2", trailer, header)
	}
	if n := backend.calls.Load(); n != 2 {
		t.Fatalf("%d calls reached the backend, want 2", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "X-Api-Key") {
		t.Fatalf("without a key: %v, want UNAUTHENTICATED", st)
	}
	_, err = c.EmptyCall(withKey(ctx, "shop", "x-cost", "lots"), &testpb.Empty{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument {
		t.Fatalf("a malformed cost: %v, want INVALID_ARGUMENT", st)
	}
	cc, _ := grpc.NewClient(gw.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer cc.Close()
	err = cc.Invoke(withKey(ctx, "shop"), "/grpc.testing.Nowhere/Call", &testpb.Empty{}, &testpb.Empty{})
	if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != "no route matches this request" {
		t.Fatalf("no route: %v, want UNIMPLEMENTED", st)
	}
	_, err = testpb.NewUnimplementedServiceClient(cc).UnimplementedCall(withKey(ctx, "shop"), &testpb.Empty{})
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "upstream unavailable" {
		t.Fatalf("an unreachable backend: %v, want UNAVAILABLE", st)
	}
}

// TestGRPCDeadlineAndCancel: the client's deadline reaches the backend
// (grpc-timeout goes upstream), the gateway ends the call at it when the
// backend does not answer (DEADLINE_EXCEEDED), and a client that cancels a
// stream cancels the backend's call.
func TestGRPCDeadlineAndCancel(t *testing.T) {
	srv := redistest.Start(t)
	backend := startGRPCBackend(t)
	gw := grpcGateway(t, srv, backend, rule("r", "*", "*", 100, slow), nil)
	c := grpcClient(t, gw.Addr())

	before := time.Now()
	ctx, cancel := context.WithTimeout(withKey(context.Background(), "shop"), 5*time.Second)
	defer cancel()
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	// The backend counts the timeout from its own receipt: later by the
	// time the call took to get there.
	d := backend.deadline.Load()
	if d == nil || d.Before(before.Add(4*time.Second)) || d.After(before.Add(6*time.Second)) {
		t.Fatalf("the backend's deadline %v, want about 5s after %v", d, before)
	}

	ctx, cancel = context.WithTimeout(withKey(context.Background(), "shop"), 300*time.Millisecond)
	defer cancel()
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hold")}})
	if st := status.Convert(err); st.Code() != codes.DeadlineExceeded {
		t.Fatalf("a call past its deadline: %v, want DEADLINE_EXCEEDED", st)
	}
	if got := receiveString(t, backend.canceled); got != "unary" {
		t.Fatalf("canceled %q", got)
	}

	// A client that keeps waiting: the gateway ends the call at its
	// grpc-timeout itself.
	msg, _ := proto.Marshal(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hold")}})
	frame := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	req := newReq(t, "POST", gw.url+"/grpc.testing.TestService/UnaryCall", "shop", bytes.NewReader(frame))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Timeout", "300m")
	res, _ := do(t, h2cClient(), req, 2)
	if got := res.Header.Get("Grpc-Status") + res.Trailer.Get("Grpc-Status"); res.StatusCode != 200 || got != "4" {
		t.Fatalf("a call past its grpc-timeout, the client waiting: HTTP %d grpc-status %q, want 200 and 4 (DEADLINE_EXCEEDED)", res.StatusCode, got)
	}
	if got := receiveString(t, backend.canceled); got != "unary" {
		t.Fatalf("canceled %q", got)
	}

	ctx, cancel = context.WithCancel(withKey(context.Background(), "shop"))
	stream, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{Size: 1}, {Size: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if got := receiveString(t, backend.canceled); got != "stream" {
		t.Fatalf("canceled %q", got)
	}
}

// TestGRPCCost: a request cost from the call's metadata (a request
// header), and a response cost from the backend's trailer, charged
// exactly.
func TestGRPCCost(t *testing.T) {
	srv := redistest.Start(t)
	backend := startGRPCBackend(t)
	rules := rule("req", "req", "grpc-unary", 10, slow, "cost: {request: {header: X-Cost}}") +
		rule("resp", "resp", "grpc-unary", 100, slow, "cost: {response: {header: X-Usage-Tokens}}")
	gw := grpcGateway(t, srv, backend, rules, nil)
	c := grpcClient(t, gw.Addr())
	if st, _, _ := unary(t, c, "req", "x-cost", "7"); st.Code() != codes.OK {
		t.Fatalf("cost 7 of 10: %v", st)
	}
	if st, _, _ := unary(t, c, "req", "x-cost", "7"); st.Code() != codes.ResourceExhausted {
		t.Fatalf("cost 7 of 3: %v, want RESOURCE_EXHAUSTED", st)
	}
	wantTokens(t, srv, "req", "grpc-unary", 3)
	for _, n := range []string{"5", "12"} {
		if st, _, trailer := unary(t, c, "resp", "x-report-cost", n); st.Code() != codes.OK || trailer.Get("x-usage-tokens")[0] != n {
			t.Fatalf("reported %s: %v trailer %v", n, st, trailer)
		}
	}
	// One token per call up front, then the trailers' 5 and 12.
	wantTokens(t, srv, "resp", "grpc-unary", 100-2-5-12)
}

// TestGRPCStreamOutlivesClientBodyTimeout: a gRPC call's request is its
// stream, which may stay open as long as the call: --client-body-timeout
// (a bound on how slowly an HTTP client sends its body) does not cut a
// bidirectional call that is quiet for longer; the call's own deadline
// bounds it.
func TestGRPCStreamOutlivesClientBodyTimeout(t *testing.T) {
	srv := redistest.Start(t)
	backend := startGRPCBackend(t)
	gw := grpcGateway(t, srv, backend, rule("r", "*", "*", 100, slow), func(o *gateway.Options) { o.ClientBodyTimeout = 200 * time.Millisecond })
	c := grpcClient(t, gw.Addr())
	ctx, cancel := context.WithTimeout(withKey(context.Background(), "shop"), 20*time.Second)
	defer cancel()
	bidi, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if i > 0 {
			time.Sleep(500 * time.Millisecond) // quiet for longer than the body timeout
		}
		if err := bidi.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte{byte(i)}}}); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if _, err := bidi.Recv(); err != nil {
			t.Fatalf("answer %d after a quiet %v: %v", i, time.Duration(i)*500*time.Millisecond, err)
		}
	}
	_ = bidi.CloseSend()
}
