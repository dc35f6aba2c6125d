package e2e

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/magicsync/magicsync/internal/testenv"
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
	rerunSuite(t, []string{schemaVar + "=magicsync_engine"}, "with the engine in schema magicsync_engine", nil, 0)
}

// underLogicalCapture are the suite's tests of what the way of capture
// decides — the routes, the property tests and the chaos, a transaction
// committing late, rows written before the first run, restores of the
// head office — which TestSuiteUnderLogicalCapture runs again.
var underLogicalCapture = regexp.MustCompile(`^(TestRowsReachExactlyTheReplicasTheirRoutesName|TestRandomRouteHistoriesSettle|` +
	`TestRandomHistoriesSettle|TestChaosProductsArriveWhileSalesContinue|TestManyRegistersUnderLossAndDuplicationSettle|` +
	`TestLateCommittingTransactionIsNotSkipped|TestCatalogRowsWrittenDuringSetupAreSetStraightByTheFirstProvisioning|` +
	`TestReadmeScenarioOfflineRegisterConverges|TestHeadOfficeRestoredFromADumpLosesNoReceipt|` +
	`TestACatalogWithARowTheRegisterCouldNotTakeStillHealsADisagreement|TestAWishIsCarriedOutOnTheRegisterAndShownApplied|` +
	`TestACommandRunsOnTheRegisterAndTheHeadOfficeShowsItsResult)$`)

// The suite's tests of what the way of capture decides pass with the head
// offices capturing the host's changes by logical replication
// (server.CaptureLogical) rather than by triggers: this test runs them
// again, in short mode, on a server with wal_level=logical, as
// TestSuiteInAnotherSchema runs the suite in another schema. Four at a
// time: each head office's slot has PostgreSQL decode the whole cluster's
// WAL, every test's database's. The head offices linger
// (server.Options.Linger) in this run: passes, the slot reader's notes and
// each register's messages of changes come a linger apart, and every
// change must still arrive.
func TestSuiteUnderLogicalCapture(t *testing.T) {
	if os.Getenv(schemaVar) != "" || logicalCapture() {
		t.Skip("already a run of the suite again")
	}
	t.Parallel()
	rerunSuite(t, []string{captureVar + "=logical", lingerVar + "=30ms"}, "under logical capture, lingering 30ms", underLogicalCapture, 4)
}

// rerunSuite runs this binary's tests again in short mode with env set —
// those only matches (nil: all) less those left out — at most parallel at
// a time (0: as the run was asked), and checks that every one of them ran
// and passed; how names the run in its messages.
func rerunSuite(t *testing.T, env []string, how string, only *regexp.Regexp, parallel int) {
	t.Helper()
	// Twelve minutes: alone, the second run takes a minute and a half; in
	// CI, beside every other package's tests on two cores, it once took
	// more than seven.
	testenv.RunAgain(t, testenv.Rerun{Env: env, How: how, Only: only, Parallel: parallel, AtLeast: 10, Timeout: 12 * time.Minute,
		LeftOut: regexp.MustCompile("^(TestSuiteInAnotherSchema|TestSuiteUnderLogicalCapture|TestHostileNeighbour.*|TestOfflineBatchLargerThanTheBodyLimitIsSplitAndAllFiled)$")})
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
