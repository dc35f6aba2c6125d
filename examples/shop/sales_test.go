package main

import (
	"fmt"
	"testing"
)

// The head office's live sales total follows the receipts as they are
// filed: it comes to the sum of the receipts filed, each counted once,
// without being asked.
func TestTheLiveSalesTotalFollowsTheReceiptsFiled(t *testing.T) {
	t.Parallel()
	s := startShop(t, true)
	rnd := seeded(t)
	n := len(productNames)
	s.waitHoldings(all(n, n))
	for range 2 {
		for _, r := range s.regs {
			s.sell(r, rnd)
		}
	}
	waitFor(t, "the live total to come to the receipts filed", func() error {
		var cents int64
		var filed int
		if err := s.ho.pool.QueryRow(s.ctx, "SELECT coalesce(sum(total_cents), 0), count(*) FROM shop.receipts").Scan(&cents, &filed); err != nil {
			return err
		}
		live, counted := s.ho.sales.now()
		if filed != 2*len(s.regs) || live != cents || counted != filed {
			return fmt.Errorf("live €%d.%02d from %d receipts; filed €%d.%02d from %d of %d", live/100, live%100, counted,
				cents/100, cents%100, filed, 2*len(s.regs))
		}
		return nil
	})
}
