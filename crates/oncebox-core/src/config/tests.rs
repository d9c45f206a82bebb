use std::time::Duration;

use super::*;
use crate::duration::parse_duration;
use crate::redact::RedactMode;
use crate::retry::RetryPolicy;

const GOOD: &str = r#"
    [actions.create_invoice]
    destination = "billing"
    redact = [{ pointer = "/card/number", mode = "hash" }]

    [destinations.billing]
    kind = "http"
    url = "http://127.0.0.1:9/invoices"
    idempotency = "key"
"#;

fn http(c: &Config, name: &str) -> HttpConfig {
    match &c.destinations[name] {
        Destination::Http(h) => (**h).clone(),
        other => panic!("{name} is not HTTP: {other:?}"),
    }
}

#[test]
fn parses_a_complete_file() {
    let c = Config::from_toml(GOOD).expect("valid");
    let a = c.action("create_invoice").expect("action");
    assert_eq!(a.destination, "billing");
    assert_eq!(a.redact[0].mode, RedactMode::Hash);
    assert_eq!(
        c.destinations["billing"].shared().idempotency,
        IdempotencyMode::Key
    );
    assert!(c.action("refund").is_none());
}

#[test]
fn destination_defaults_and_durations() {
    let c = Config::from_toml(GOOD).expect("valid");
    let d = http(&c, "billing");
    assert_eq!(d.method, HttpMethod::Post);
    assert_eq!(d.timeout.get(), Duration::from_secs(10));
    assert_eq!(d.retry.policy(), RetryPolicy::default());
    assert_eq!(d.consistency_window.get(), Duration::from_secs(60));
    assert!(d.idempotency.honours_keys());
    // Durations themselves: crate::duration's tests.
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
}

#[test]
fn header_secrets_come_from_the_environment_and_never_print() {
    let text = GOOD.replace(
        "idempotency = \"key\"",
        "idempotency = \"key\"\nheaders = { Authorization = \"Bearer ${BILLING_TOKEN}\", X-Team = \"ops\" }",
    );
    let mut c = Config::from_toml(&text).expect("valid");
    let e = c.resolve_env(|_| None).expect_err("unset variable");
    assert_eq!(e.field, "destinations.billing.headers.Authorization");
    assert!(e.reason.contains("BILLING_TOKEN"));
    c.resolve_env(|v| (v == "BILLING_TOKEN").then(|| "s3cret".to_owned()))
        .expect("set");
    let h = http(&c, "billing").headers;
    let get = |name: &str| {
        h.iter()
            .find(|(k, _)| k.as_str() == name)
            .map(|(_, v)| v.expose().to_owned())
    };
    assert_eq!(get("Authorization").as_deref(), Some("Bearer s3cret"));
    assert_eq!(get("X-Team").as_deref(), Some("ops"));
    assert!(
        !format!("{c:?}").contains("s3cret"),
        "secrets must not reach Debug output"
    );
    let bad = GOOD.replace(
        "idempotency = \"key\"",
        "idempotency = \"key\"\nheaders = { A = \"${not-a-var}\" }",
    );
    assert_eq!(
        Config::from_toml(&bad).expect_err("bad ref").field,
        "destinations.billing.headers.A"
    );
}

