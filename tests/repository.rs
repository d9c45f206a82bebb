//! The repository explains itself and keeps its own rules: no function outside tests is longer
//! than 80 lines, nothing points at documents outside the repository, every statement file of
//! the store is one the store runs, the generated reference pages (metrics, HTTP API) are what
//! the code says, no two modules of a crate need each other, and the crate diagram is the
//! workspace's dependency graph.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file under `dir` whose name ends with `ext`.
fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = entry.path();
        if p.is_dir() {
            // Not build output, nor caches (`.mypy_cache`, `__pycache__`…).
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            if name.is_some_and(|n| n != "target" && !n.starts_with('.') && !n.starts_with("__")) {
                files(&p, ext, out);
            }
        } else if p.to_string_lossy().ends_with(ext) {
            out.push(p);
        }
    }
}

/// A line of Rust without its string and char literals and its `//` comment.
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        match (in_str, c) {
            (false, '/') if chars.peek() == Some(&'/') => break,
            (false, '"') => in_str = true,
            (true, '\\') => {
                chars.next();
            }
            (true, '"') => in_str = false,
            (false, '\'') => {
                // A char literal ('x', '\n', '{') or a lifetime ('a): skip a literal only.
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with('\\') {
                    chars.nth(2);
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.nth(1);
                }
            }
            (false, c) => out.push(c),
            (true, _) => {}
        }
    }
    out
}

/// The functions of `text` outside `#[cfg(test)]` modules longer than `limit` lines, as
/// (name, first line, lines).
fn long_functions(text: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let mut found = Vec::new();
    let mut open: Vec<(String, usize, i64)> = Vec::new();
    let mut depth: i64 = 0;
    let mut test_module_depth: Option<i64> = None;
    let mut cfg_test = false;
    for (n, line) in text.lines().enumerate() {
        let code = code_of(line);
        let trimmed = code.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            cfg_test = true;
        } else if cfg_test && trimmed.starts_with("mod ") && trimmed.ends_with('{') {
            test_module_depth.get_or_insert(depth);
        } else if !trimmed.is_empty() && !trimmed.starts_with("#[") {
            cfg_test = false;
        }
        if test_module_depth.is_none()
            && let Some(i) = code.find("fn ")
            && (i == 0 || !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        {
            let name: String = code[i + 3..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                open.push((name, n, depth));
            }
        }
        depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
        while let Some((name, start, d)) = open.last().cloned() {
            let ended = depth <= d && (code.contains('}') || code.trim_end().ends_with(';'));
            if !ended {
                break;
            }
            open.pop();
            if n + 1 - start > limit {
                found.push((name, start + 1, n + 1 - start));
            }
        }
        if test_module_depth.is_some_and(|d| depth <= d) {
            test_module_depth = None;
        }
    }
    found
}

/// The longest a function outside tests may be.
const LONGEST_FUNCTION: usize = 80;

#[test]
fn no_function_outside_tests_is_longer_than_80_lines() {
    let mut sources = Vec::new();
    files(&root().join("crates"), ".rs", &mut sources);
    files(&root().join("python"), ".rs", &mut sources);
    let mut long = Vec::new();
    for f in sources.iter().filter(|p| {
        let s = p.to_string_lossy();
        s.contains("/src/") && !s.contains("/tests/")
    }) {
        let text = std::fs::read_to_string(f).expect("read");
        for (name, line, lines) in long_functions(&text, LONGEST_FUNCTION) {
            long.push(format!("{}:{line} {name} ({lines} lines)", f.display()));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {LONGEST_FUNCTION} lines:\n{}",
        long.join("\n")
    );
    // The checker itself finds a long function.
    let body = "    let x = 1;\n".repeat(LONGEST_FUNCTION + 1);
    let sample = format!(
        "fn long() {{\n{body}}}\n#[cfg(test)]\nmod tests {{\n    fn also_long() {{\n{body}    }}\n}}\n"
    );
    let found = long_functions(&sample, LONGEST_FUNCTION);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "long");
}

