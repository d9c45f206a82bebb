-- $1 idle ordering lanes of tenant `bench` to destination `sink`, each with a past (five
-- intents delivered, head past the last): the lane table a platform with many lanes keeps.
INSERT INTO oncebox.lanes (tenant_id, destination, ordering_key, last_seq, head_seq)
SELECT 'bench', 'sink', 'idle-' || g, 5, 6 FROM generate_series(1, $1) g
