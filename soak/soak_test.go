package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/magicsync/magicsync/internal/pgtest"
	"github.com/magicsync/magicsync/internal/testenv"
)

// upstreamCounting is a head office stand-in that counts the requests it
// took and answers each with a body of 100 bytes.
func upstreamCounting(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.WriteString(w, strings.Repeat("x", 100))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func newTestLink(t *testing.T, upstream string, odds *netOdds) (*link, *tally) {
	t.Helper()
	ta := newTally()
	l, err := newLink("register 1", func(string) string { return upstream }, ta, newLockedRand(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	if odds != nil {
		l.odds.Store(odds)
	}
	return l, ta
}

func TestTheLinkInjectsEachFaultAsItsNameSays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		odds        netOdds
		cutOff      bool
		fault       fault
		reached     int64 // requests the head office took
		wantErr     bool  // the register's request fails
		shortAnswer bool  // the register reads less than the answer
	}{
		{name: "lost before", odds: netOdds{lostBefore: 1}, fault: faultLostBefore, reached: 0, wantErr: true},
		{name: "lost after", odds: netOdds{lostAfter: 1}, fault: faultLostAfter, reached: 1, wantErr: true},
		{name: "doubled", odds: netOdds{doubled: 1}, fault: faultDoubled, reached: 2},
		{name: "partitioned", cutOff: true, fault: faultPartitioned, reached: 0, wantErr: true},
		{name: "clean", fault: "", reached: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, n := upstreamCounting(t)
			l, ta := newTestLink(t, up.URL, &tc.odds)
			l.cutOff.Store(tc.cutOff)
			resp, err := http.Post(l.url()+"/sync/next", "application/octet-stream", strings.NewReader("hello"))
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if len(b) != 100 {
					t.Errorf("the register read %d bytes of a 100-byte answer", len(b))
				}
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("the register's request failed: %v; want failed: %v", err, tc.wantErr)
			}
			l.settle()
			if got := n.Load(); got != tc.reached {
				t.Errorf("the head office took %d request(s); want %d", got, tc.reached)
			}
			if tc.fault != "" && ta.get(tc.fault) != 1 {
				t.Errorf("the tally counts %d of %q; want 1", ta.get(tc.fault), tc.fault)
			}
			if tc.fault == "" && ta.faults() != 0 {
				t.Errorf("a clean link counted %d faults", ta.faults())
			}
		})
	}
}

func TestACutAnswerReachesTheRegisterShort(t *testing.T) {
	t.Parallel()
	up, _ := upstreamCounting(t)
	// Cut draws the answer or the request half the time each: tried until
	// an answer is cut.
	l, ta := newTestLink(t, up.URL, &netOdds{cut: 1})
	for i := 0; ta.get(faultCutAnswer) == 0; i++ {
		if i == 50 {
			t.Fatal("no answer cut in 50 requests")
		}
		resp, err := http.Get(l.url() + "/sync/next")
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if ta.get(faultCutAnswer) > 0 && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("reading a cut answer: %v; want an unexpected EOF", err)
		}
	}
}

func TestTheFilingCheckCatchesEveryBrokenPromise(t *testing.T) {
	t.Parallel()
	const (
		a = "00000000-0000-0000-0000-00000000000a"
		b = "00000000-0000-0000-0000-00000000000b"
		c = "00000000-0000-0000-0000-00000000000c"
	)
	written := map[string]string{a: a + " 100", b: b + " 200"}
	for _, tc := range []struct {
		name  string
		filed []string
		gone  map[string]bool
		want  string // the first broken promise, "" for none
	}{
		{name: "all filed once", filed: []string{a + " 100", b + " 200"}},
		{name: "a row the server dropped", filed: []string{a + " 100"}, want: "never filed (lost), first " + b},
		{name: "a row filed twice", filed: []string{a + " 100", b + " 200", b + " 200"}, want: "filed more than once, first " + b},
		{name: "a row filed with other contents", filed: []string{a + " 100", b + " 250"}, want: "other contents than written, first " + b},
		{name: "a row no register wrote", filed: []string{a + " 100", b + " 200", c + " 300"}, want: "never written by a register, first " + c},
		{name: "a row gone with a restored disk", filed: []string{a + " 100"}, gone: map[string]bool{b: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			broken := compareFiling("receipts", written, tc.gone, tc.filed).broken()
			switch {
			case tc.want == "" && len(broken) > 0:
				t.Fatalf("broken: %v; want none", broken)
			case tc.want != "" && (len(broken) == 0 || !strings.Contains(broken[0], tc.want)):
				t.Fatalf("broken: %v; want first %q", broken, tc.want)
			}
		})
	}
}

func TestFaultsFlagNamesWhatIsWrong(t *testing.T) {
	t.Parallel()
	if _, err := parseFaults("net,flood"); err == nil || !strings.Contains(err.Error(), `"flood"`) || !strings.Contains(err.Error(), "net, kill") {
		t.Fatalf("parseFaults(net,flood): %v; want an error naming flood and the kinds", err)
	}
	s, err := parseFaults("net,kill")
	if err != nil || !s.has("net") || !s.has("kill") || s.has("dump") {
		t.Fatalf("parseFaults(net,kill) = %v, %v", s, err)
	}
}

// TestTheSoakCatchesEachPromiseBrokenOnPurpose runs a small soak for each
// -break kind: each run must fail, naming the promise its sabotage broke.
// Its storm is long enough for the registers, provisioned, to have sold
// and had receipts filed even on a loaded machine: drop-filed needs one.
func TestTheSoakCatchesEachPromiseBrokenOnPurpose(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the shop's programs; not under -short")
	}
	for _, prog := range []string{"initdb", "postgres", "pg_dump", "pg_restore"} {
		if _, err := pgtest.Program(t.Context(), prog); err != nil {
			testenv.Missing(t, "no local PostgreSQL "+prog+": "+err.Error(), "the soak's test of promises broken on purpose")
		}
	}
	for _, tc := range []struct{ sabotage, want string }{
		{"drop-filed", "never filed (lost)"},
		{"skip-message", "register 1's file and the head office differ"},
		{"corrupt-file", "register 1's file: "},
	} {
		t.Run(tc.sabotage, func(t *testing.T) {
			t.Parallel()
			c, err := parseFlags([]string{"-faults", "none", "-for", "15s", "-storm", "15s", "-registers", "2", "-offices", "1", "-break", tc.sabotage})
			if err != nil {
				t.Fatal(err)
			}
			c.dir = reachableTempDir(t)
			var out strings.Builder
			c.out = &out
			if code := run(t.Context(), c); code != 1 {
				t.Fatalf("the run with -break %s exited %d; want 1 (a promise broken)\n%s", tc.sabotage, code, out.String())
			}
			failed := ""
			for line := range strings.Lines(out.String()) {
				if _, after, ok := strings.Cut(line, "soak: FAILED: "); ok {
					failed = after
				}
			}
			if !strings.Contains(failed, tc.want) {
				t.Fatalf("the run with -break %s failed with %q; want it to name %q\n%s", tc.sabotage, failed, tc.want, out.String())
			}
		})
	}
}

// reachableTempDir is a folder for a run that PostgreSQL, run as the OS
// user postgres when the tests run as root, can enter.
func reachableTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "magicsync-soak-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
