//! The tables of the SQLite file, as version 1 created them and as each
//! version since changed them. The operator's view of them is in
//! `docs/stores.md`, "The SQLite store".

/// The statements that take a file from version `i + 1` to `i + 2`, in
/// order. A new file runs them all after [`CREATE`], so a new file and an
/// upgraded one have the same tables by construction.
pub(super) const MIGRATIONS: &[&str] = &[TO_2, TO_3, TO_4, TO_5, TO_6, TO_7, TO_8, TO_9, TO_10];

/// Version 1: the budget books.
pub(super) const CREATE: &str = "
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- One row per scope and period. `spent + reserved` is the counter a
-- reserve checks against the cap; `folded` is the sum of the ledger
-- entries of this period moved out of `ledger` by retention.
CREATE TABLE counters (
    scope_kind          TEXT    NOT NULL,   -- 'key' | 'org'
    scope_id            TEXT    NOT NULL,
    period_id           TEXT    NOT NULL,   -- '2026-11-30', '2026-11', 'total', ...
    spent_usd_micros    INTEGER NOT NULL DEFAULT 0,
    reserved_usd_micros INTEGER NOT NULL DEFAULT 0,
    folded_usd_micros   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope_kind, scope_id, period_id)
) WITHOUT ROWID;

-- One row per call the gateway reserved (or was denied), kept while open
-- and, once closed, as long as a retry of it can still arrive.
CREATE TABLE reservations (
    exec_id             TEXT    PRIMARY KEY,
    state               TEXT    NOT NULL,   -- 'open' | 'settled' | 'expired' | 'denied'
    key_id              TEXT    NOT NULL,
    key_period_id       TEXT    NOT NULL,
    key_cap_usd_micros  INTEGER NOT NULL,
    org_id              TEXT,
    org_period_id       TEXT,
    org_cap_usd_micros  INTEGER,
    amount_usd_micros   INTEGER NOT NULL,
    claim               TEXT,               -- the client's Idempotency-Key
    started_at          INTEGER NOT NULL,   -- Unix milliseconds
    deadline            INTEGER NOT NULL,   -- Unix milliseconds
    ttl_ms              INTEGER NOT NULL,
    forget_at           INTEGER,            -- set once closed
    expiry_charged_usd_micros INTEGER,      -- 'expired': what expiry charged
    settled_status      TEXT,               -- 'settled': the first answer
    settled_actual_usd_micros INTEGER,
    settled_key_remaining_usd_micros INTEGER,
    denied_scope_kind   TEXT,               -- 'denied': the first answer
    denied_scope_id     TEXT,
    denied_period       TEXT,
    denied_cap_usd_micros INTEGER,
    denied_remaining_usd_micros INTEGER,
    denied_resets_at    INTEGER
) WITHOUT ROWID;
CREATE INDEX reservations_open_by_deadline ON reservations (deadline) WHERE state = 'open';
CREATE INDEX reservations_closed_by_forget_at ON reservations (forget_at) WHERE forget_at IS NOT NULL;

-- Idempotency-Key claims held by open reservations.
CREATE TABLE claims (
    claim   TEXT PRIMARY KEY,
    exec_id TEXT NOT NULL
) WITHOUT ROWID;

