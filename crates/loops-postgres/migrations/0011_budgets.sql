-- 0011_budgets (issue #20, item 7): budgets (`loops_core::budget`). `budgets` holds the
-- store-wide ones (`loops budget set`): a provider, an account profile ('' for every
-- account of the provider), and a token and/or dollar limit in their stored form
-- ('200000/day', '5/week'); a loop's own budgets are in its ops_json. `budget_holds`
-- is a spent budget holding its loops until its UTC window ends, one row per scope
-- ('loop:ID', 'provider=claude', 'provider=claude,account=work') and metric ('tokens',
-- 'usd'): `loop_id` for a loop's own budget, else `provider` and `account` (NULL: every
-- account) for the due-loop queries of every runner. A finalization writes and deletes
-- the rows in its transaction, under an advisory lock of the scope, so that one `held`
-- notification is queued per budget however many runners spend it at once.
CREATE TABLE budgets (
    provider    TEXT NOT NULL,
    account     TEXT NOT NULL,
    tokens      TEXT,
    usd         TEXT,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (provider, account)
);
CREATE TABLE budget_holds (
    scope       TEXT NOT NULL,
    metric      TEXT NOT NULL,
    loop_id     TEXT,
    provider    TEXT,
    account     TEXT,
    held_until  BIGINT NOT NULL,
    reason      TEXT NOT NULL,
    notified    BOOLEAN NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (scope, metric)
);
-- A loop's spend in its window (the finalization's budget check).
CREATE INDEX runs_loop_usage ON runs (loop_id, finished_at) WHERE usage_json IS NOT NULL;
