//! The fuzz targets' bodies ([`oncebox_core::fuzzing`]) over their seed corpus and over every
//! input a fuzzing run found to fail (`fuzz/regressions/<target>/`, kept for ever), on the stable
//! toolchain: a crash found once stays fixed.

use std::path::{Path, PathBuf};

use oncebox_core::fuzzing;

fn inputs(kind: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(kind)
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).expect("input");
            (p, data)
        })
        .collect()
}

fn run(target: &str, body: fn(&[u8])) {
    let corpus = inputs("corpus", target);
    assert!(corpus.len() >= 4, "fuzz/corpus/{target} has its seeds");
    for (path, data) in corpus.iter().chain(&inputs("regressions", target)) {
        let outcome = std::panic::catch_unwind(|| body(data));
        assert!(outcome.is_ok(), "{target} fails on {}", path.display());
    }
}

#[test]
fn idempotency_key_corpus_and_regressions() {
    run("idempotency_key", fuzzing::idempotency_key_header);
}

#[test]
fn intake_json_corpus_and_regressions() {
    run("intake_json", fuzzing::intake_json);
}

#[test]
fn config_corpus_and_regressions() {
    run("config", fuzzing::config);
}