-- One row per settled, expired, late or adjustment entry: what moved the
-- counters of the key (in `key_period_id`) and of its org (in
-- `org_period_id`).
CREATE TABLE ledger (
    seq                 INTEGER PRIMARY KEY,
    exec_id             TEXT    NOT NULL,
    key                 TEXT    NOT NULL,
    org                 TEXT,
    model               TEXT    NOT NULL,
    input_tokens        INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    tool_calls          TEXT,               -- JSON, e.g. {\"web_search\": 2}
    reserved_usd_micros INTEGER NOT NULL,
    actual_usd_micros   INTEGER NOT NULL,
    status              TEXT    NOT NULL,   -- ok | overrun | estimated | late | expired (| adjustment, from version 3)
    at                  TEXT    NOT NULL,   -- RFC 3339 UTC, milliseconds
    key_period_id       TEXT    NOT NULL,
    org_period_id       TEXT
);
CREATE INDEX ledger_by_time ON ledger (at);
";

/// Version 2: the admin API's keys and orgs (`budget::records`). The store
/// never reads a document's body; it keeps the revision a write must name,
/// the version every write moves on, and the audit trail.
pub(super) const TO_2: &str = "
-- One row per key or org document; a deleted one stays, saying so.
CREATE TABLE records (
    kind     TEXT    NOT NULL,   -- 'key' | 'org'
    id       TEXT    NOT NULL,
    revision INTEGER NOT NULL,   -- 1 when created, one more on every write
    body     TEXT    NOT NULL,   -- JSON
    PRIMARY KEY (kind, id)
) WITHOUT ROWID;

-- One row per applied write, numbered by the version it moved the store to.
CREATE TABLE audit (
    seq  INTEGER PRIMARY KEY,    -- = the records_version the write reached
    at   TEXT    NOT NULL,       -- RFC 3339 UTC, milliseconds
    body TEXT    NOT NULL        -- JSON, as the writer gave it
);

-- One more on every applied write; gateways poll it to see changes.
INSERT INTO meta (name, value) VALUES ('records_version', '0');
";

/// Version 3: operators' adjustments. The ledger keeps each one's note,
/// and `adjustments` remembers those applied, for retries.
pub(super) const TO_3: &str = "
ALTER TABLE ledger ADD COLUMN note TEXT;   -- an adjustment's note

-- One row per operator adjustment applied, kept as long as a retry of it
-- can arrive: its first answer.
CREATE TABLE adjustments (
    exec_id              TEXT    PRIMARY KEY,
    key_id               TEXT    NOT NULL,
    org_id               TEXT,
    key_period_id        TEXT    NOT NULL,
    org_period_id        TEXT,
    key_spent_usd_micros INTEGER NOT NULL,   -- the key's spent right after it
    forget_at            INTEGER NOT NULL    -- Unix milliseconds
) WITHOUT ROWID;
CREATE INDEX adjustments_by_forget_at ON adjustments (forget_at);
";

/// Version 4: spend aggregates (`budget::aggregates`), one row per UTC
/// day, key and model, upserted with every ledger entry and kept
/// `store.aggregate_retention_days`. An upgraded file gets rows for the
/// ledger entries it still holds (older ones were folded into counters,
/// which keep no day or model).
pub(super) const TO_4: &str = "
CREATE TABLE aggregates (
    day                 TEXT    NOT NULL,   -- 'YYYY-MM-DD', UTC, when the entries were written
    key                 TEXT    NOT NULL,
    org                 TEXT,               -- the key's org, fixed per key
    model               TEXT    NOT NULL,   -- '' for expiries
    calls               INTEGER NOT NULL,   -- settles on time and expiries (late: 0)
    input_tokens        INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cost_usd_micros     INTEGER NOT NULL,   -- Σ ledger actual_usd_micros (signed)
    PRIMARY KEY (day, key, model)
) WITHOUT ROWID;

INSERT INTO aggregates (day, key, org, model, calls, input_tokens, cached_input_tokens,
    cache_write_tokens, output_tokens, cost_usd_micros)
SELECT substr(at, 1, 10), key, MAX(org), model,
       SUM(CASE WHEN status IN ('ok', 'overrun', 'estimated', 'expired') THEN 1 ELSE 0 END),
       SUM(input_tokens), SUM(cached_input_tokens), SUM(cache_write_tokens),
       SUM(output_tokens), SUM(actual_usd_micros)
  FROM ledger
 GROUP BY substr(at, 1, 10), key, model;
";

/// Version 5: each reservation keeps the model its call was for, so the
/// admin API's open holds name it and an expiry books its ledger entry and
/// aggregate row against it. Rows written before stay NULL: their holds
/// and expiries name no model (''), as before.
pub(super) const TO_5: &str = "
ALTER TABLE reservations ADD COLUMN model TEXT;   -- the call's model
";

/// Agent runs: a third scope inside a key (`counters` rows of kind `run`,
/// id `<key>/<run>`, period `total`), its cap and last call, and the run
/// on every reservation, ledger entry and spend aggregate row (the table
/// is rebuilt: the run joins its primary key; rows before it had none).
pub(super) const TO_6: &str = "
CREATE TABLE runs (
    id             TEXT PRIMARY KEY,   -- `<key id>/<run id>`
    cap_usd_micros INTEGER,            -- fixed by its first call; NULL: not capped
    last_used      INTEGER NOT NULL    -- ms: its last reserve or settle
) STRICT;
ALTER TABLE reservations ADD COLUMN run_id TEXT;   -- `<key id>/<run id>`
ALTER TABLE ledger ADD COLUMN run TEXT;            -- the run id the client named

CREATE TABLE aggregates_by_run (
    day                 TEXT    NOT NULL,
    key                 TEXT    NOT NULL,
    org                 TEXT,
    run                 TEXT    NOT NULL,   -- the run id the client named; '' outside a run
    model               TEXT    NOT NULL,
    calls               INTEGER NOT NULL,
    input_tokens        INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cost_usd_micros     INTEGER NOT NULL,
    PRIMARY KEY (day, key, run, model)
) WITHOUT ROWID;
INSERT INTO aggregates_by_run (day, key, org, run, model, calls, input_tokens,
    cached_input_tokens, cache_write_tokens, output_tokens, cost_usd_micros)
SELECT day, key, org, '', model, calls, input_tokens, cached_input_tokens,
       cache_write_tokens, output_tokens, cost_usd_micros
  FROM aggregates;
DROP TABLE aggregates;
ALTER TABLE aggregates_by_run RENAME TO aggregates;
";

/// Spending alerts waiting for the webhook, and the ids of those
/// delivered (kept until `forget_at`, so an event is never queued twice).
pub(super) const TO_7: &str = "
CREATE TABLE alerts (
    id           TEXT PRIMARY KEY,     -- derived from scope, period, type, threshold
    body         TEXT NOT NULL,        -- the JSON the webhook receives, as queued
    attempts     INTEGER NOT NULL,     -- failed deliveries so far
    due          INTEGER NOT NULL,     -- ms: when it may be sent (again)
    delivered_at INTEGER,              -- ms; NULL while it waits
    forget_at    INTEGER               -- ms: when a delivered id may be forgotten
) STRICT;
";

/// Version 8: the ledger loses its index on `at`. Every settle added to
/// it, one more page written per call, and only the retention's fold read
/// it, which finds the entries to fold in `seq` order instead: the one
/// writer books them in time order.
pub(super) const TO_8: &str = "
DROP INDEX ledger_by_time;
";

/// Version 9: the journal (`journal`). Calls are appended to it before
/// they are answered and posted to these tables behind them; the file
/// records the last record posted, in the transaction that posts it. A
/// binary of an earlier version, which would not read the journal, refuses
/// the file.
pub(super) const TO_9: &str = "
INSERT INTO meta (name, value) VALUES ('journal_seq', '0');
";

/// Version 10: caps beyond the key's, org's and run's money (model groups,
/// customers, rate limits). Their counters are `counters` rows of kind
/// `model` (id `key:<key>/<group>` or `org:<org>/<group>`) or `customer`
/// (id `<key>/<customer>`), or of any kind under a period id naming the
/// meter (`2026-12-07T1849/requests`); each reservation keeps the caps it
/// holds, its token bound and its customer, and a denial the meter of the
/// cap that refused it. Each key's customers are remembered with their
/// last call; ledger entries and spend aggregates carry the customer (the
/// aggregates table is rebuilt: the customer joins its primary key). The
/// journal's records are format 2 from this version on.
pub(super) const TO_10: &str = "
ALTER TABLE reservations ADD COLUMN caps TEXT;          -- one `kind meter period_id cap id` a line
ALTER TABLE reservations ADD COLUMN tokens INTEGER;     -- the token bound a `tokens` cap holds
ALTER TABLE reservations ADD COLUMN denied_meter TEXT;  -- 'denied': NULL for money
ALTER TABLE reservations ADD COLUMN customer TEXT;      -- the customer id the call named
ALTER TABLE ledger ADD COLUMN customer TEXT;            -- the customer id the call named

-- The rate limits' counters, by minute, so the sweep forgets past minutes
-- without reading every other counter.
CREATE INDEX counters_rate_windows ON counters (period_id)
 WHERE period_id LIKE '%/requests' OR period_id LIKE '%/tokens';

CREATE TABLE customers (
    key       TEXT    NOT NULL,
    customer  TEXT    NOT NULL,
    last_call INTEGER NOT NULL,   -- ms: its last reserve
    PRIMARY KEY (key, customer)
) WITHOUT ROWID;
CREATE INDEX customers_by_last_call ON customers (last_call);

CREATE TABLE aggregates_by_customer (
    day                 TEXT    NOT NULL,
    key                 TEXT    NOT NULL,
    org                 TEXT,
    run                 TEXT    NOT NULL,   -- '' outside a run
    customer            TEXT    NOT NULL,   -- '' for calls that named none
    model               TEXT    NOT NULL,
    calls               INTEGER NOT NULL,
    input_tokens        INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cost_usd_micros     INTEGER NOT NULL,
    PRIMARY KEY (day, key, run, customer, model)
) WITHOUT ROWID;
INSERT INTO aggregates_by_customer (day, key, org, run, customer, model, calls, input_tokens,
    cached_input_tokens, cache_write_tokens, output_tokens, cost_usd_micros)
SELECT day, key, org, run, '', model, calls, input_tokens, cached_input_tokens,
       cache_write_tokens, output_tokens, cost_usd_micros
  FROM aggregates;
DROP TABLE aggregates;
ALTER TABLE aggregates_by_customer RENAME TO aggregates;
";
