-- pgbench custom script: per-client session state through a transaction-mode pooler.
--
--   pgbench -n --protocol simple -c 200 -j 2 -T 60 -f bench/session_state.sql
--
-- (bench/session_state.sh sets up PostgreSQL and pgcorral and runs exactly that.)
-- --protocol simple is required: SET takes no bind parameters, and pgbench substitutes the
-- variables into the text instead.
--
-- Every client SETs its own TimeZone (Etc/GMT+1 .. Etc/GMT+12, by client_id) and search_path
-- (schema c<client_id>, which need not exist) and checks both, in the transaction that set
-- them and in the transactions that follow, which a pooler runs on whatever server is free.
-- A mismatch divides by zero: the transaction fails and pgbench reports it (the client is
-- aborted), so a clean run ends with "number of failed transactions: 0" and no aborted client.
\set tz 1 + :client_id % 12
-- Left over from this client's previous run, or the server's default on its first run: never
-- another client's value.
SELECT 1/(current_setting('search_path') IN ('c:client_id, public', (SELECT reset_val FROM pg_catalog.pg_settings WHERE name = 'search_path')))::int;
-- Set both, and check them in the same transaction.
BEGIN;
SET TimeZone = 'Etc/GMT+:tz';
SET search_path = c:client_id, public;
SELECT 1/(current_setting('TimeZone') = 'Etc/GMT+:tz')::int;
SELECT 1/(current_setting('search_path') = 'c:client_id, public')::int;
END;
-- The following transactions: each a separate request to the pooler.
SELECT 1/(current_setting('TimeZone') = 'Etc/GMT+:tz')::int;
SELECT 1/(current_setting('search_path') = 'c:client_id, public')::int;
SELECT 1/(current_setting('TimeZone') = 'Etc/GMT+:tz' AND current_setting('search_path') = 'c:client_id, public')::int;
BEGIN;
SELECT 1/(current_setting('TimeZone') = 'Etc/GMT+:tz')::int;
SELECT 1/(current_setting('search_path') = 'c:client_id, public')::int;
END;
-- Change TimeZone back and forth in one transaction: what counts is how it ends.
BEGIN;
SET TimeZone = 'UTC';
SET TimeZone = 'Etc/GMT+:tz';
END;
SELECT 1/(current_setting('TimeZone') = 'Etc/GMT+:tz' AND current_setting('search_path') = 'c:client_id, public')::int;
