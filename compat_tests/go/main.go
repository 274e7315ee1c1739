// Command gokafka drives franz-go (kgo, kadm) against a broker for the compatibility suite
// (compat_tests/test_go_client.py builds it once, compat_tests/go_client.py runs it).
//
//	gokafka roundtrip -brokers B -topic T -n N -codec C
//	    creates T (3 partitions), produces N keyed records (every third with two headers)
//	    compressed with C, then consumes the partitions from the start.
//	gokafka group -brokers B -topic T -group G -n N [-848] [-balancer NAME]
//	    creates T (4 partitions); two members join G; once their assignments cover T without
//	    overlap, produces N records and each member consumes and commits what it owns.
//	gokafka etl -brokers B -in I -out O -group G -n N [-848] [-balancer NAME] [-static]
//	    consume-transform-produce with kgo.GroupTransactSession from I (4 partitions, N records
//	    produced while it runs) to O, read_committed: member 1 starts, member 2 joins once
//	    a quarter of the input is done, member 1 leaves at half; member 2 finishes. Then reads O
//	    read_committed and the group's committed offsets.
//	gokafka share -brokers B -topic T -group G [-config K=V,...] [-create] [-partitions P]
//	        [-values V,...] [-setup] [-rules RULE,...] [-max N] [-idle D] [-wait D] [-hold]
//	        [-maxrecords M]
//	    a share group (KIP-932) consumer, kgo.ShareGroup. In order: sets the group configs of G
//	    (IncrementalAlterConfigs on the GROUP resource, e.g. share.auto.offset.reset=earliest),
//	    creates T with P partitions (-create), produces the values (record i to partition i % P,
//	    in ProduceSync calls of 20 records: batches of 20/P); -setup ends there. Then joins G
//	    subscribed to T and acknowledges each record it polls (Record.Ack; kgo sends the acks
//	    on its next ShareFetch, or on a ShareAcknowledge when none goes within a second) by the
//	    first matching -rules entry: release-below:K (release while its delivery count is below
//	    K), accept:PREFIX, release:PREFIX, reject:PREFIX (its value starts with PREFIX);
//	    otherwise accept. It stops after N records (-max, polled with PollRecords so no more
//	    are taken; the rest of a fetch is released by the close), after -idle without a record
//	    once one came, or when none came within -wait; then FlushAcks and Close (a
//	    ShareAcknowledge of session epoch -1, then the leave heartbeat). -hold: prints the records of the
//	    first poll that has any, a "holding" line, and sleeps without acknowledging them until
//	    it is killed. -maxrecords: kgo.ShareMaxRecords (ShareFetch MaxRecords, default 500).
//	    Lines: config {key, value}; created {topic, partitions}; produced {partition, offset,
//	    value}; polling (the consumer is started); record {partition, offset, count (delivery
//	    count), value, ack (accept, release, reject; none when holding)}; acked {partition,
//	    error (null: ok)} per partition result of the ShareAckCallback; holding {records};
//	    stopped {reason (max, idle, wait), records}; closed.
//	gokafka produce -topic T -seconds S [-size BYTES]
//	    the producer of bench/workers_bench.py --client franz-go: one random value of -size bytes
//	    (default 1024) sent over and over, round-robin over T's partitions, for S seconds, then a
//	    flush; acks=1 without idempotence, linger 5 ms, batches up to 128 KiB, uncompressed (as
//	    the bench's confluent-kafka producers). Line: produced {records, failed}.
//
// Output: one JSON object per line on stdout ({"event": ...}); a failure is an "error" event
// and exit status 1. -log debug|info writes kgo's log to stderr.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var (
	brokers  = flag.String("brokers", "127.0.0.1:9092", "bootstrap servers, comma separated")
	topic    = flag.String("topic", "", "topic (roundtrip, group)")
	inTopic  = flag.String("in", "", "input topic (etl)")
	outTopic = flag.String("out", "", "output topic (etl)")
	group    = flag.String("group", "", "consumer group (group, etl)")
	count    = flag.Int("n", 30, "records")
	codec    = flag.String("codec", "none", "compression: none, gzip, snappy, lz4, zstd")
	use848   = flag.Bool("848", false, "the KIP-848 consumer group protocol (kgo.ServerSideBalancer)")
	balancer = flag.String("balancer", "range", "range, sticky, cooperative-sticky")
	static   = flag.Bool("static", false, "static members (kgo.InstanceID)")
	logLevel = flag.String("log", "", "kgo's log to stderr: debug, info, warn, error")
	deadline = flag.Duration("timeout", 90*time.Second, "give up after this long")
	// share
	groupConfigs = flag.String("config", "", "share: group configs of -group to set first, K=V,... ")
	create       = flag.Bool("create", false, "share: create -topic with -partitions partitions")
	partitions   = flag.Int("partitions", 1, "share: the partitions of -topic")
	values       = flag.String("values", "", "share: values to produce, comma separated (record i to partition i % P)")
	setupOnly    = flag.Bool("setup", false, "share: only set the configs, create and produce")
	ackRules     = flag.String("rules", "", "share: release-below:K, accept:P, release:P, reject:P, ...")
	maxRecords   = flag.Int("max", 0, "share: stop after this many records (0: no limit)")
	idleStop     = flag.Duration("idle", 5*time.Second, "share: stop after this long without a record once one came")
	waitFirst    = flag.Duration("wait", 30*time.Second, "share: stop if no record comes within this long")
	hold         = flag.Bool("hold", false, "share: hold the first poll's records unacknowledged until killed")
	shareMax     = flag.Int("maxrecords", 0, "share: kgo.ShareMaxRecords (0: the default)")
	// produce
	seconds   = flag.Float64("seconds", 10, "produce: how long to send")
	valueSize = flag.Int("size", 1024, "produce: the value's size in bytes")
)