#[test]
fn signing_secrets_come_from_the_environment_and_an_empty_list_is_refused() {
    let with = |signing: &str| {
        GOOD.replace(
            "idempotency = \"key\"",
            &format!("idempotency = \"key\"\nsigning = {signing}"),
        )
    };
    let mut c = Config::from_toml(&with("{ secrets = [\"${NEW}\", \"${OLD}\"] }")).expect("valid");
    let e = c
        .resolve_env(|v| (v == "NEW").then(|| "whsec_x".to_owned()))
        .expect_err("OLD unset");
    assert_eq!(e.field, "destinations.billing.signing.secrets[1]");
    let mut c = Config::from_toml(&with("{ secrets = [\"${NEW}\", \"${OLD}\"] }")).expect("valid");
    c.resolve_env(|v| Some(format!("whsec_{v}"))).expect("set");
    let secrets: Vec<String> = http(&c, "billing")
        .signing
        .expect("signing")
        .secrets
        .iter()
        .map(|s| s.expose().to_owned())
        .collect();
    assert_eq!(secrets, ["whsec_NEW", "whsec_OLD"]);
    assert!(
        !format!("{c:?}").contains("whsec_NEW"),
        "never in Debug output"
    );
    let empty = Config::from_toml(&with("{ secrets = [] }")).expect_err("empty");
    assert_eq!(empty.field, "destinations.billing.signing.secrets");
    let unknown = Config::from_toml(&with("{ secret = \"x\" }")).expect_err("unknown field");
    assert!(
        unknown.field.starts_with("destinations.billing"),
        "{}",
        unknown.field
    );
}

#[test]
fn rate_limits_and_breakers_are_checked_naming_the_field() {
    let with = |extra: &str| {
        GOOD.replace(
            "idempotency = \"key\"",
            &format!("idempotency = \"key\"\n{extra}"),
        )
    };
    let c = Config::from_toml(&with("rate_limit = { per_second = 50 }")).expect("valid");
    let r = http(&c, "billing").rate_limit.expect("rate");
    assert!(
        (r.burst() - 5.0).abs() < f64::EPSILON,
        "a tenth of a second's worth"
    );
    for bad in ["0", "-1", "nan"] {
        let e = Config::from_toml(&with(&format!("rate_limit = {{ per_second = {bad} }}")))
            .expect_err(bad);
        assert_eq!(
            e.field, "destinations.billing.rate_limit.per_second",
            "{bad}"
        );
    }
    let c = Config::from_toml(&with("breaker = {}")).expect("defaults");
    let b = http(&c, "billing").breaker.expect("breaker");
    assert_eq!(
        (b.failures.get(), b.cool_down.get()),
        (5, Duration::from_secs(30))
    );
    let e = Config::from_toml(&with("breaker = { failures = 0 }")).expect_err("zero");
    assert!(e.field.starts_with("destinations.billing"), "{}", e.field);
}

#[test]
fn destination_values_are_checked() {
    let with = |extra: &str| {
        GOOD.replace(
            "idempotency = \"key\"",
            &format!("idempotency = \"key\"\n{extra}"),
        )
    };
    let field = |extra: &str| Config::from_toml(&with(extra)).expect_err(extra).field;
    assert_eq!(field("timeout = \"0s\""), "destinations.billing.timeout");
    // A bad value names its field, not only a line (the reason says what is wrong).
    assert_eq!(field("timeout = \"soon\""), "destinations.billing.timeout");
    assert_eq!(
        field("retry = { max_attempts = 0 }"),
        "destinations.billing.retry.max_attempts"
    );
    assert_eq!(
        field("retry = { initial_delay = \"2m\", max_delay = \"1m\" }"),
        "destinations.billing.retry"
    );
    assert_eq!(
        field("retry_statuses = [700]"),
        "destinations.billing.retry_statuses"
    );
    assert_eq!(
        field("reference_pointer = \"id\""),
        "destinations.billing.reference_pointer"
    );
    assert_eq!(
        field("max_in_flight = 0"),
        "destinations.billing.max_in_flight"
    );
    assert_eq!(
        field("lookup = { url = \"http://x/find\" }"),
        "destinations.billing.lookup.url"
    );
    assert_eq!(
        field("lookup = { url = \"http://x/?k={key}\", fields = [\"\"] }"),
        "destinations.billing.lookup.fields[0]"
    );
    for in_host in [
        "http://{key}.x/find",
        "http://x:{key}/find",
        "https://u:{key}@x/",
    ] {
        assert_eq!(
            field(&format!("lookup = {{ url = \"{in_host}\" }}")),
            "destinations.billing.lookup.url",
            "{in_host}"
        );
    }
    let lookup_mode = GOOD.replace("\"key\"", "\"lookup\"");
    assert_eq!(
        Config::from_toml(&lookup_mode).expect_err("lookup").field,
        "destinations.billing.lookup"
    );
    let ok = with(
        "lookup = { url = \"http://x/find?key={key}\", results_pointer = \"/data\", fields = [\"/amount\"] }",
    );
    let c = Config::from_toml(&ok).expect("lookup config");
    assert_eq!(
        c.destinations["billing"]
            .shared()
            .lookup
            .expect("lookup")
            .timeout
            .get(),
        Duration::from_secs(5)
    );
}

