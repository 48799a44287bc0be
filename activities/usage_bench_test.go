package activities

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// meterSamples is how many calls BenchmarkMeterCall times.
const meterSamples = 200

// BenchmarkMeterCall: what metering adds to one model call the worker relays, on a real
// PostgreSQL: the budget check before the call, reading the usage off a streamed answer as it
// passes, and the ledger row after it (MeterCall), beside one round trip to the same database
// (RawDatabasePing), the floor of any check or row.
func BenchmarkMeterCall(b *testing.B) {
	st := storetest.New(b)
	ctx := context.Background()
	u, err := st.CreateUser(ctx, store.NewUser{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	box, err := st.CreateBox(ctx, store.NewBox{ID: "bx_00000000000000b1", Owner: u.ID, Name: "bench", Size: "small"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.CreateAgentRun(ctx, store.NewAgentRun{ID: "run_bench", BoxID: box.ID, Owner: u.ID, Task: "t", Model: "m", MaxTokens: 1 << 40}); err != nil {
		b.Fatal(err)
	}
	// An answer of 200 text chunks and a usage chunk, as a chat completion streams it.
	var answer strings.Builder
	for range 200 {
		answer.WriteString(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n")
	}
	answer.WriteString(`data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":200}}` + "\n\ndata: [DONE]\n\n")
	mt := &meter{ledger: st, call: store.ModelCall{RunID: "run_bench", Step: 1, BoxID: box.ID, User: u.ID, Model: "m"}}
	var meter, ping []time.Duration
	for range meterSamples {
		start := time.Now()
		if err := mt.allow(ctx); err != nil {
			b.Fatal(err)
		}
		var u usageScanner
		_, _ = io.Copy(&u, strings.NewReader(answer.String()))
		if err := mt.record(ctx, 200, &u, time.Millisecond); err != nil {
			b.Fatal(err)
		}
		meter = append(meter, time.Since(start))
		start = time.Now()
		if err := st.Ping(ctx); err != nil {
			b.Fatal(err)
		}
		ping = append(ping, time.Since(start))
	}
	benchreport.Taken(b, "MeterCall", meter)
	benchreport.Taken(b, "RawDatabasePing", ping)
}
