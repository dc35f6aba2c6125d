package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The suite passes with the engine's own tables in another schema than
// public (server.Options.Schema): this test runs this binary's tests again,
// in short mode, with the harness's engine in magicsync_engine, and checks
// that they ran and passed. Left out of the second run: the hostile
// neighbour, which measures the process's latency and memory, and the
// offline batch split under the body limit, which tests the transport
// alone and, run a second time beside the rest of the suite under the
// race detector, outgrows its minute on a slow machine.
func TestSuiteInAnotherSchema(t *testing.T) {
	if os.Getenv(schemaVar) != "" {
		t.Skip("already the run in another schema")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.short", "-test.count=1", "-test.v",
		"-test.skip", "^(TestSuiteInAnotherSchema|TestHostileNeighbour.*|TestOfflineBatchLargerThanTheBodyLimitIsSplitAndAllFiled)$")
	cmd.Env = append(os.Environ(), schemaVar+"=magicsync_engine")
	out, err := cmd.CombinedOutput()
	passed := regexp.MustCompile(`(?m)^--- PASS: Test\w+`).FindAll(out, -1)
	if err != nil {
		t.Fatalf("the suite with the engine in schema magicsync_engine failed (%v); what failed:\n%s\nthe end of its output:\n%s", err, failures(out, 80), tail(out, 20))
	}
	if len(passed) < 8 {
		t.Fatalf("the suite in schema magicsync_engine passed %d tests; want the whole suite (8 or more):\n%s", len(passed), tail(out, 60))
	}
	t.Logf("%d tests passed with the engine in schema magicsync_engine", len(passed))
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
