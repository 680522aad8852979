package gateway_test

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
)

// HTTP/2's own protections, with a client that writes frames itself: the
// streams a connection may open at once, the size of a header list, and
// streams reset as fast as they are opened (a rapid reset flood,
// CVE-2023-44487).

// frame is what the raw client read: a frame's type, stream and error code
// or status.
type frame struct {
	typ      http2.FrameType
	stream   uint32
	code     http2.ErrCode
	status   string
	settings map[http2.SettingID]uint32
}

// rawH2 is an h2c connection driven frame by frame. Frames read go to
// frames, which is closed when the connection ends.
type rawH2 struct {
	conn   net.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	frames chan frame
	host   string
}

func dialH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &rawH2{conn: conn, fr: http2.NewFramer(conn, conn), frames: make(chan frame, 1<<16), host: addr}
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go c.read()
	return c
}

// read reads frames until the connection ends, acknowledging settings.
func (c *rawH2) read() {
	defer close(c.frames)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		out := frame{typ: f.Header().Type, stream: f.Header().StreamID}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			out.settings = map[http2.SettingID]uint32{}
			_ = f.ForeachSetting(func(s http2.Setting) error { out.settings[s.ID] = s.Val; return nil })
		case *http2.RSTStreamFrame:
			out.code = f.ErrCode
		case *http2.GoAwayFrame:
			out.code = f.ErrCode
		case *http2.MetaHeadersFrame:
			out.status = f.PseudoValue("status")
		}
		c.frames <- out
	}
}

// next returns the next frame of type typ (skipping others), or false
// when the connection ended first.
func (c *rawH2) next(t *testing.T, typ http2.FrameType) (frame, bool) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return frame{}, false
			}
			if f.typ == typ {
				return f, true
			}
		case <-timeout:
			t.Fatalf("no %v frame within 30s", typ)
		}
	}
}

