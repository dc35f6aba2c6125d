package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The suite passes with the engine's own tables in another schema than
// public (server.Options.Schema): this test runs this binary's tests again,
// in short mode, with the harness's engine in magicsync_engine, and checks
// that every one of them ran and passed — each test the binary lists, less
// those left out by name. Left out of the second run: the hostile
// neighbour, which measures the process's latency and memory, and the
// offline batch split under the body limit, which tests the transport
// alone and, run a second time beside the rest of the suite under the
// race detector, outgrows its minute on a slow machine.
func TestSuiteInAnotherSchema(t *testing.T) {
	if os.Getenv(schemaVar) != "" || logicalCapture() {
		t.Skip("already a run of the suite again")
	}
	t.Parallel()
	rerunSuite(t, schemaVar+"=magicsync_engine", "with the engine in schema magicsync_engine", nil, 0)
}

// underLogicalCapture are the suite's tests of what the way of capture
// decides — the routes, the property tests and the chaos, a transaction
// committing late, rows written before the first run, restores of the
// head office — which TestSuiteUnderLogicalCapture runs again.
var underLogicalCapture = regexp.MustCompile(`^(TestRowsReachExactlyTheReplicasTheirRoutesName|TestRandomRouteHistoriesSettle|` +
	`TestRandomHistoriesSettle|TestChaosProductsArriveWhileSalesContinue|TestManyRegistersUnderLossAndDuplicationSettle|` +
	`TestLateCommittingTransactionIsNotSkipped|TestCatalogRowsWrittenDuringSetupAreSetStraightByTheFirstProvisioning|` +
	`TestReadmeScenarioOfflineRegisterConverges|TestHeadOfficeRestoredFromADumpLosesNoReceipt|` +
	`TestACatalogWithARowTheRegisterCouldNotTakeStillHealsADisagreement|TestAWishIsCarriedOutOnTheRegisterAndShownApplied)$`)

// The suite's tests of what the way of capture decides pass with the head
// offices capturing the host's changes by logical replication
// (server.CaptureLogical) rather than by triggers: this test runs them
// again, in short mode, on a server with wal_level=logical, as
// TestSuiteInAnotherSchema runs the suite in another schema. Four at a
// time: each head office's slot has PostgreSQL decode the whole cluster's
// WAL, every test's database's.
func TestSuiteUnderLogicalCapture(t *testing.T) {
	if os.Getenv(schemaVar) != "" || logicalCapture() {
		t.Skip("already a run of the suite again")
	}
	t.Parallel()
	rerunSuite(t, captureVar+"=logical", "under logical capture", underLogicalCapture, 4)
}

// rerunSuite runs this binary's tests again in short mode with env set —
// those only matches (nil: all) less those left out — at most parallel at
// a time (0: as the run was asked), and checks that every one of them ran
// and passed; how names the run in its messages.
func rerunSuite(t *testing.T, env, how string, only *regexp.Regexp, parallel int) {
	t.Helper()
	const leftOut = "^(TestSuiteInAnotherSchema|TestSuiteUnderLogicalCapture|TestHostileNeighbour.*|TestOfflineBatchLargerThanTheBodyLimitIsSplitAndAllFiled)$"
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	want := suiteTests(ctx, t, regexp.MustCompile(leftOut))
	args := []string{"-test.short", "-test.count=1", "-test.v", "-test.skip", leftOut}
	if only != nil {
		want = slices.DeleteFunc(want, func(name string) bool { return !only.MatchString(name) })
		args = append(args, "-test.run", only.String())
	}
	if len(want) < 10 {
		t.Fatalf("the binary lists %d tests to run again: %v; want more", len(want), want)
	}
	if parallel > 0 {
		args = append(args, "-test.parallel", strconv.Itoa(parallel))
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the suite %s failed (%v); what failed:\n%s\nthe end of its output:\n%s", how, err, failures(out, 80), tail(out, 20))
	}
	passed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^--- PASS: (\w+) `).FindAllSubmatch(out, -1) {
		passed[string(m[1])] = true
	}
	var missing []string
	for _, name := range want {
		if !passed[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s, %d of the %d tests did not pass (skipped, or never run): %v\nthe end of its output:\n%s",
			how, len(missing), len(want), missing, tail(out, 40))
	}
	t.Logf("all %d tests passed %s", len(want), how)
}

// suiteTests lists the tests of this binary (its -test.list), less those
// leftOut matches.
func suiteTests(ctx context.Context, t *testing.T, leftOut *regexp.Regexp) []string {
	t.Helper()
	out, err := exec.CommandContext(ctx, os.Args[0], "-test.list", ".").Output()
	if err != nil {
		t.Fatalf("listing the tests: %v\n%s", err, out)
	}
	var names []string
	for line := range strings.Lines(string(out)) {
		name := strings.TrimSpace(line)
		if strings.HasPrefix(name, "Test") && !leftOut.MatchString(name) {
			names = append(names, name)
		}
	}
	return names
}

// The harness puts the engine where engineSchema says, and nothing of it
// in public when that is another schema.
func TestHarnessPutsTheEngineInItsSchema(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), newOfficeDatabase(t, shopCodecs(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var inEngine, inPublic int
	if err := pool.QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE n.nspname = $1),
		count(*) FILTER (WHERE n.nspname = 'public')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname LIKE 'sync\_%' AND c.relkind = 'r'`, engineSchema()).Scan(&inEngine, &inPublic); err != nil {
		t.Fatal(err)
	}
	if inEngine == 0 {
		t.Errorf("no engine table in schema %s", engineSchema())
	}
	if engineSchema() != "public" && inPublic != 0 {
		t.Errorf("%d engine tables in public; want them all in %s", inPublic, engineSchema())
	}
}

// tail is the last n lines of out.
func tail(out []byte, n int) []byte {
	lines := bytes.Split(out, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return bytes.Join(lines, []byte("\n"))
}

// failures picks, from a verbose test run's output, the lines that say
// what failed: the FAIL lines and the messages of the tests (file:line),
// at most n of them.
func failures(out []byte, n int) []byte {
	said := regexp.MustCompile(`^\s*(--- FAIL|panic:|\w+_test\.go:\d+: )`)
	var picked [][]byte
	for _, line := range bytes.Split(out, []byte("\n")) {
		if said.Match(line) && len(picked) < n {
			picked = append(picked, line)
		}
	}
	return bytes.Join(picked, []byte("\n"))
}
