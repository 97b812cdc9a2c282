-- 0021_run_counts: the number of runs of each status created in each hour (`hour` is
-- `created_at` in whole hours since the epoch, rounded down, also before 1970), so the
-- dashboard's day of counts reads ~24 rows per status, not every run of the day.
-- Triggers keep it exact whatever writes `runs` (claims, finalizations, pruning,
-- removing a loop, imports, copies); a row that reaches 0 is deleted, so the table
-- never holds more than the hours and statuses that still have runs.
CREATE TABLE run_counts (
    hour   INTEGER NOT NULL,
    status TEXT NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (hour, status)
) WITHOUT ROWID;

INSERT INTO run_counts (hour, status, n)
SELECT created_at / 3600000 - (created_at < 0 AND created_at % 3600000 <> 0), status, COUNT(*)
FROM runs GROUP BY 1, 2;

CREATE TRIGGER run_counts_insert AFTER INSERT ON runs BEGIN
    INSERT INTO run_counts (hour, status, n)
    VALUES (NEW.created_at / 3600000 - (NEW.created_at < 0 AND NEW.created_at % 3600000 <> 0),
            NEW.status, 1)
    ON CONFLICT (hour, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER run_counts_update AFTER UPDATE OF status, created_at ON runs
WHEN OLD.status IS NOT NEW.status OR OLD.created_at IS NOT NEW.created_at BEGIN
    UPDATE run_counts SET n = n - 1
    WHERE hour = OLD.created_at / 3600000 - (OLD.created_at < 0 AND OLD.created_at % 3600000 <> 0)
      AND status = OLD.status;
    DELETE FROM run_counts
    WHERE hour = OLD.created_at / 3600000 - (OLD.created_at < 0 AND OLD.created_at % 3600000 <> 0)
      AND status = OLD.status AND n <= 0;
    INSERT INTO run_counts (hour, status, n)
    VALUES (NEW.created_at / 3600000 - (NEW.created_at < 0 AND NEW.created_at % 3600000 <> 0),
            NEW.status, 1)
    ON CONFLICT (hour, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER run_counts_delete AFTER DELETE ON runs BEGIN
    UPDATE run_counts SET n = n - 1
    WHERE hour = OLD.created_at / 3600000 - (OLD.created_at < 0 AND OLD.created_at % 3600000 <> 0)
      AND status = OLD.status;
    DELETE FROM run_counts
    WHERE hour = OLD.created_at / 3600000 - (OLD.created_at < 0 AND OLD.created_at % 3600000 <> 0)
      AND status = OLD.status AND n <= 0;
END;
