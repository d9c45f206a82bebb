-- Ops stats: outbox rows per phase.
SELECT phase, count(*) FROM oncebox.outbox GROUP BY phase ORDER BY phase
