#!/usr/bin/env bash
# The tools the tests need beyond the demo's (scripts/services.sh, sourced first, provides
# install_missing): installed from Debian's packages when absent. Sourced by scripts/test.sh.
missing=()
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3 python3-venv)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd) # systemd-analyze verifies the units
command -v openssl >/dev/null 2>&1 || missing+=(openssl) # the TLS test makes its certificate
command -v promtool >/dev/null 2>&1 || missing+=(prometheus) # promtool checks and tests the alert rules
command -v chromium >/dev/null 2>&1 || missing+=(chromium) # the console's browser tests (Debian's own)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core) # oncebox-bench draws its charts with it
command -v strace >/dev/null 2>&1 || missing+=(strace) # the test that every Postgres socket has TCP_NODELAY
install_missing "${missing[@]}"
# mdBook builds the documentation book, whose links a test checks: the pinned version, built
# from crates.io into target/tools (kept between runs), without the features a build does not
# use (serve, watch, search).
MDBOOK_VERSION=0.5.4
if ! target/tools/bin/mdbook --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
    cargo install --quiet --locked --no-default-features --version "$MDBOOK_VERSION" \
        --root target/tools mdbook
fi
export MDBOOK="$PWD/target/tools/bin/mdbook"