var outMu sync.Mutex

// emit prints one result line.
func emit(event string, fields map[string]any) {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["event"] = event
	line, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Println(string(line))
}

// fail reports err as an "error" event and exits 1.
func fail(format string, args ...any) {
	emit("error", map[string]any{"error": fmt.Sprintf(format, args...)})
	os.Exit(1)
}

func baseOpts(name string) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.ClientID("gokafka-" + name)}
	levels := map[string]kgo.LogLevel{"debug": kgo.LogLevelDebug, "info": kgo.LogLevelInfo,
		"warn": kgo.LogLevelWarn, "error": kgo.LogLevelError}
	if level, ok := levels[*logLevel]; ok {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, func() string {
			return time.Now().UTC().Format("15:04:05.000 ") + name + " "
		})))
	}
	return opts
}

func newClient(name string, opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append(baseOpts(name), opts...)...)
	if err != nil {
		fail("new client %s: %v", name, err)
	}
	return cl
}

func groupOpts() []kgo.Opt {
	var b kgo.GroupBalancer
	switch *balancer {
	case "range":
		b = kgo.RangeBalancer()
	case "sticky":
		b = kgo.StickyBalancer()
	case "cooperative-sticky":
		b = kgo.CooperativeStickyBalancer()
	default:
		fail("unknown balancer %q", *balancer)
	}
	opts := []kgo.Opt{kgo.ConsumerGroup(*group), kgo.Balancers(b), kgo.SessionTimeout(10 * time.Second),
		kgo.HeartbeatInterval(500 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond)}
	if *use848 {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	return opts
}

func createTopics(ctx context.Context, adm *kadm.Client, partitions int32, topics ...string) {
	resp, err := adm.CreateTopics(ctx, partitions, 1, nil, topics...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		fail("create topics %v: %v", topics, err)
	}
}

func headerPairs(r *kgo.Record) [][2]string {
	out := [][2]string{}
	for _, h := range r.Headers {
		out = append(out, [2]string{h.Key, string(h.Value)})
	}
	return out
}

// ------------------------------------------------------------------------ roundtrip

func roundtrip(ctx context.Context) {
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	c, ok := codecs[*codec]
	if !ok {
		fail("unknown codec %q", *codec)
	}
	cl := newClient("producer", kgo.ProducerBatchCompression(c), kgo.ProducerLinger(50*time.Millisecond))
	defer cl.Close()
	adm := kadm.NewClient(cl)
	createTopics(ctx, adm, 3, *topic)
	records := make([]*kgo.Record, *count)
	for i := range records {
		r := &kgo.Record{Topic: *topic, Key: fmt.Appendf(nil, "key-%03d", i), Value: fmt.Appendf(nil, "value-%03d", i)}
		if i%3 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "h1", Value: fmt.Appendf(nil, "x%d", i)}, {Key: "h2", Value: []byte{}}}
		}
		records[i] = r
	}
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		fail("produce: %v", err)
	}
	for _, r := range records {
		emit("produced", map[string]any{"partition": r.Partition, "offset": r.Offset, "key": string(r.Key)})
	}
	consumer := newClient("consumer", kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		*topic: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart(), 2: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	defer consumer.Close()
	got := 0
	for got < *count {
		fetches := consumer.PollFetches(ctx)
		if err := fetches.Err0(); err != nil {
			fail("consume after %d records: %v", got, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			got++
			emit("consumed", map[string]any{"partition": r.Partition, "offset": r.Offset, "key": string(r.Key),
				"value": string(r.Value), "headers": headerPairs(r)})
		})
	}
}

