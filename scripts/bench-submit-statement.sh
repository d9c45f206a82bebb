#!/usr/bin/env bash
# The submit statement alone, now against an earlier revision's, with pgbench: each statement
# with constants for its parameters (an intent that needs no approval, no worker waiting),
# one intent per transaction, 32 clients, 8 s runs in ABBA order on one scratch database
# migrated by this tree's `oncebox migrate`. Prints each run and the means.
#
#   scripts/bench-submit-statement.sh REV [PAIRS]
#
# REV is any git revision whose crates/oncebox-sql/queries/submit.sql takes either 12
# parameters (before approvals: notify, channel last) or 15 (approvals, submitter, notify,
# channel last). Needs Postgres (scripts/services.sh) and target/debug/oncebox.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/bench-submit-statement.sh REV [PAIRS]}
pairs=${2:-3}
db=oncebox_submit_statement
psql_() { psql -q -h 127.0.0.1 -U postgres "$@"; }
work=$(mktemp -d)
trap 'rm -rf "$work"; psql_ -c "DROP DATABASE IF EXISTS $db" 2>/dev/null || true' EXIT

# pgbench script for statement text $1: comments dropped, parameters replaced highest first.
script() {
    local text=$1 params
    if grep -q '\$15' <<<"$text"; then
        params=("NULL::smallint" "NULL::float8" "NULL::text" "false" "'oncebox_work'::text")
    else
        params=("false" "'oncebox_work'::text")
    fi
    local all=("'acme'::text" "('k-' || :client_id::text || '-' || :n::text)"
        "'create_invoice'::text" "(md5(:n::text) || md5(:client_id::text))"
        "'{\"order_id\":\"o-1\",\"amount\":\"12.50\"}'::jsonb" "NULL::text" "NULL::text"
        "NULL::text" "NULL::timestamptz" "NULL::jsonb" "${params[@]}")
    local body
    body=$(grep -v '^--' <<<"$text" | tr '\n' ' ')
    for ((i = ${#all[@]}; i >= 1; i--)); do
        body=${body//\$$i/${all[$((i - 1))]}}
    done
    printf '\\set n random(1, 9000000000000)\nBEGIN;\n%s;\nCOMMIT;\n' "$body"
}

script "$(git show "$rev:crates/oncebox-sql/queries/submit.sql")" >"$work/before.sql"
script "$(cat crates/oncebox-sql/queries/submit.sql)" >"$work/now.sql"
psql_ -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
DATABASE_URL=postgres://postgres@127.0.0.1:5432/$db target/debug/oncebox migrate >/dev/null
order=()
for ((p = 0; p < pairs; p++)); do order+=(before now now before); done
for which in "${order[@]}"; do
    tps=$(pgbench -h 127.0.0.1 -U postgres -n -M prepared -c 32 -j 2 -T 8 -f "$work/$which.sql" \
        "$db" | awk '/^tps/ {print $3}')
    echo "$which $tps"
done | tee "$work/runs"
awk '{s[$1] += $2; n[$1]++} END {printf "mean: before %.0f, now %.0f transactions/s: %.3fx\n",
    s["before"] / n["before"], s["now"] / n["now"], (s["now"] / n["now"]) / (s["before"] / n["before"])}' \
    "$work/runs"