#[test]
fn nothing_points_outside_the_repository() {
    let mut checked = Vec::new();
    for dir in [
        "crates",
        "tests",
        "scripts",
        "docs",
        "deploy",
        "fuzz",
        "python",
        "examples",
        "js/src",
        "js/test",
        "js/native",
        "js/scripts",
    ] {
        for ext in [
            ".rs", ".sh", ".md", ".sql", ".toml", ".yaml", ".json", ".py", ".pyi", ".ts", ".mjs",
        ] {
            files(&root().join(dir), ext, &mut checked);
        }
    }
    checked.push(root().join("README.md"));
    checked.push(root().join("js/README.md"));
    // Spelled in parts, so that this file, checked like every other, holds none of them.
    let pointers = [
        ["..", "shared"].join("/"),
        ["DESIGN", "§"].join(" "),
        ["shared", "bench"].join("/"),
    ];
    let mut outside = Vec::new();
    for f in &checked {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if pointers.iter().any(|p| line.contains(p.as_str())) {
                outside.push(format!("{}:{}: {line}", f.display(), n + 1));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "references outside the repository:\n{}",
        outside.join("\n")
    );
}

#[test]
fn every_statement_file_is_one_the_store_runs() {
    let mut sql = Vec::new();
    files(&root().join("crates/oncebox-sql/queries"), ".sql", &mut sql);
    let on_disk: BTreeSet<String> = sql
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    let known: BTreeSet<String> = oncebox_store::sql::ALL
        .iter()
        .map(|(file, _)| (*file).to_owned())
        .collect();
    assert_eq!(on_disk, known, "queries/*.sql and oncebox_store::sql::ALL");
    for (file, text) in oncebox_store::sql::ALL {
        assert!(
            text.trim_start().starts_with("--"),
            "{file} opens with a header saying what it means"
        );
    }
}

/// Holds the generated page `path` (from the repository's root) equal to `text`; with
/// `ONCEBOX_BLESS=1` in the environment, writes it instead.
fn generated(path: &str, text: &str) {
    let file = root().join(path);
    if std::env::var_os("ONCEBOX_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&file, text).expect("write the generated page");
        return;
    }
    let on_disk = std::fs::read_to_string(&file).unwrap_or_default();
    if on_disk != text {
        let first = on_disk
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| on_disk.lines().count().min(text.lines().count()));
        panic!(
            "{path} is generated from the code and differs from it at line {}; regenerate it \
             with `ONCEBOX_BLESS=1 cargo test -p oncebox --test repository`",
            first + 1
        );
    }
}

/// The header every generated page opens with.
fn generated_header(title: &str, from: &str) -> String {
    format!(
        "# {title}\n\n<!-- Generated from {from} by tests/repository.rs; do not edit: run \
         `ONCEBOX_BLESS=1 cargo test -p oncebox --test repository`. -->\n\n"
    )
}

/// A Markdown table cell: pipes escaped, lines joined.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[test]
fn the_metrics_reference_is_generated_from_the_definitions() {
    let mut page = generated_header(
        "Metrics",
        "`oncebox_worker::metrics::DEFINITIONS` and `oncebox_api::metrics::DEFINITIONS`",
    );
    page.push_str(
        "What each metric means and how to use it: [Observability](../observability.md).\n",
    );
    for (binary, defs) in [
        (
            "`oncebox worker` (at `--metrics-addr`)",
            oncebox_worker::metrics::DEFINITIONS,
        ),
        (
            "`oncebox serve` (at `/metrics`)",
            oncebox_api::metrics::DEFINITIONS,
        ),
    ] {
        page.push_str(&format!(
            "\n## {binary}\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n"
        ));
        for d in defs {
            let labels = if d.labels.is_empty() {
                "—".to_owned()
            } else {
                d.labels.join(", ")
            };
            page.push_str(&format!(
                "| `{}` | {} | {labels} | {} |\n",
                d.name,
                d.kind.as_str(),
                cell(d.help)
            ));
        }
    }
    generated("docs/reference/metrics.md", &page);
}

