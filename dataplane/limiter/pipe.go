package limiter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Batcher worker talking to a single Redis server sends its pipelines on
// a connection of its own (a pipe), not through go-redis: the worker writes
// the script calls' RESP straight from the calls' fields into one reused
// buffer, and reads the replies (arrays of 8 or 11 integers) in place. No
// command objects, no hooks, no pool: one connection per worker, used by
// that worker alone. go-redis's pipeline machinery cost about as much CPU
// per decision as the rest of the Redis path (see BENCHMARKS.md).
//
// go-redis remains the client for everything else (PING, the breaker's
// probes, membership), and for the Batcher itself on a Cluster (MOVED, ASK
// and slot maps) and with Sentinel (the client follows the Sentinels'
// announcements of a new master and drops connections to the old one).

// directOptions is what a worker needs to open its own connection: taken
// from the go-redis client's options, so the address, TLS, ACL user,
// password, database and client name are the client's own.
type directOptions struct {
	network, addr                  string
	dial                           func(ctx context.Context, network, addr string) (net.Conn, error)
	dialTimeout                    time.Duration
	username, password, clientName string
	db                             int
	// tls: the connections are TLS (no solo sends: a read that timed out
	// is not resumed on them).
	tls bool
}

// failoverAddr is the Addr go-redis gives the options of a Sentinel
// (failover) client; TestDirectOnlyForOneServer keeps it honest.
const failoverAddr = "FailoverClient"

// directFor returns the options for workers' own connections to client's
// server, or nil when the Batcher must send through go-redis: a Cluster or
// Sentinel client, or options a plain connection would not honour
// (credentials providers, connect hooks).
func directFor(client BatchClient) *directOptions {
	c, ok := client.(*redis.Client)
	if !ok {
		return nil
	}
	o := c.Options()
	if o.Addr == failoverAddr || o.Dialer == nil || o.OnConnect != nil || o.CredentialsProvider != nil ||
		o.CredentialsProviderContext != nil || o.StreamingCredentialsProvider != nil {
		return nil
	}
	return &directOptions{
		network: o.Network, addr: o.Addr, dial: o.Dialer, dialTimeout: o.DialTimeout,
		username: o.Username, password: o.Password, clientName: o.ClientName, db: o.DB,
		tls: o.TLSConfig != nil,
	}
}

// pipe is one worker's connection (nil conn: not connected; the next
// pipeline dials).
type pipe struct {
	opts *directOptions
	bt   *Batcher
	conn *heardConn
	rd   *bufio.Reader
	wbuf []byte
	args scriptArgs // one call's arguments, while it is written
}

// close drops the connection; the next pipeline dials again.
func (p *pipe) close() {
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}

// open reports whether the pipe has a connection that the peer has not
// closed (a send on it dials nothing).
func (p *pipe) open() bool { return p.conn != nil && !p.conn.peerClosed() }

// connect dials unless connected, and says who the client is (AUTH,
// SELECT, CLIENT SETNAME), all before deadline. A connection Redis has
// closed since its last pipeline (a restart, its idle timeout) is dropped
// first, as go-redis's pool does, so that no pipeline is lost on a
// connection known to be dead.
func (p *pipe) connect(now, deadline time.Time) error {
	if p.conn != nil && p.conn.peerClosed() {
		p.close()
	}
	if p.conn != nil {
		return nil
	}
	dialBy := deadline
	if d := p.opts.dialTimeout; d > 0 && now.Add(d).Before(deadline) {
		dialBy = now.Add(d)
	}
	ctx, cancel := context.WithDeadline(context.Background(), dialBy)
	defer cancel()
	nc, err := p.opts.dial(ctx, p.opts.network, p.opts.addr)
	if err != nil {
		return err
	}
	hc := p.bt.newHeardConn(nc, "")
	if p.rd == nil {
		p.rd = bufio.NewReaderSize(hc, 4096)
	} else {
		p.rd.Reset(hc)
	}
	p.conn = hc
	if err := p.hello(deadline); err != nil {
		p.close()
		return err
	}
	return nil
}

// hello authenticates and selects the database on a new connection.
func (p *pipe) hello(deadline time.Time) error {
	o := p.opts
	var cmds [][]string
	switch {
	case o.username != "":
		cmds = append(cmds, []string{"auth", o.username, o.password})
	case o.password != "":
		cmds = append(cmds, []string{"auth", o.password})
	}
	if o.db != 0 {
		cmds = append(cmds, []string{"select", strconv.Itoa(o.db)})
	}
	if o.clientName != "" {
		cmds = append(cmds, []string{"client", "setname", o.clientName})
	}
	if len(cmds) == 0 {
		return nil
	}
	var w []byte // not wbuf: it holds the pipeline waiting for this connection
	for _, c := range cmds {
		w = appendArrayLen(w, len(c))
		for _, a := range c {
			w = appendBulk(w, a)
		}
	}
	if err := p.conn.SetDeadline(deadline); err != nil {
		return err
	}
	if _, err := p.conn.Write(w); err != nil {
		return err
	}
	for _, c := range cmds {
		var sink replyInts
		_, replyErr, err := readReply(p.rd, &sink, false)
		if err != nil {
			return err
		}
		if replyErr != nil {
			return fmt.Errorf("redis %s: %w", c[0], replyErr)
		}
	}
	return nil
}