// request opens stream id with a GET of path for tenant key; extra adds
// header fields (name, value pairs).
func (c *rawH2) request(id uint32, path, key string, extra ...string) error {
	c.hbuf.Reset()
	fields := append([]string{":method", "GET", ":scheme", "http", ":authority", c.host, ":path", path, "x-api-key", key}, extra...)
	for i := 0; i+1 < len(fields); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	block := c.hbuf.Bytes()
	const chunk = 16 << 10
	first := block[:min(len(block), chunk)]
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: true, EndHeaders: len(block) <= chunk}); err != nil {
		return err
	}
	for rest := block[len(first):]; len(rest) > 0; {
		n := min(len(rest), chunk)
		if err := c.fr.WriteContinuation(id, n == len(rest), rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

// decided is the number of decisions of route at gw, whatever their result
// and source.
func decided(t *testing.T, gw *running, route string) float64 {
	t.Helper()
	var sum float64
	for _, l := range strings.Split(scrape(t, gw), "\n") {
		if strings.HasPrefix(l, "tollgate_gateway_decisions_total{") && strings.Contains(l, `route="`+route+`"`) {
			v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			sum += v
		}
	}
	return sum
}

// TestH2ConcurrentStreamsBounded: the gateway advertises
// --h2-max-concurrent-streams and its header list bound, and refuses a
// stream beyond the first; the streams open still get their answers.
func TestH2ConcurrentStreamsBounded(t *testing.T) {
	gw, up, _ := h2Env(t, rule("r", "*", "*", 1000, slow), func(o *gateway.Options) { o.H2MaxStreams = 4 })
	c := dialH2(t, gw.Addr())
	s, _ := c.next(t, http2.FrameSettings)
	if s.settings[http2.SettingMaxConcurrentStreams] != 4 || s.settings[http2.SettingMaxHeaderListSize] != 64<<10+320 {
		t.Fatalf("settings %v, want 4 streams and a header list of 64 KiB (plus 32 bytes for 10 fields)", s.settings)
	}
	_ = c.fr.WriteSettingsAck()
	for i := range 4 {
		if err := c.request(uint32(2*i+1), "/api/hold?"+strconv.Itoa(i), "streams"); err != nil {
			t.Fatal(err)
		}
		receiveString(t, up.arrived)
	}
	if err := c.request(9, "/api/hold?4", "streams"); err != nil {
		t.Fatal(err)
	}
	f, ok := c.next(t, http2.FrameRSTStream)
	if !ok || f.stream != 9 || (f.code != http2.ErrCodeProtocol && f.code != http2.ErrCodeRefusedStream) {
		t.Fatalf("the fifth stream: %+v (connection open %v), want RST_STREAM PROTOCOL_ERROR or REFUSED_STREAM", f, ok)
	}
	if n := up.holds.Load(); n != 4 {
		t.Fatalf("%d requests reached the upstream, want the 4 admitted streams", n)
	}
}

// TestH2HeaderListBounded: the proxy's 64 KiB bounds the header list of a
// request over HTTP/2 too. A list that decodes to more than that from one
// frame (HPACK repeats a field in a byte) is answered 431 on its stream, and
// the connection goes on; one that needs CONTINUATION frames past the bound
// closes the connection at once (Go's HTTP/2 server reads no more of it: the
// CONTINUATION flood, CVE-2023-45288). Neither reaches the upstream.
func TestH2HeaderListBounded(t *testing.T) {
	gw, up, _ := h2Env(t, rule("r", "*", "*", 1000, slow), nil)
	c := dialH2(t, gw.Addr())
	c.next(t, http2.FrameSettings)
	_ = c.fr.WriteSettingsAck()
	var repeated []string
	for range 2000 {
		repeated = append(repeated, "x-many", strings.Repeat("m", 40))
	}
	if err := c.request(1, "/api/hold?many", "big", repeated...); err != nil {
		t.Fatal(err)
	}
	if f, ok := c.next(t, http2.FrameHeaders); !ok || f.stream != 1 || f.status != "431" {
		t.Fatalf("2,000 fields of 40 bytes in one frame: %+v, want 431 on stream 1", f)
	}
	if err := c.request(3, "/api/echo/orders", "small", "x-small", strings.Repeat("s", 1<<10)); err != nil {
		t.Fatal(err)
	}
	if f, ok := c.next(t, http2.FrameHeaders); !ok || f.stream != 3 || f.status != "200" {
		t.Fatalf("then 1 KiB: %+v, want 200 on stream 3", f)
	}

	c = dialH2(t, gw.Addr())
	c.next(t, http2.FrameSettings)
	_ = c.fr.WriteSettingsAck()
	_ = c.request(1, "/api/hold?big", "big", "x-big", strings.Repeat("b", 70<<10))
	if f, ok := c.next(t, http2.FrameGoAway); ok && f.code != http2.ErrCodeProtocol && f.code != http2.ErrCodeCompression {
		t.Fatalf("70 KiB in CONTINUATION frames: GOAWAY %v, want the connection closed (PROTOCOL_ERROR or COMPRESSION_ERROR)", f.code)
	}
	for range c.frames { // the connection ends
	}
	if n := up.holds.Load(); n != 0 {
		t.Fatalf("%d oversized requests reached the upstream", n)
	}
}

// TestH2ResetBudget: a client that opens streams and resets them while
// the gateway handles them has a budget of twice
// --h2-max-concurrent-streams resets (here 20, with --h2-reset-rate so low
// that nothing comes back during the test); the reset beyond it closes the
// connection, which is counted, and other connections are served.
func TestH2ResetBudget(t *testing.T) {
	gw, up, _ := h2Env(t, rule("r", "*", "*", 1000, slow), func(o *gateway.Options) { o.H2MaxStreams, o.H2ResetRate = 10, 0.0001 })
	c := dialH2(t, gw.Addr())
	c.next(t, http2.FrameSettings)
	_ = c.fr.WriteSettingsAck()
	for i := range 21 {
		id := uint32(2*i + 1)
		if err := c.request(id, "/api/hold?"+strconv.Itoa(i), "resets"); err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
		receiveString(t, up.arrived)
		if err := c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			t.Fatal(err)
		}
		receiveString(t, up.canceled)
		if i == 19 {
			// 20 resets: still open (a PING is answered).
			waitFor(t, 10*time.Second, "the 20th reset counted", func() bool {
				return decided(t, gw, "api") == 20
			})
			if err := c.fr.WritePing(false, [8]byte{1}); err != nil {
				t.Fatal(err)
			}
			if _, ok := c.next(t, http2.FramePing); !ok {
				t.Fatal("the connection closed after 20 resets, within the budget")
			}
		}
	}
	for range c.frames { // until the gateway closes the connection
	}
	waitFor(t, 10*time.Second, "the flood counted", func() bool {
		return metricValue(t, gw, "tollgate_gateway_http2_reset_floods_total") == 1
	})
	if res, _ := do(t, h2cClient(), newReq(t, "POST", gw.url+"/orders", "other", nil), 2); res.StatusCode != 200 {
		t.Fatalf("another connection: %d", res.StatusCode)
	}
}

// TestH2RapidResetFlood: the CVE-2023-44487 shape, a client that writes
// HEADERS and RST_STREAM as fast as it can on one connection, has its
// connection closed after a bounded number of requests (the gateway's
// reset budget, and Go's HTTP/2 server, which runs at most
// --h2-max-concurrent-streams handlers per connection and queues 4x as
// many: beyond, it closes the connection with ENHANCE_YOUR_CALM), not
// after the 100,000 it tried.
func TestH2RapidResetFlood(t *testing.T) {
	gw, _, _ := h2Env(t, rule("r", "*", "*", 1000000, slow), nil)
	c := dialH2(t, gw.Addr())
	c.next(t, http2.FrameSettings)
	_ = c.fr.WriteSettingsAck()
	const tries = 100000
	sent := 0
	for i := range tries {
		id := uint32(2*i + 1)
		if c.request(id, "/api/hold?"+strconv.Itoa(i), "flood") != nil || c.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
			break
		}
		sent++
	}
	for range c.frames { // until the gateway closes the connection
	}
	decisions := decided(t, gw, "api")
	floods := metricValue(t, gw, "tollgate_gateway_http2_reset_floods_total") +
		metricValue(t, gw, `tollgate_gateway_http2_errors_total{type="conn_ENHANCE_YOUR_CALM_too_many_early_resets"}`)
	t.Logf("%d of %d streams written before the connection closed; %v requests decided; %v floods stopped", sent, tries, decisions, floods)
	// 200 resets of budget plus 100/s, 100 handlers and 400 queued: far
	// below what was sent, on any machine.
	if floods < 1 || decisions > 3000 {
		t.Fatalf("%v requests decided, %v floods stopped: want at most 3000 and the connection closed", decisions, floods)
	}
	if res, _ := do(t, h2cClient(), newReq(t, "POST", gw.url+"/orders", "other", nil), 2); res.StatusCode != 200 {
		t.Fatalf("another connection: %d", res.StatusCode)
	}
}