/// `schema`'s type as a reader would say it: a `$ref`'s name, `array of X`, or its `type`.
fn type_of(schema: &serde_json::Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(|r| r.as_str()) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("[`{name}`](#{})", name.to_lowercase());
    }
    if let Some(items) = schema.get("items") {
        return format!("array of {}", type_of(items));
    }
    for combined in ["oneOf", "anyOf", "allOf"] {
        if let Some(list) = schema.get(combined).and_then(|l| l.as_array()) {
            let parts: Vec<String> = list.iter().map(type_of).collect();
            return parts.join(" or ");
        }
    }
    match schema.get("type") {
        Some(serde_json::Value::Array(types)) => types
            .iter()
            .filter_map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(" or "),
        Some(t) => t.as_str().unwrap_or("any").to_owned(),
        None => "any".to_owned(),
    }
}

/// One operation of the document as Markdown.
fn operation(page: &mut String, method: &str, path: &str, op: &serde_json::Value) {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_owned();
    page.push_str(&format!("\n### `{} {path}`\n\n", method.to_uppercase()));
    page.push_str(&format!("{}\n\n", text(&op["summary"])));
    if let Some(d) = op["description"].as_str() {
        page.push_str(&format!("{d}\n\n"));
    }
    if op
        .get("security")
        .and_then(|s| s.as_array())
        .is_some_and(|s| {
            s.iter()
                .all(|x| x.as_object().is_some_and(|o| o.is_empty()))
        })
    {
        page.push_str("No token needed.\n\n");
    }
    if let Some(params) = op["parameters"].as_array().filter(|p| !p.is_empty()) {
        page.push_str("| parameter | in | type | required | meaning |\n|---|---|---|---|---|\n");
        for p in params {
            page.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                text(&p["name"]),
                text(&p["in"]),
                type_of(&p["schema"]),
                if p["required"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                },
                cell(&text(&p["description"]))
            ));
        }
        page.push('\n');
    }
    if let Some(content) = op
        .pointer("/requestBody/content")
        .and_then(|c| c.as_object())
    {
        for (media, body) in content {
            page.push_str(&format!(
                "Body: `{media}`, {}.\n\n",
                type_of(&body["schema"])
            ));
        }
    }
    if let Some(responses) = op["responses"].as_object() {
        page.push_str("| answer | meaning | body |\n|---|---|---|\n");
        for (status, answer) in responses {
            let body = answer["content"]
                .as_object()
                .map(|c| {
                    c.iter()
                        .map(|(media, b)| match b.get("schema") {
                            Some(s) => format!("`{media}` {}", type_of(s)),
                            None => format!("`{media}`"),
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            let meaning = match answer.get("$ref").and_then(|x| x.as_str()) {
                Some(reference) => {
                    let name = reference.rsplit('/').next().unwrap_or("");
                    format!("[{name}](#{})", name.to_lowercase())
                }
                None => cell(&text(&answer["description"])),
            };
            page.push_str(&format!("| {status} | {meaning} | {body} |\n"));
        }
    }
}

#[test]
fn the_api_reference_is_generated_from_the_openapi_document() {
    let doc: serde_json::Value =
        serde_json::from_str(&oncebox_api::openapi::document(std::iter::empty()))
            .expect("the document is JSON");
    let mut page = generated_header("HTTP API", "the OpenAPI document `oncebox serve` serves");
    page.push_str(&format!(
        "{}\n\nA running server serves this document at `/openapi.json`, with the configured \
         actions as the enum of `NewIntent.action`. How to use the API: [HTTP](../http.md).\n\n\
         ## Operations\n",
        doc.pointer("/info/description")
            .and_then(|d| d.as_str())
            .unwrap_or("")
    ));
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            operation(&mut page, method, path, op);
        }
    }
    page.push_str("\n## Shared answers\n");
    let responses = doc
        .pointer("/components/responses")
        .and_then(|r| r.as_object());
    for (name, r) in responses.into_iter().flatten() {
        page.push_str(&format!(
            "\n### {name}\n\n{}\n",
            r["description"].as_str().unwrap_or("")
        ));
        for (media, body) in r["content"].as_object().into_iter().flatten() {
            page.push_str(&format!(
                "\nBody: `{media}`, {}.\n",
                type_of(&body["schema"])
            ));
        }
    }
    page.push_str("\n## Schemas\n");
    for (name, schema) in doc
        .pointer("/components/schemas")
        .and_then(|s| s.as_object())
        .into_iter()
        .flatten()
    {
        page.push_str(&format!("\n### {name}\n\n"));
        if let Some(d) = schema["description"].as_str() {
            page.push_str(&format!("{}\n\n", cell(d)));
        }
        let required: BTreeSet<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str())
            .collect();
        if let Some(properties) = schema["properties"].as_object() {
            page.push_str("| field | type | required | meaning |\n|---|---|---|---|\n");
            for (field, p) in properties {
                page.push_str(&format!(
                    "| `{field}` | {} | {} | {} |\n",
                    type_of(p),
                    if required.contains(field.as_str()) {
                        "yes"
                    } else {
                        "no"
                    },
                    cell(p["description"].as_str().unwrap_or(""))
                ));
            }
        } else if let Some(values) = schema["enum"].as_array() {
            let values: Vec<String> = values
                .iter()
                .map(|v| format!("`{}`", v.as_str().unwrap_or("")))
                .collect();
            page.push_str(&format!("One of {}.\n", values.join(", ")));
        } else {
            page.push_str(&format!("{}.\n", type_of(schema)));
        }
    }
    generated("docs/reference/api.md", &page);
}

