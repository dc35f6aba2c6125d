-- magicsync server, step 11: reserved for commands (issue 27), which the
-- commands branch adds; this stand-in keeps the steps numbered without a
-- gap until it lands, and gives way to it on merge.
SELECT 1;
