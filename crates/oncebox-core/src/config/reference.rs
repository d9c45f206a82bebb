//! The configuration reference in `docs/configuration.md` held equal to the types: for each
//! section of the reference, a file with that section and an unknown field in it is refused with
//! the list of fields the section accepts (serde's `deny_unknown_fields` message, made from the
//! types themselves), and that list must be the section's table — no field undocumented, none
//! documented that the file would refuse.

use std::collections::BTreeSet;

use super::Config;

/// The reference page, read when the test is compiled.
const PAGE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/configuration.md"
));

const HTTP: &str =
    "[destinations.d]\nkind = \"http\"\nurl = \"http://h/\"\nidempotency = \"key\"\n";
const ACTION: &str = "[actions.a]\ndestination = \"d\"\n";

/// Each section's heading in the reference, and a file whose section holds `zz_probe`.
fn sections() -> Vec<(&'static str, String)> {
    let http = |table: &str| format!("{ACTION}{HTTP}[destinations.d.{table}]\nzz_probe = 1\n");
    vec![
        ("The file", format!("zz_probe = 1\n{ACTION}{HTTP}")),
        ("`[actions.NAME]`", format!("{ACTION}zz_probe = 1\n{HTTP}")),
        (
            "`[[actions.NAME.redact]]`",
            format!("{ACTION}{HTTP}[[actions.a.redact]]\nzz_probe = 1\n"),
        ),
        (
            "`[actions.NAME.tool]`",
            format!("{ACTION}{HTTP}[actions.a.tool]\nzz_probe = 1\n"),
        ),
        (
            "`[actions.NAME.approval]`",
            format!("{ACTION}{HTTP}[actions.a.approval]\nzz_probe = 1\n"),
        ),
        (
            "`[destinations.NAME]`, `kind = \"http\"`",
            format!("{ACTION}{HTTP}zz_probe = 1\n"),
        ),
        (
            "`[destinations.NAME]`, `kind = \"amqp\"`",
            format!(
                "{ACTION}[destinations.d]\nkind = \"amqp\"\nrouting_key = \"r\"\nzz_probe = 1\n"
            ),
        ),
        (
            "`[destinations.NAME]`, `kind = \"mcp\"`",
            format!(
                "{ACTION}[destinations.d]\nkind = \"mcp\"\nurl = \"http://h/\"\nidempotency = \"key\"\nzz_probe = 1\n"
            ),
        ),
        ("`[destinations.NAME.retry]`", http("retry")),
        ("`[destinations.NAME.lookup]`", http("lookup")),
        ("`[destinations.NAME.ordering]`", http("ordering")),
        ("`[destinations.NAME.rate_limit]`", http("rate_limit")),
        ("`[destinations.NAME.breaker]`", http("breaker")),
        ("`[destinations.NAME.signing]`", http("signing")),
        (
            "`[console]`",
            format!("{ACTION}{HTTP}[console]\nzz_probe = 1\n"),
        ),
        (
            "`[console.oidc]`",
            format!("{ACTION}{HTTP}[console.oidc]\nzz_probe = 1\n"),
        ),
        (
            "`[console.oidc.groups.NAME]`",
            format!("{ACTION}{HTTP}[console.oidc.groups.g]\nzz_probe = 1\n"),
        ),
    ]
}

/// The fields the section accepts, from the refusal of `file`.
fn accepted(heading: &str, file: &str) -> BTreeSet<String> {
    let e = Config::from_toml(file).expect_err(heading);
    let (_, expected) = e
        .reason
        .split_once("expected ")
        .unwrap_or_else(|| panic!("{heading}: {e} names no expected fields"));
    let mut fields: BTreeSet<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    if heading.contains("kind = ") {
        fields.insert("kind".to_owned()); // the tag, read before the kind's own fields
    }
    fields
}

/// The first-column names of the table under `### heading`.
fn documented(heading: &str) -> BTreeSet<String> {
    let mut lines = PAGE.lines().skip_while(|l| *l != format!("### {heading}"));
    assert!(
        lines.next().is_some(),
        "docs/configuration.md has no section `### {heading}`"
    );
    lines
        .take_while(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name.to_owned()))
        .collect()
}

#[test]
fn every_section_of_the_reference_lists_exactly_the_fields_the_file_accepts() {
    let mut wrong = Vec::new();
    for (heading, file) in sections() {
        let accepted = accepted(heading, &file);
        let documented = documented(heading);
        let undocumented: Vec<_> = accepted.difference(&documented).collect();
        let refused: Vec<_> = documented.difference(&accepted).collect();
        if !undocumented.is_empty() || !refused.is_empty() {
            wrong.push(format!(
                "{heading}: accepted but undocumented {undocumented:?}; documented but refused \
                 {refused:?}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/configuration.md:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reference_has_no_section_the_test_does_not_check() {
    let checked: BTreeSet<&str> = sections().iter().map(|(h, _)| *h).collect();
    let reference = PAGE
        .split_once("\n## Reference\n")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(""))
        .expect("a '## Reference' section");
    for heading in reference.lines().filter_map(|l| l.strip_prefix("### ")) {
        assert!(checked.contains(heading), "unchecked section {heading}");
    }
}