/// The security and operations documents prove their claims by naming tests: every test they
/// name exists (a renamed test would leave a claim unproven without anyone noticing).
#[test]
fn every_test_the_docs_cite_exists() {
    let mut sources = Vec::new();
    for dir in ["crates", "tests"] {
        files(&root().join(dir), ".rs", &mut sources);
    }
    // The Python package's tests too (`def test_…`), which prove the browser and SDK claims.
    files(&root().join("python/tests"), ".py", &mut sources);
    let defined: BTreeSet<String> = sources
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .expect("source")
                .lines()
                .filter_map(|l| {
                    let l = l.trim_start();
                    let l = l.strip_prefix("async ").unwrap_or(l);
                    l.strip_prefix("fn ")
                        .or_else(|| l.strip_prefix("def "))
                        .and_then(|rest| rest.split(['(', '<', '[']).next())
                        .map(str::to_owned)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let mut cited = 0;
    for doc in ["docs/security.md", "docs/operations.md"] {
        let text = std::fs::read_to_string(root().join(doc)).expect(doc);
        for name in text.split('`').skip(1).step_by(2) {
            // Test names: snake_case with at least four words (not a command, a flag, a path or
            // a metric, whose names start with `oncebox_`).
            let looks_like_a_test = name.split('_').count() >= 4
                && !name.starts_with("oncebox_")
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if looks_like_a_test {
                cited += 1;
                assert!(
                    defined.contains(name),
                    "{doc} cites `{name}`, which no test defines"
                );
            }
        }
    }
    assert!(
        cited >= 20,
        "the documents cite their tests ({cited} found)"
    );
}

/// The code of `text`'s lines outside `#[cfg(test)]` modules (literals and comments removed).
fn production_code(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth: i64 = 0;
    let mut test_module_depth: Option<i64> = None;
    let mut cfg_test = false;
    for line in text.lines() {
        let code = code_of(line);
        let trimmed = code.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            cfg_test = true;
        } else if cfg_test && trimmed.starts_with("mod ") && trimmed.ends_with('{') {
            test_module_depth.get_or_insert(depth);
        } else if !trimmed.is_empty() && !trimmed.starts_with("#[") {
            cfg_test = false;
        }
        depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
        if test_module_depth.is_none() {
            out.push(code);
        }
        if test_module_depth.is_some_and(|d| depth <= d) {
            test_module_depth = None;
        }
    }
    out
}

/// The module path of source file `file` of a crate whose `src` is `src`: `console::pages` for
/// `src/console/pages.rs`, `console` for `src/console/mod.rs`, empty for the crate root.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The edges between the modules of one crate: module → the modules it names through
/// `crate::…` (the longest module path a reference starts with). A module naming its own
/// ancestors or descendants is not an edge: a parent declares its children, and a child may use
/// its parent's items.
fn module_edges(src: &Path) -> BTreeSet<(String, String)> {
    let mut sources = Vec::new();
    files(src, ".rs", &mut sources);
    let modules: BTreeSet<String> = sources.iter().map(|f| module_of(src, f)).collect();
    let related = |a: &str, b: &str| {
        a == b
            || a.is_empty()
            || b.is_empty()
            || a.starts_with(&format!("{b}::"))
            || b.starts_with(&format!("{a}::"))
    };
    let mut edges = BTreeSet::new();
    for file in &sources {
        let from = module_of(src, file);
        let text = std::fs::read_to_string(file).expect("source");
        if file.ends_with("tests.rs") {
            // A module of tests (`config/tests.rs`) is test code whole.
            continue;
        }
        for line in production_code(&text) {
            for (at, _) in line.match_indices("crate::") {
                let path: String = line[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let segments: Vec<&str> = path.split("::").collect();
                let to = (1..=segments.len())
                    .rev()
                    .map(|n| segments[..n].join("::"))
                    .find(|m| modules.contains(m));
                if let Some(to) = to
                    && !related(&from, &to)
                {
                    edges.insert((from.clone(), to));
                }
            }
        }
    }
    edges
}

/// Modules of one crate never need each other: two that do would need a third, a leaf they both
/// use (an intent view, a benchmark harness). A `use crate::a` in `b` and a `use crate::b` in
/// `a` — directly or around a longer loop — fails here, naming the loop. Tests inside a module
/// may use any other (to build their inputs) and are not counted.
#[test]
fn no_two_modules_of_a_crate_need_each_other() {
    let mut loops = Vec::new();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .expect("crates")
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.push(root().join("python/src"));
    for src in crates {
        let edges = module_edges(&src);
        let next = |m: &str| -> Vec<String> {
            edges
                .iter()
                .filter(|(a, _)| a == m)
                .map(|(_, b)| b.clone())
                .collect()
        };
        // A depth-first walk from each module back to itself.
        for (start, _) in &edges {
            let mut stack = vec![(start.clone(), vec![start.clone()])];
            let mut seen = BTreeSet::new();
            while let Some((at, path)) = stack.pop() {
                for to in next(&at) {
                    if &to == start {
                        let mut cycle = path.clone();
                        cycle.push(to);
                        loops.push(format!("{}: {}", src.display(), cycle.join(" -> ")));
                    } else if seen.insert(to.clone()) {
                        let mut longer = path.clone();
                        longer.push(to.clone());
                        stack.push((to, longer));
                    }
                }
            }
        }
    }
    loops.sort();
    loops.dedup();
    assert!(
        loops.is_empty(),
        "modules that need each other:\n{}",
        loops.join("\n")
    );
}

/// The console's pages are `maud` markup, where a value is text unless marked raw: no file of
/// the console marks one (`PreEscaped`), so everything a page shows is escaped by its type.
#[test]
fn the_console_marks_no_value_as_raw_html() {
    let mut sources = Vec::new();
    files(
        &root().join("crates/oncebox-api/src/console"),
        ".rs",
        &mut sources,
    );
    assert!(sources.len() >= 5, "the console's sources: {sources:?}");
    let raw: Vec<String> = sources
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .expect("source")
                .contains("PreEscaped")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(raw.is_empty(), "raw HTML in the console: {raw:?}");
}

/// The `mdbook` binary: `$MDBOOK`, else `target/tools/bin/mdbook` (where the test command
/// installs the pinned version), else `mdbook` on the `PATH`.
fn mdbook() -> PathBuf {
    if let Some(path) = std::env::var_os("MDBOOK") {
        return PathBuf::from(path);
    }
    let installed = root().join("target/tools/bin/mdbook");
    if installed.exists() {
        installed
    } else {
        PathBuf::from("mdbook")
    }
}

/// Every value of `attribute="…"` in `html`, entities for `&` undone.
fn attribute_values<'a>(html: &'a str, attribute: &str) -> Vec<String> {
    let needle = format!(" {attribute}=\"");
    html.match_indices(&needle)
        .filter_map(|(at, _)| {
            let rest: &'a str = &html[at + needle.len()..];
            rest.find('"').map(|end| rest[..end].replace("&amp;", "&"))
        })
        .collect()
}

/// The broken links of a built book: each relative `href` or `src` of each page must name a
/// file of the book, and its `#fragment` an `id` in that file.
fn broken_links(book: &Path) -> Vec<String> {
    let mut pages = Vec::new();
    files(book, ".html", &mut pages);
    let ids = |file: &Path| -> BTreeSet<String> {
        let html = std::fs::read_to_string(file).unwrap_or_default();
        attribute_values(&html, "id").into_iter().collect()
    };
    let mut broken = Vec::new();
    for page in &pages {
        let name = page
            .strip_prefix(book)
            .unwrap_or(page)
            .display()
            .to_string();
        // The one-page print view and the no-script table of contents repeat every chapter's
        // links, rewritten; the chapters are checked themselves.
        if ["print.html", "toc.html", "404.html"].contains(&name.as_str()) {
            continue;
        }
        let html = std::fs::read_to_string(page).expect("page");
        let mut links = attribute_values(&html, "href");
        links.extend(attribute_values(&html, "src"));
        for link in links {
            if link.contains("://") || link.starts_with("mailto:") || link.starts_with("data:") {
                continue;
            }
            let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent()
                    .unwrap_or(book)
                    .join(path.split('?').next().unwrap_or(path))
            };
            if !target.exists() {
                broken.push(format!("{name}: {link} (no such file)"));
            } else if !fragment.is_empty() && target.is_file() && !ids(&target).contains(fragment) {
                broken.push(format!("{name}: {link} (no such anchor)"));
            }
        }
    }
    broken
}