#[test]
fn errors_name_the_field() {
    let e = Config::from_toml(&GOOD.replace("destination = \"billing\"", "destination = \"nope\""))
        .expect_err("dangling");
    assert_eq!(e.field, "actions.create_invoice.destination");

    let e = Config::from_toml(&GOOD.replace("/card/number", "card")).expect_err("pointer");
    assert_eq!(e.field, "actions.create_invoice.redact[0].pointer");

    let e = Config::from_toml(&GOOD.replace("http://127", "ftp://127")).expect_err("url");
    assert_eq!(e.field, "destinations.billing.url");

    let e = Config::from_toml(
        &GOOD.replace("idempotency = \"key\"", "idempotency = \"key\"\ncolour = 1"),
    )
    .expect_err("unknown field");
    assert!(e.reason.contains("colour"), "{e}");
    assert_eq!(e.field, "destinations.billing.colour");

    let e = Config::from_toml(&GOOD.replace("\"key\"", "\"sometimes\"")).expect_err("bad value");
    assert!(
        e.reason.contains("sometimes") && e.reason.contains("key"),
        "{e}"
    );
    assert_eq!(e.field, "destinations.billing.idempotency");

    let e = Config::from_toml("[actions.a\ndestination = 1").expect_err("syntax");
    assert!(e.field.starts_with("line "), "{e}");
}

/// Action and destination names become metric labels and log fields: both are held to the same
/// rule (printable ASCII without spaces, at most 255 bytes), naming the section at fault.
#[test]
fn action_and_destination_names_are_checked_alike() {
    for bad in ["bill ing", "bill\tx", "billé", &"b".repeat(256)] {
        let quoted = serde_json::to_string(bad).expect("quote");
        let e = Config::from_toml(
            &GOOD
                .replace(
                    "[destinations.billing]",
                    &format!("[destinations.{quoted}]"),
                )
                .replace(
                    "destination = \"billing\"",
                    &format!("destination = {quoted}"),
                ),
        )
        .expect_err("a bad destination name");
        assert_eq!(e.field, format!("destinations.{bad}"), "{e}");
        assert!(e.reason.starts_with("destination name"), "{e}");
        let e = Config::from_toml(
            &GOOD.replace("[actions.create_invoice]", &format!("[actions.{quoted}]")),
        )
        .expect_err("a bad action name");
        assert_eq!(e.field, format!("actions.{bad}"), "{e}");
        assert!(e.reason.starts_with("action name"), "{e}");
    }
}

const AMQP: &str = r#"
    [actions.publish]
    destination = "bus"

    [destinations.bus]
    kind = "amqp"
    routing_key = "events"
"#;

