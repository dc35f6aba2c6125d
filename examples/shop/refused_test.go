package main

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/magicsync/magicsync/transport/httpsync"
)

// TestRegisterSaysWhenTheHeadOfficeRefusesIt rotates a running register's
// token at the head office: the register says so in plain words, without
// -v, and goes on selling; its sales wait on it, none set aside, and once
// it starts again with the new token every one of them is filed.
func TestRegisterSaysWhenTheHeadOfficeRefusesIt(t *testing.T) {
	t.Parallel()
	s, tokenFile := startShopForRegister1(t)
	ho := s.ho
	data := t.TempDir()
	run := func() (*program, context.CancelFunc) {
		ctx, stop := context.WithCancel(t.Context())
		p := &program{name: "register 1", done: make(chan struct{})}
		c := registerConfig{n: 1, server: ho.url, tokenFile: tokenFile, data: data, every: 20 * time.Millisecond,
			poll: testPoll, out: &p.out}
		go func() {
			p.err = runRegister(ctx, c)
			close(p.done)
		}()
		t.Cleanup(func() {
			stop()
			<-p.done
			if t.Failed() {
				t.Logf("register 1 printed:\n%s", p.out.String())
			}
		})
		return p, stop
	}
	p, stop := run()
	p.await(t, 0, saleRE)
	secret, err := ho.engine.Credentials(t.Context(), registerID(0))
	if err != nil {
		t.Fatal(err)
	}
	_, refused := p.await(t, 0, `register 1: the head office refuses what it sends, so its sales wait on the register \(nothing is lost\): .*401`)
	p.await(t, refused, saleRE)
	stop()
	<-p.done
	printed := p.out.String()

	if err := os.WriteFile(tokenFile, []byte(httpsync.JoinToken(registerID(0), secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p2, _ := run()
	p2.await(t, 0, saleRE)
	var receipts []string
	for _, m := range regexp.MustCompile(saleRE).FindAllStringSubmatch(printed+p2.out.String(), -1) {
		receipts = append(receipts, m[3])
	}
	waitAllFiled(t, ho, receipts)
}