/// The documentation is a book that builds, with no warning, and whose links all resolve:
/// a page missing from `SUMMARY.md`, a renamed file or heading, or an include of a part of the
/// README that is gone fails here.
#[test]
fn the_book_builds_and_every_link_in_it_resolves() {
    let out = std::env::temp_dir().join(format!("oncebox-book-{}", std::process::id()));
    let built = std::process::Command::new(mdbook())
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run mdbook ({e}): the test command installs it (scripts/test-tools.sh), \
                 or set MDBOOK"
            )
        });
    let log = String::from_utf8_lossy(&built.stderr).into_owned();
    assert!(built.status.success(), "mdbook build failed:\n{log}");
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "mdbook build warned:\n{log}"
    );
    let broken = broken_links(&out);
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        broken.is_empty(),
        "broken links in the book:\n{}",
        broken.join("\n")
    );
}

/// The README and the other Markdown files outside the book link only to files that exist.
#[test]
fn every_relative_link_of_the_readmes_names_a_file() {
    for doc in [
        "README.md",
        "deploy/README.md",
        "python/README.md",
        "js/README.md",
        "CHANGELOG.md",
    ] {
        let text = std::fs::read_to_string(root().join(doc)).expect("markdown");
        let base = root().join(doc);
        let base = base.parent().expect("dir");
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let link = &rest[..end];
            if link.contains("://") || link.starts_with('#') || link.starts_with("mailto:") {
                continue;
            }
            let path = link.split('#').next().unwrap_or(link);
            assert!(base.join(path).exists(), "{doc}: {link} names no file");
        }
    }
}

