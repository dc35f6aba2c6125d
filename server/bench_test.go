package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/magicsync/magicsync/server"
)

// BenchmarkBroadcastFanout plans 10,000 changed broadcast rows and delivers
// them to 100 replicas, reporting row deliveries per second.
func BenchmarkBroadcastFanout(b *testing.B) {
	sh := newShop(b, server.Options{})
	var regs []*fake
	for range 100 {
		regs = append(regs, sh.register(sh.shopA))
	}
	sh.pass()
	for _, r := range regs {
		r.sync()
	}
	sh.exec(`INSERT INTO shop.currencies (code, rate) SELECT 'c' || i, i FROM generate_series(1, 10000) i`)
	sh.pass()
	for _, r := range regs {
		r.sync()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sh.exec(`UPDATE shop.currencies SET rate = rate + 1`)
		start := time.Now()
		sh.pass()
		plan := time.Since(start)
		var mu sync.Mutex
		last := start
		var wg sync.WaitGroup
		for _, r := range regs {
			wg.Go(func() {
				for {
					ctx, cancel := context.WithTimeout(sh.ctx, 300*time.Millisecond)
					msg, ok, err := sh.s.Endpoint().Next(ctx, r.id, server.Applied{})
					cancel()
					if err != nil {
						b.Error(err)
						return
					}
					if !ok {
						return
					}
					if err := sh.s.Endpoint().Ack(sh.ctx, r.id, msg.ID); err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					last = time.Now()
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		d := last.Sub(start)
		b.StopTimer()
		st, err := sh.s.Status(sh.ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range st {
			if s.Queued != 0 {
				b.Fatalf("replica %s has %d queued", s.ID, s.Queued)
			}
		}
		b.StartTimer()
		b.ReportMetric(float64(10000*len(regs))/d.Seconds(), "deliveries/s")
		b.ReportMetric(plan.Seconds(), "plan-s")
	}
}