// exec sends the calls due in pass p (call.due) as one pipeline and reads
// each reply into its call. It returns the number of calls sent. A broken
// connection fails every call not answered yet and is closed; a Redis
// error reply fails its own call only.
func (p *pipe) exec(calls []call, ps pass, layout Layout, deadline time.Time) int {
	n, err := p.send(calls, ps, layout, deadline)
	if n > 0 {
		p.receive(calls, ps, err)
	}
	return n
}

// send writes the calls due in pass ps as one pipeline, all before
// deadline, and returns how many it wrote (none due: 0 and nothing
// written) and the connection's error; receive reads their replies.
func (p *pipe) send(calls []call, ps pass, layout Layout, deadline time.Time) (int, error) {
	w := p.wbuf[:0]
	n := 0
	for i := range calls {
		c := &calls[i]
		if !c.due(ps) {
			continue
		}
		keys, args := p.args.fill(&c.ops[0].b, c.cost, c.want, c.deadlineMs, layout)
		w = appendScript(w, keys, args, ps == passNoScript)
		n++
	}
	p.wbuf = w
	if n == 0 {
		return 0, nil
	}
	now := time.Now()
	err := p.connect(now, deadline)
	if err == nil {
		err = p.conn.SetDeadline(deadline)
	}
	if err == nil {
		_, err = p.conn.Write(w)
	}
	if cap(p.wbuf) > maxKeptBuffer {
		p.wbuf = nil // a resend with the script's text: not kept for every pipeline
	}
	return n, err
}

// receive reads the replies of the calls send wrote in pass ps into them;
// err, the connection's error so far, fails every call not answered yet
// and closes the connection, as does one while reading.
func (p *pipe) receive(calls []call, ps pass, err error) {
	for i := range calls {
		c := &calls[i]
		if !c.due(ps) {
			continue
		}
		if err == nil {
			c.n, c.err, err = readReply(p.rd, &c.reply, true)
		}
		if err != nil {
			c.n, c.err = 0, err
		}
	}
	if err != nil {
		p.close()
	}
}

// maxKeptBuffer bounds the write buffer a worker keeps between pipelines.
// A full batch of EVALSHA calls fits; a batch resent with the script's
// text (after Redis lost its scripts) can take megabytes, which a gateway
// with many workers should not hold on to.
const maxKeptBuffer = 256 << 10

// appendScript appends one EVALSHA (or EVAL, withText) of the token
// bucket script with keys and args, as RESP.
func appendScript(w []byte, keys []string, args []any, withText bool) []byte {
	w = appendArrayLen(w, 3+len(keys)+len(args))
	if withText {
		w = appendBulk(appendBulk(w, "eval"), tokenBucketSrc)
	} else {
		w = appendBulk(appendBulk(w, "evalsha"), tokenBucketSHA)
	}
	w = appendBulkInt(w, int64(len(keys)))
	for _, k := range keys {
		w = appendBulk(w, k)
	}
	for _, a := range args {
		w = appendArg(w, a)
	}
	return w
}

// appendArg appends one of the script's arguments as a bulk string, the
// way go-redis writes them (see scriptArgs.fill for the types).
func appendArg(w []byte, a any) []byte {
	switch v := a.(type) {
	case string:
		return appendBulk(w, v)
	case *string:
		return appendBulk(w, *v)
	case int64:
		return appendBulkInt(w, v)
	case *int64:
		return appendBulkInt(w, *v)
	case int:
		return appendBulkInt(w, int64(v))
	case float64:
		return appendBulkFloat(w, v)
	case *float64:
		return appendBulkFloat(w, *v)
	}
	// Only fill's own types reach here; a new one must be added above.
	panic(fmt.Sprintf("limiter: script argument of type %T", a))
}

func appendArrayLen(w []byte, n int) []byte {
	w = append(w, '*')
	w = strconv.AppendInt(w, int64(n), 10)
	return append(w, '\r', '\n')
}

func appendBulk(w []byte, s string) []byte {
	w = append(w, '$')
	w = strconv.AppendInt(w, int64(len(s)), 10)
	w = append(w, '\r', '\n')
	w = append(w, s...)
	return append(w, '\r', '\n')
}

func appendBulkInt(w []byte, n int64) []byte {
	var num [20]byte
	return appendBulkBytes(w, strconv.AppendInt(num[:0], n, 10))
}

