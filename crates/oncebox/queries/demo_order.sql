-- An agent records order $1 (amount $2, the key of its invoice intent $3) in its own
-- transaction, beside the intent.
INSERT INTO demo_orders VALUES ($1, $2, $3) ON CONFLICT (order_id) DO NOTHING