#[test]
fn each_kind_has_only_its_own_fields() {
    let c = Config::from_toml(AMQP).expect("valid");
    let Destination::Amqp(a) = &c.destinations["bus"] else {
        panic!("an AMQP destination");
    };
    assert_eq!(
        (a.exchange.as_str(), a.routing_key.as_str()),
        ("", "events")
    );
    assert!(a.mandatory);
    assert_eq!(a.max_unconfirmed.get(), 256);
    assert_eq!(
        c.destinations["bus"].shared().idempotency,
        IdempotencyMode::Key
    );
    assert!(c.destinations["bus"].shared().lookup.is_none());
    let field = |text: String| Config::from_toml(&text).expect_err(&text).field;
    // An HTTP field on an AMQP destination, and the other way round, is an unknown field.
    assert_eq!(
        field(format!("{AMQP}url = \"http://x/\"")),
        "destinations.bus.url"
    );
    assert_eq!(
        field(GOOD.replace(
            "idempotency = \"key\"",
            "idempotency = \"key\"\nrouting_key = \"x\""
        )),
        "destinations.billing.routing_key"
    );
    assert_eq!(
        field(format!("{AMQP}idempotency = \"lookup\"")),
        "destinations.bus.idempotency"
    );
    assert_eq!(
        field(format!("{AMQP}max_unconfirmed = 0")),
        "destinations.bus.max_unconfirmed"
    );
    assert_eq!(
        field(AMQP.replace("routing_key = \"events\"", "")),
        "destinations.bus"
    );
    assert_eq!(
        field(AMQP.replace("\"amqp\"", "\"smtp\"")),
        "destinations.bus.kind"
    );
}

mod example {
    /// The example shipped in deploy/ must stay valid.
    #[test]
    fn deploy_example_parses() {
        let text = include_str!("../../../../deploy/oncebox.example.toml");
        let c = super::Config::from_toml(text).expect("deploy/oncebox.example.toml is valid");
        assert_eq!(c.actions.len(), 4);
        assert_eq!(c.destinations.len(), 4);
        let kinds: Vec<&str> = c
            .destinations
            .values()
            .map(|d| match d {
                super::Destination::Http(_) => "http",
                super::Destination::Amqp(_) => "amqp",
                super::Destination::Mcp(_) => "mcp",
            })
            .collect();
        assert_eq!(
            kinds,
            ["http", "amqp", "mcp", "http"],
            "every transport is shown"
        );
    }
}

#[test]
fn lookup_headers_are_the_destinations_unless_given_and_read_the_environment() {
    let with = |lookup_extra: &str| {
        GOOD.replace(
            "idempotency = \"key\"",
            &format!(
                "idempotency = \"lookup\"\nheaders = {{ Authorization = \"Bearer ${{D}}\" }}\n\
                 lookup = {{ url = \"http://x/find?key={{key}}\"{lookup_extra} }}"
            ),
        )
    };
    let env = |v: &str| (v == "D" || v == "L").then(|| format!("{v}-secret"));
    let mut c = Config::from_toml(&with("")).expect("valid");
    c.resolve_env(env).expect("resolved");
    assert_eq!(http(&c, "billing").lookup.expect("lookup").headers, None);

    let mut c =
        Config::from_toml(&with(", headers = { Authorization = \"Bearer ${L}\" }")).expect("valid");
    c.resolve_env(env).expect("resolved");
    let own = http(&c, "billing")
        .lookup
        .expect("lookup")
        .headers
        .expect("own");
    assert_eq!(
        own.values().map(|v| v.expose()).collect::<Vec<_>>(),
        ["Bearer L-secret"]
    );
    let mut c =
        Config::from_toml(&with(", headers = { Authorization = \"${UNSET}\" }")).expect("valid");
    assert_eq!(
        c.resolve_env(env).expect_err("unset").field,
        "destinations.billing.lookup.headers.Authorization"
    );
}

const MCP: &str = r#"
[actions.open_ticket]
destination = "helpdesk"
tool = { description = "Open a ticket." }

[destinations.helpdesk]
kind = "mcp"
url = "https://helpdesk.example/mcp"
idempotency = "key"
headers = { Authorization = "Bearer ${H}" }
read_only_tools = ["search_tickets"]
"#;