// appendBulkFloat writes f as go-redis does ('f', shortest). An integral
// f (a capacity, usually) takes the cheaper integer formatting, which
// writes the same digits.
func appendBulkFloat(w []byte, f float64) []byte {
	if f >= 0 && f < 1<<53 && f == math.Trunc(f) && !math.Signbit(f) { // not -0, which go-redis writes as "-0"
		return appendBulkInt(w, int64(f))
	}
	var num [32]byte
	return appendBulkBytes(w, strconv.AppendFloat(num[:0], f, 'f', -1, 64))
}

func appendBulkBytes(w, b []byte) []byte {
	w = append(w, '$')
	w = strconv.AppendInt(w, int64(len(b)), 10)
	w = append(w, '\r', '\n')
	w = append(w, b...)
	return append(w, '\r', '\n')
}

// replyError is an error reply from Redis (NOSCRIPT, a script error,
// WRONGPASS...). It satisfies go-redis's redis.Error, as go-redis's own
// error replies do.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as an error reply from Redis.
func (replyError) RedisError() {}

// errProtocol: the connection carried something that is not RESP2 as
// Redis writes it; it is closed.
var errProtocol = errors.New("redis: malformed reply")

// readReply reads one RESP2 reply. With ints, an array of at most 11
// integers is read into dst (n of them); a simple string or anything else
// is read and, with ints, answered with a reply error. replyErr is an error
// reply (or a reply of an unexpected shape), which leaves the connection
// usable; err means the connection is not (a read failed, or the bytes are
// not RESP).
func readReply(rd *bufio.Reader, dst *replyInts, ints bool) (n int, replyErr, err error) {
	line, err := readLine(rd)
	if err != nil {
		return 0, nil, err
	}
	switch line[0] {
	case '-':
		return 0, replyError(line[1:]), nil
	case '+':
		if ints {
			return 0, replyError("unexpected status reply, want an array of integers"), nil
		}
		return 0, nil, nil
	case '*':
		if !ints {
			return 0, replyError("unexpected array reply"), skipElems(rd, line, 0)
		}
		return readInts(rd, line, dst)
	}
	if err := skipRest(rd, line, 0); err != nil {
		return 0, nil, err
	}
	return 0, replyError(fmt.Sprintf("unexpected reply of type %q, want an array of integers", line[0])), nil
}

// readInts reads the elements of the array whose header is line.
func readInts(rd *bufio.Reader, line []byte, dst *replyInts) (int, error, error) {
	count, ok := parseInt(line[1:])
	if !ok {
		return 0, nil, errProtocol
	}
	if count < 0 {
		return 0, replyError("unexpected nil reply, want an array of integers"), nil
	}
	var replyErr error
	n := 0
	for range count {
		el, err := readLine(rd)
		if err != nil {
			return 0, nil, err
		}
		if el[0] != ':' {
			if err := skipRest(rd, el, 0); err != nil {
				return 0, nil, err
			}
			replyErr = replyError(fmt.Sprintf("unexpected element of type %q in the reply, want integers", el[0]))
			continue
		}
		v, ok := parseInt(el[1:])
		if !ok {
			return 0, nil, errProtocol
		}
		if n < len(dst) {
			dst[n] = v
		}
		n++
	}
	if replyErr == nil && n > len(dst) {
		replyErr = replyError(fmt.Sprintf("%d values in the reply, want at most %d", n, len(dst)))
	}
	if replyErr != nil {
		return 0, replyErr, nil
	}
	return n, nil, nil
}

// maxDepth bounds nested arrays skipped in a reply.
const maxDepth = 8

// skipRest reads the rest of a value whose first line is line.
func skipRest(rd *bufio.Reader, line []byte, depth int) error {
	switch line[0] {
	case '+', '-', ':':
		return nil
	case '$':
		size, ok := parseInt(line[1:])
		if !ok {
			return errProtocol
		}
		if size < 0 {
			return nil
		}
		_, err := rd.Discard(int(size) + 2)
		return err
	case '*':
		return skipElems(rd, line, depth)
	}
	return errProtocol
}

// skipElems reads the elements of the array whose header is line.
func skipElems(rd *bufio.Reader, line []byte, depth int) error {
	count, ok := parseInt(line[1:])
	if !ok || depth >= maxDepth {
		return errProtocol
	}
	for range count {
		el, err := readLine(rd)
		if err != nil {
			return err
		}
		if err := skipRest(rd, el, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// readLine reads one line without its CRLF; it is valid until the next
// read. A line longer than the buffer (a long error message) is copied.
func readLine(rd *bufio.Reader) ([]byte, error) {
	line, err := rd.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		long := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) && len(long) < 1<<20 {
			line, err = rd.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errProtocol
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, errProtocol
	}
	return line[:len(line)-2], nil
}

// parseInt parses a RESP integer (an optional minus and up to 19 digits,
// within int64) without allocating.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	switch {
	case neg && v <= 1<<63:
		return int64(-v), true //nolint:gosec // -v wraps to MinInt64 for 1<<63, as meant
	case !neg && v < 1<<63:
		return int64(v), true
	}
	return 0, false
}