/// The workspace's members as `cargo metadata --no-deps` describes them.
fn cargo_metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("metadata JSON")
}

/// The crates of the workspace and each one's direct (normal) dependencies among them, from
/// `cargo metadata`.
fn workspace_graph() -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let meta = cargo_metadata();
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_owned())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .filter(|d| names.contains(*d))
                .map(str::to_owned)
                .collect();
            (p["name"].as_str().expect("name").to_owned(), deps)
        })
        .collect()
}

/// The crate diagram of docs/architecture.md: node ids to crate names (a label's first word) and
/// the arrows (`a --> b & c`), as crate names.
fn drawn_graph(page: &str) -> (BTreeSet<String>, BTreeSet<(String, String)>) {
    let block = page
        .split("```mermaid\nflowchart LR\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the crate diagram");
    let mut ids = std::collections::BTreeMap::new();
    let mut arrows = Vec::new();
    for line in block.lines().map(str::trim) {
        if let Some((from, to)) = line.split_once("-->") {
            for target in to.split('&') {
                arrows.push((from.trim().to_owned(), target.trim().to_owned()));
            }
        } else if let Some((id, label)) = line.split_once("[\"") {
            let name = label.split(['<', '"']).next().unwrap_or_default();
            ids.insert(id.to_owned(), name.to_owned());
        }
    }
    let name = |id: &str| {
        ids.get(id)
            .cloned()
            .unwrap_or_else(|| panic!("the arrow's end {id:?} is not a node of the diagram"))
    };
    let edges = arrows.iter().map(|(a, b)| (name(a), name(b))).collect();
    (ids.into_values().collect(), edges)
}