// ------------------------------------------------------------------------ group

// assignment tracks what a member owns now, from its callbacks.
type assignment struct {
	mu    sync.Mutex
	parts map[int32]bool
}

func (a *assignment) add(ps map[string][]int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range ps[*topic] {
		a.parts[p] = true
	}
}

func (a *assignment) remove(ps map[string][]int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range ps[*topic] {
		delete(a.parts, p)
	}
}

func (a *assignment) list() []int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []int32{}
	for p := range a.parts {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func consumerGroup(ctx context.Context) {
	const partitions = 4
	admCl := newClient("admin")
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	createTopics(ctx, adm, partitions, *topic)
	members := make([]*kgo.Client, 2)
	owned := make([]*assignment, 2)
	var consumed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for m := range members {
		a := &assignment{parts: map[int32]bool{}}
		owned[m] = a
		opts := append(groupOpts(), kgo.ConsumeTopics(*topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { a.add(ps) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { a.remove(ps) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { a.remove(ps) }))
		if *static {
			opts = append(opts, kgo.InstanceID(fmt.Sprintf("%s-%d", *group, m)))
		}
		members[m] = newClient(fmt.Sprintf("member%d", m+1), opts...)
		wg.Add(1)
		go func(m int, cl *kgo.Client) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				fetches := cl.PollFetches(pctx)
				cancel()
				fetches.EachError(func(t string, p int32, err error) {
					if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
						fail("member %d poll %s/%d: %v", m+1, t, p, err)
					}
				})
				fetches.EachRecord(func(r *kgo.Record) {
					consumed.Add(1)
					emit("consumed", map[string]any{"member": m + 1, "partition": r.Partition, "offset": r.Offset,
						"key": string(r.Key)})
				})
				if err := cl.CommitUncommittedOffsets(ctx); err != nil {
					fail("member %d commit: %v", m+1, err)
				}
			}
		}(m, members[m])
	}
	// the assignments cover the topic, without overlap, before anything is produced
	for {
		a, b := owned[0].list(), owned[1].list()
		if len(a) > 0 && len(b) > 0 && len(a)+len(b) == partitions {
			seen := map[int32]bool{}
			for _, p := range append(append([]int32{}, a...), b...) {
				seen[p] = true
			}
			if len(seen) == partitions {
				break
			}
		}
		if ctx.Err() != nil {
			fail("members never split the topic: %v and %v", a, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	emit("assigned", map[string]any{"member1": owned[0].list(), "member2": owned[1].list()})
	records := make([]*kgo.Record, *count)
	for i := range records {
		records[i] = &kgo.Record{Topic: *topic, Partition: int32(i % partitions), Key: fmt.Appendf(nil, "key-%03d", i),
			Value: fmt.Appendf(nil, "value-%03d", i)}
	}
	producer := newClient("producer", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer producer.Close()
	if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
		fail("produce: %v", err)
	}
	// every record consumed, then each member's last commit is in (one more poll round)
	for consumed.Load() < int64(*count) {
		if ctx.Err() != nil {
			fail("consumed %d of %d", consumed.Load(), *count)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ends := listEnds(ctx, adm, *topic)
	waitCommitted(ctx, adm, ends)
	close(stop)
	wg.Wait()
	emit("assigned", map[string]any{"member1": owned[0].list(), "member2": owned[1].list()})
	for _, cl := range members {
		cl.Close() // leaves the group
	}
	emitOffsets(ctx, adm, ends)
}

func listEnds(ctx context.Context, adm *kadm.Client, t string) map[int32]int64 {
	listed, err := adm.ListEndOffsets(ctx, t)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		fail("list end offsets: %v", err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return ends
}

func committed(ctx context.Context, adm *kadm.Client) map[int32]int64 {
	resp, err := adm.FetchOffsets(ctx, *group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		fail("fetch offsets: %v", err)
	}
	got := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) { got[o.Partition] = o.At })
	return got
}

// waitCommitted waits until the group's committed offsets of every partition are `ends`.
func waitCommitted(ctx context.Context, adm *kadm.Client, ends map[int32]int64) {
	for {
		got := committed(ctx, adm)
		done := len(got) == len(ends)
		for p, end := range ends {
			done = done && got[p] == end
		}
		if done {
			return
		}
		if ctx.Err() != nil {
			fail("committed offsets %v never reached the end offsets %v", got, ends)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func emitOffsets(ctx context.Context, adm *kadm.Client, ends map[int32]int64) {
	keyed := func(m map[int32]int64) map[string]int64 {
		out := map[string]int64{}
		for p, o := range m {
			out[fmt.Sprint(p)] = o
		}
		return out
	}
	emit("offsets", map[string]any{"end": keyed(ends), "committed": keyed(committed(ctx, adm))})
}

// ------------------------------------------------------------------------ etl

// member is one GroupTransactSession of the ETL.
type member struct {
	name       string
	sess       *kgo.GroupTransactSession
	done       chan struct{}
	stop       atomic.Bool
	committed  atomic.Int64 // input records whose transaction committed
	assigned   atomic.Bool  // it was given partitions
	left       atomic.Bool
	abortFirst bool // end its first transaction with an abort
}

func startMember(ctx context.Context, n int, abortFirst bool) *member {
	name := fmt.Sprintf("member%d", n)
	opts := append(baseOpts(name), groupOpts()...)
	opts = append(opts, kgo.TransactionalID(fmt.Sprintf("%s-%s", *group, name)),
		kgo.TransactionTimeout(20*time.Second), kgo.ConsumeTopics(*inTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.UnknownTopicRetries(-1))
	if *static {
		opts = append(opts, kgo.InstanceID(fmt.Sprintf("%s-%s", *group, name)))
	}
	m := &member{name: name, done: make(chan struct{}), abortFirst: abortFirst}
	opts = append(opts, kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
		if len(ps[*inTopic]) > 0 {
			m.assigned.Store(true)
		}
	}))
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		fail("%s: %v", name, err)
	}
	m.sess = sess
	go m.run(ctx)
	return m
}

func (m *member) run(ctx context.Context) {
	defer close(m.done)
	txns := 0
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fetches := m.sess.PollFetches(pctx)
		cancel()
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				fail("%s poll %s/%d: %v", m.name, t, p, err)
			}
		})
		if fetches.NumRecords() == 0 {
			if m.stop.Load() {
				return
			}
			continue
		}
		// told to leave: the transaction under way is aborted (a shutdown); member2 aborts its first
		// (a batch rolled back and done again), which on transaction version 2 is an EndTxn(abort)
		// with no partition added: its records wait for the output's metadata when it aborts
		leaving := m.stop.Load()
		commit := !leaving && !(m.abortFirst && txns == 0)
		if err := m.sess.Begin(); err != nil {
			fail("%s begin: %v", m.name, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			out := &kgo.Record{Topic: *outTopic, Key: r.Key, Value: append([]byte("etl-"), r.Value...)}
			m.sess.Produce(ctx, out, func(_ *kgo.Record, err error) {
				if err != nil && !errors.Is(err, kgo.ErrAborting) {
					fail("%s produce: %v", m.name, err)
				}
			})
		})
		ok, err := m.sess.End(ctx, kgo.TransactionEndTry(commit))
		if err != nil {
			fail("%s end transaction %d (commit %v): %v", m.name, txns+1, commit, err)
		}
		txns++
		if ok {
			m.committed.Add(int64(fetches.NumRecords()))
		}
		emit("txn", map[string]any{"member": m.name, "records": fetches.NumRecords(), "committed": ok})
		if leaving {
			return
		}
	}
}

// leave stops the member's loop (aborting the transaction under way) and closes its session
// (leaving the group).
func (m *member) leave() {
	m.stop.Store(true)
	<-m.done
	m.sess.Close()
	m.left.Store(true)
	emit("left", map[string]any{"member": m.name})
}

func etl(ctx context.Context) {
	const partitions = 4
	admCl := newClient("admin")
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	createTopics(ctx, adm, partitions, *inTopic, *outTopic)
	producer := newClient("producer", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer producer.Close()
	m1 := startMember(ctx, 1, false)
	var joined atomic.Pointer[member] // member2, once started
	var slices atomic.Int64
	produced := make(chan struct{})
	go func() { // the input, in 20 slices 100 ms apart: slice 10 once member2 owns partitions, 15 once member1 left
		defer close(produced)
		for i, slice := 0, 0; i < *count; slice++ {
			switch slice {
			case 10:
				waitFor(ctx, "member2's assignment", func() bool { m := joined.Load(); return m != nil && m.assigned.Load() })
			case 15:
				waitFor(ctx, "member1 to leave", func() bool { return m1.left.Load() })
			}
			var batch []*kgo.Record
			for j := 0; j < max(1, *count/20) && i < *count; j, i = j+1, i+1 {
				batch = append(batch, &kgo.Record{Topic: *inTopic, Partition: int32(i % partitions),
					Key: fmt.Appendf(nil, "key-%04d", i), Value: fmt.Appendf(nil, "value-%04d", i)})
			}
			if err := producer.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				fail("produce input: %v", err)
			}
			slices.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	waitFor(ctx, "member1 to commit a quarter", func() bool { return m1.committed.Load() >= int64(*count/4) })
	m2 := startMember(ctx, 2, true)
	joined.Store(m2)
	emit("joined", map[string]any{"member": m2.name})
	waitFor(ctx, "member2's assignment and slice 13", func() bool { return m2.assigned.Load() && slices.Load() >= 13 })
	m1.leave()
	<-produced
	ends := listEnds(ctx, adm, *inTopic)
	waitCommitted(ctx, adm, ends)
	m2.leave()
	emitOffsets(ctx, adm, ends)
	// the output, read_committed
	outEnds := listEnds(ctx, adm, *outTopic)
	starts := map[int32]kgo.Offset{}
	for p := range outEnds {
		starts[p] = kgo.NewOffset().AtStart()
	}
	reader := newClient("reader", kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*outTopic: starts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	defer reader.Close()
	keys := map[string]int{}
	values := map[string]string{}
	// until nothing more comes for half a second once N records are in (or for 5 s before)
	for seen, idle := 0, 0; ctx.Err() == nil; {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fetches := reader.PollFetches(pctx)
		cancel()
		if fetches.NumRecords() == 0 {
			if idle++; seen >= *count || idle >= 10 {
				break
			}
			continue
		}
		idle = 0
		fetches.EachRecord(func(r *kgo.Record) {
			seen++
			keys[string(r.Key)]++
			values[string(r.Key)] = string(r.Value)
		})
	}
	emit("output", map[string]any{"keys": keys, "values": values})
}

func waitFor(ctx context.Context, what string, cond func() bool) {
	for !cond() {
		if ctx.Err() != nil {
			fail("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ------------------------------------------------------------------------ share

// ackRule is one -rules entry: records it matches get `status`.
type ackRule struct {
	status kgo.AckStatus
	prefix string // accept:, release:, reject: a value prefix
	below  int32  // release-below: a delivery count (0: a prefix rule)
}

func parseRules(spec string) []ackRule {
	var rules []ackRule
	for _, item := range strings.Split(spec, ",") {
		if item == "" {
			continue
		}
		kind, arg, ok := strings.Cut(item, ":")
		if !ok {
			fail("bad rule %q", item)
		}
		switch kind {
		case "accept":
			rules = append(rules, ackRule{status: kgo.AckAccept, prefix: arg})
		case "release":
			rules = append(rules, ackRule{status: kgo.AckRelease, prefix: arg})
		case "reject":
			rules = append(rules, ackRule{status: kgo.AckReject, prefix: arg})
		case "release-below":
			var k int32
			if _, err := fmt.Sscan(arg, &k); err != nil || k < 1 {
				fail("bad rule %q", item)
			}
			rules = append(rules, ackRule{status: kgo.AckRelease, below: k})
		default:
			fail("unknown rule %q", item)
		}
	}
	return rules
}

func ackFor(rules []ackRule, r *kgo.Record) kgo.AckStatus {
	for _, rule := range rules {
		if rule.below > 0 {
			if r.DeliveryCount() < rule.below {
				return rule.status
			}
		} else if strings.HasPrefix(string(r.Value), rule.prefix) {
			return rule.status
		}
	}
	return kgo.AckAccept
}

// setGroupConfigs sets group configs with IncrementalAlterConfigs on the GROUP resource (kadm
// has no helper for that resource type).
func setGroupConfigs(ctx context.Context, cl *kgo.Client, spec string) {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = *group
	var set [][2]string
	for _, item := range strings.Split(spec, ",") {
		key, value, ok := strings.Cut(item, "=")
		if !ok {
			fail("bad group config %q", item)
		}
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name = key
		c.Op = kmsg.IncrementalAlterConfigOpSet
		c.Value = kmsg.StringPtr(value)
		res.Configs = append(res.Configs, c)
		set = append(set, [2]string{key, value})
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		fail("group configs %s: %v", spec, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = *r.ErrorMessage
			}
			fail("group configs %s: %v %s", spec, err, msg)
		}
	}
	for _, kv := range set {
		emit("config", map[string]any{"key": kv[0], "value": kv[1]})
	}
}

func shareSetup(ctx context.Context) {
	cl := newClient("admin", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	if *groupConfigs != "" {
		setGroupConfigs(ctx, cl, *groupConfigs)
	}
	if *create {
		createTopics(ctx, kadm.NewClient(cl), int32(*partitions), *topic)
		emit("created", map[string]any{"topic": *topic, "partitions": *partitions})
	}
	if *values == "" {
		return
	}
	var records []*kgo.Record
	for i, v := range strings.Split(*values, ",") {
		records = append(records, &kgo.Record{Topic: *topic, Partition: int32(i % *partitions), Value: []byte(v)})
	}
	for start := 0; start < len(records); start += 20 {
		chunk := records[start:min(start+20, len(records))]
		if err := cl.ProduceSync(ctx, chunk...).FirstErr(); err != nil {
			fail("produce: %v", err)
		}
	}
	for _, r := range records {
		emit("produced", map[string]any{"partition": r.Partition, "offset": r.Offset, "value": string(r.Value)})
	}
}

func share(ctx context.Context) {
	shareSetup(ctx)
	if *setupOnly {
		return
	}
	rules := parseRules(*ackRules)
	opts := []kgo.Opt{kgo.ShareGroup(*group), kgo.ConsumeTopics(*topic),
		kgo.ShareAckCallback(func(_ *kgo.Client, results kgo.ShareAckResults) {
			for _, r := range results {
				var e any
				if r.Err != nil {
					e = r.Err.Error()
				}
				emit("acked", map[string]any{"partition": r.Partition, "error": e})
			}
		})}
	if *shareMax > 0 {
		opts = append(opts, kgo.ShareMaxRecords(int32(*shareMax)))
	}
	cl := newClient("share", opts...)
	emit("polling", nil)
	got := 0
	started, last := time.Now(), time.Time{}
	reason := ""
	for reason == "" {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		var fetches kgo.Fetches
		if *maxRecords > 0 {
			fetches = cl.PollRecords(pctx, *maxRecords-got)
		} else {
			fetches = cl.PollFetches(pctx)
		}
		cancel()
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				fail("poll %s/%d: %v", t, p, err)
			}
		})
		if ctx.Err() != nil {
			fail("timed out after %d records", got)
		}
		n := 0
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			ack := "none"
			if !*hold {
				status := ackFor(rules, r)
				r.Ack(status)
				ack = status.String()
			}
			emit("record", map[string]any{"partition": r.Partition, "offset": r.Offset,
				"count": r.DeliveryCount(), "value": string(r.Value), "ack": ack})
		})
		got += n
		now := time.Now()
		if n > 0 {
			last = now
			if *hold {
				emit("holding", map[string]any{"records": n})
				for { // until killed; kgo keeps heartbeating and fetching meanwhile
					time.Sleep(time.Hour)
				}
			}
		}
		switch {
		case *maxRecords > 0 && got >= *maxRecords:
			reason = "max"
		case got > 0 && now.Sub(last) >= *idleStop:
			reason = "idle"
		case got == 0 && now.Sub(started) >= *waitFirst:
			reason = "wait"
		}
	}
	emit("stopped", map[string]any{"reason": reason, "records": got})
	if err := cl.FlushAcks(ctx); err != nil {
		fail("flush acks: %v", err)
	}
	cl.Close() // the last acks (if any) on a final ShareAcknowledge, then the leave heartbeat
	emit("closed", nil)
}

// produce sends one random value to -topic for -seconds (the bench's producer).
func produce(ctx context.Context) {
	cl := newClient("producer", kgo.DefaultProduceTopic(*topic), kgo.RequiredAcks(kgo.LeaderAck()),
		kgo.DisableIdempotentWrite(), kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(131072),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	defer cl.Close()
	value := make([]byte, *valueSize)
	if _, err := rand.Read(value); err != nil {
		fail("random value: %v", err)
	}
	var failed atomic.Int64
	count := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	until := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	records := 0
	for time.Now().Before(until) && ctx.Err() == nil {
		for i := 0; i < 1000; i++ {
			cl.Produce(ctx, &kgo.Record{Value: value}, count)
		}
		records += 1000
	}
	if err := cl.Flush(ctx); err != nil {
		fail("flush: %v", err)
	}
	emit("produced", map[string]any{"records": records, "failed": failed.Load()})
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gokafka roundtrip|group|etl|share|produce [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	if err := flag.CommandLine.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *deadline)
	defer cancel()
	switch mode {
	case "roundtrip":
		roundtrip(ctx)
	case "group":
		consumerGroup(ctx)
	case "etl":
		etl(ctx)
	case "share":
		share(ctx)
	case "produce":
		produce(ctx)
	default:
		fail("unknown mode %q", mode)
	}
	emit("done", nil)
}