#[test]
fn an_mcp_destination_names_its_tools_and_reads_its_secrets() {
    let mut c = Config::from_toml(MCP).expect("valid");
    let Destination::Mcp(m) = &c.destinations["helpdesk"] else {
        panic!("an MCP destination");
    };
    assert_eq!(m.tool, None, "default: the action's name");
    assert_eq!(m.read_only_tools, ["search_tickets"]);
    assert_eq!(
        c.destinations["helpdesk"].shared().timeout,
        Duration::from_secs(10)
    );
    let err = c.clone().resolve_env(|_| None).expect_err("unset");
    assert_eq!(err.field, "destinations.helpdesk.headers.Authorization");
    c.resolve_env(|_| Some("s".into())).expect("resolved");
    let field = |text: String| Config::from_toml(&text).expect_err(&text).field;
    let clash = |tool: &str| MCP.replace("\"search_tickets\"", &format!("\"{tool}\""));
    // A read-only tool may not take the name of a tool the gateway already offers.
    for taken in ["open_ticket", "get_intent"] {
        assert_eq!(
            field(clash(taken)),
            "destinations.helpdesk.read_only_tools[0]"
        );
    }
    assert_eq!(
        field(clash("a b")),
        "destinations.helpdesk.read_only_tools[0]"
    );
    assert_eq!(
        field(MCP.replace("\"key\"", "\"lookup\"")),
        "destinations.helpdesk.lookup"
    );
    assert_eq!(
        field(format!("{MCP}tool = \"\"")),
        "destinations.helpdesk.tool"
    );
    assert_eq!(
        field(format!("{MCP}routing_key = \"x\"")),
        "destinations.helpdesk.routing_key"
    );
    assert_eq!(
        field(MCP.replace("https://helpdesk.example/mcp", "helpdesk")),
        "destinations.helpdesk.url"
    );
}

#[test]
fn an_approval_notifies_a_destination_that_exists_and_does_not_execute_it() {
    let with = |notify: &str| {
        Config::from_toml(&format!(
            "{GOOD}
    [actions.create_invoice.approval]
    notify = {notify:?}

    [destinations.approvals]
    kind = \"http\"
    url = \"http://127.0.0.1:9/approvals\"
    idempotency = \"key\"

    [destinations.agent_tools]
    kind = \"mcp\"
    url = \"http://127.0.0.1:9/mcp\"
    idempotency = \"key\"
"
        ))
    };
    let c = with("approvals").expect("valid");
    let policy = c.action("create_invoice").and_then(|a| a.approval.as_ref());
    assert_eq!(policy.and_then(|p| p.notify.as_deref()), Some("approvals"));
    for (notify, says) in [
        ("nope", "no destination named \"nope\""),
        ("agent_tools", "is an MCP tool"),
        ("billing", "executes action \"create_invoice\""),
    ] {
        let e = with(notify).expect_err(notify);
        assert_eq!(e.field, "actions.create_invoice.approval.notify", "{e}");
        assert!(e.reason.contains(says), "{notify}: {e}");
    }
}

#[test]
fn an_approver_sees_the_tested_and_the_redacted_fields_once_each() {
    let text = r#"
[actions.pay]
destination = "d"
redact = [{ pointer = "/iban", mode = "hash" }, { pointer = "/amount", mode = "hash" }]
[actions.pay.approval]
when = { type = "object", properties = { amount = { decimalMinimum = "1000" }, payee = { properties = { country = { const = "XX" } } } } }
[actions.free]
destination = "d"
redact = [{ pointer = "/card", mode = "drop" }]
[destinations.d]
kind = "http"
url = "http://h/"
idempotency = "key"
"#;
    let config = Config::from_toml(text).expect("valid");
    let keys = crate::redact::RedactionKeys::parse("k:a secret of thirty-two bytes or more").ok();
    let rules = crate::intake::Rules::new(&config, keys).expect("keys");
    assert_eq!(
        rules.approver_fields("pay"),
        ["/amount", "/payee/country", "/payee", "/iban"]
    );
    assert!(
        rules.approver_fields("free").is_empty(),
        "no policy, nothing shown"
    );
    assert!(rules.approver_fields("nope").is_empty());
}