#[test]
fn the_crate_diagram_is_the_workspace_graph() {
    let page = std::fs::read_to_string(root().join("docs/architecture.md")).expect("read");
    let (nodes, edges) = drawn_graph(&page);
    let graph = workspace_graph();
    let crates: BTreeSet<String> = graph.keys().cloned().collect();
    assert_eq!(
        nodes, crates,
        "the diagram's nodes are the workspace's crates"
    );
    for (from, to) in &edges {
        assert!(
            graph[from].contains(to),
            "the diagram draws {from} --> {to}, which is not a dependency"
        );
    }
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(at) = todo.pop() {
            for (a, b) in &edges {
                if *a == at && seen.insert(b.clone()) {
                    todo.push(b.clone());
                }
            }
        }
        seen.contains(to)
    };
    for (from, deps) in &graph {
        for to in deps {
            assert!(
                reaches(from, to),
                "{from} depends on {to}: draw the arrow, or a path that implies it"
            );
        }
    }
}

#[test]
fn every_dependency_is_declared_once_in_the_workspace() {
    let meta = cargo_metadata();
    let mut local = Vec::new();
    for package in meta["packages"].as_array().expect("packages") {
        let manifest = package["manifest_path"].as_str().expect("manifest_path");
        let text = std::fs::read_to_string(manifest).expect("read the manifest");
        let mut section = "";
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line;
            } else if section.ends_with("dependencies]")
                && !line.is_empty()
                && !line.starts_with('#')
                && !line.contains("workspace = true")
            {
                local.push(format!("{manifest}: {line}"));
            }
        }
    }
    assert!(
        local.is_empty(),
        "declare these in the workspace's [workspace.dependencies] and use `workspace = true` \
         (with the crate's own features): {local:#?}"
    );
}
