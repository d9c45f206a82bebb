-- The demo's own business tables: the orders its agents record, and the events its inbox
-- consumer applies (no unique key on purpose: a double application would show as a second row).
CREATE TABLE demo_orders (order_id text PRIMARY KEY, amount text NOT NULL, invoice_key text NOT NULL);
CREATE TABLE demo_events (message_id text, body jsonb);
