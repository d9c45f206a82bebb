//! The pinned Python test tools.

/// The pinned Python test tools' bin directory (`scripts/pytools.sh`, run by `scripts/test.sh`):
/// `ONCEBOX_PYTOOLS`, else `target/pytools/bin`. Fails the test, saying how to get them.
pub(crate) fn pytools() -> std::path::PathBuf {
    let dir = std::env::var_os("ONCEBOX_PYTOOLS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pytools/bin")
        });
    assert!(
        dir.join("python").exists(),
        "the Python test tools are missing at {}: run scripts/test.sh, or scripts/pytools.sh once",
        dir.display()
    );
    dir
}
