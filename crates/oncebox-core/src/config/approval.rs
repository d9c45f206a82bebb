//! An approval policy: which intents of an action wait for people before they are sent, how
//! many people, and for how long. Every way in (the Rust library, Python, the CLI,
//! the HTTP API, MCP) writes an intent the policy matches `awaiting_approval`, and no worker
//! sends it until enough distinct people approved it (`oncebox ops approve`).
//!
//! ```toml
//! [actions.refund.approval]
//! when = { type = "object", required = ["amount"], properties = { amount = { decimalMinimum = "1000" } } }
//! approvals = 2          # distinct approvers (default 1)
//! expires_after = "24h"  # the default; the intent's own deadline wins when earlier
//! notify = "approvals"   # optional: a destination told of each intent that waits
//! ```
//!
//! `notify` names an HTTP or AMQP destination that a worker sends one "approval requested"
//! message per waiting intent (its key, a summary, the redacted arguments and the console's
//! link), signed as that destination signs deliveries and carrying the stable key
//! `approval:<key>`, so that a repeat is recognised.
//!
//! `when` is a JSON Schema the arguments are matched against: an intent needs approval when they
//! match it (absent: always). Exact amounts travel as decimal strings (`"1250.00"`), which JSON
//! Schema's `minimum` does not compare, so `when` also understands four keywords of its own —
//! `decimalMinimum`, `decimalExclusiveMinimum`, `decimalMaximum`, `decimalExclusiveMaximum` —
//! whose bound is a decimal string or a number and which compare a decimal string or a number
//! exactly, digit by digit, never through floating point. Like `minimum`, they say nothing about
//! a value that is not a number: `"twelve"` passes them, so the condition matches and the intent
//! waits for a person; so does an intent without the property, unless `when` lists it in
//! `required` (leave it out, and let the action's `arguments_schema` require the amount, for a
//! condition that errs on the side of asking).

use std::cmp::Ordering;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use jsonschema::{Keyword, ValidationError};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::defaults;
use crate::duration::NonZeroDuration;

/// The approval policy of an action.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// The arguments that need approval (a JSON Schema they are matched against); absent:
    /// every intent of the action.
    #[serde(default)]
    pub when: Option<ApprovalCondition>,
    /// How many distinct people must approve (default 1).
    #[serde(default = "defaults::one")]
    pub approvals: NonZeroU32,
    /// How long an intent waits for its approvals before it expires (default 24h); the
    /// intent's own deadline wins when it is earlier.
    #[serde(default = "defaults::approval_expiry")]
    pub expires_after: NonZeroDuration,
    /// The destination told of each intent that waits (an "approval requested" message), if
    /// any.
    #[serde(default)]
    pub notify: Option<String>,
}

impl Approval {
    /// The JSON pointers of the fields its condition tests (none without one).
    pub fn tested(&self) -> impl Iterator<Item = &str> {
        self.when
            .iter()
            .flat_map(|w| w.tested.iter().map(|t| t.pointer.as_str()))
    }

    /// Whether an intent with `arguments` needs approval under this policy.
    pub fn required_for(&self, arguments: &Value) -> bool {
        self.when
            .as_ref()
            .is_none_or(|when| when.matches(arguments))
    }
}

/// The condition `when`: a compiled JSON Schema with the decimal keywords, and the fields it
/// tests (every member named under `properties`, at any depth). It fails closed: arguments
/// that leave out a tested field (or spell it otherwise: `Amount` for `amount`), or give a field
/// a decimal keyword compares a value that is not a decimal, match whatever the schema says —
/// the intent waits for a person rather than skipping approval.
#[derive(Clone)]
pub struct ApprovalCondition {
    source: Arc<Value>,
    validator: Arc<jsonschema::Validator>,
    tested: Arc<[TestedField]>,
}

/// A field `when` names under `properties`: its JSON pointer into the arguments, and whether a
/// decimal keyword compares it.
#[derive(Debug)]
struct TestedField {
    pointer: String,
    decimal: bool,
}

/// The fields `schema` names under `properties`, at any depth, below `at`.
fn tested_fields(schema: &Value, at: &str, into: &mut Vec<TestedField>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, sub) in properties {
        let pointer = format!("{at}/{}", name.replace('~', "~0").replace('/', "~1"));
        let decimal = DECIMAL_KEYWORDS
            .iter()
            .any(|(keyword, _)| sub.get(*keyword).is_some());
        tested_fields(sub, &pointer, into);
        into.push(TestedField { pointer, decimal });
    }
}

/// The decimal keywords `when` understands, and which side of the bound passes each.
const DECIMAL_KEYWORDS: [(&str, Bound); 4] = [
    ("decimalMinimum", Bound::AtLeast),
    ("decimalExclusiveMinimum", Bound::Above),
    ("decimalMaximum", Bound::AtMost),
    ("decimalExclusiveMaximum", Bound::Below),
];

impl ApprovalCondition {
    /// Compiles `source` (draft 2020-12 unless its `$schema` names another draft) with the
    /// decimal keywords.
    ///
    /// # Errors
    /// What is wrong with the schema: not an object, not a valid schema, a decimal keyword whose
    /// bound is not a decimal, or a reference that would need fetching.
    pub fn new(source: Value) -> Result<ApprovalCondition, String> {
        if !source.is_object() {
            return Err(
                "must be a JSON Schema object, such as { properties = { amount = { decimalMinimum = \"1000\" } } }"
                    .into(),
            );
        }
        let mut options = jsonschema::options();
        for (name, bound) in DECIMAL_KEYWORDS {
            options = options.with_keyword(name, move |_, value, _| {
                let limit = Decimal::of(value).ok_or_else(|| {
                    ValidationError::custom(format!(
                        "{name} must be a decimal such as \"1000\" or \"12.50\", not {value}"
                    ))
                })?;
                Ok(Box::new(DecimalBound { bound, limit }) as Box<dyn for<'i> Keyword<'i>>)
            });
        }
        let validator = options.build(&source).map_err(|e| e.to_string())?;
        let mut tested = Vec::new();
        tested_fields(&source, "", &mut tested);
        Ok(ApprovalCondition {
            source: Arc::new(source),
            validator: Arc::new(validator),
            tested: tested.into(),
        })
    }

    /// The schema as written.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Whether `arguments` match the condition: the schema holds, or a tested field is missing,
    /// or a field a decimal keyword compares holds no decimal (fail closed).
    pub fn matches(&self, arguments: &Value) -> bool {
        self.validator.is_valid(arguments)
            || self
                .tested
                .iter()
                .any(|f| match arguments.pointer(&f.pointer) {
                    None => true,
                    Some(value) => f.decimal && Decimal::of(value).is_none(),
                })
    }
}

impl PartialEq for ApprovalCondition {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl fmt::Debug for ApprovalCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ApprovalCondition")
            .field(&self.source)
            .finish()
    }
}

impl<'de> Deserialize<'de> for ApprovalCondition {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let source = Value::deserialize(deserializer)?;
        ApprovalCondition::new(source).map_err(serde::de::Error::custom)
    }
}

/// Which values a decimal keyword lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    AtLeast,
    Above,
    AtMost,
    Below,
}

/// A decimal keyword with its bound.
struct DecimalBound {
    bound: Bound,
    limit: Decimal,
}

impl<'i> Keyword<'i> for DecimalBound {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(ValidationError::custom(format!(
                "is not {} {}",
                match self.bound {
                    Bound::AtLeast => "at least",
                    Bound::Above => "above",
                    Bound::AtMost => "at most",
                    Bound::Below => "below",
                },
                self.limit
            )))
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        let Some(value) = Decimal::of(instance) else {
            return true; // not a number: like `minimum`, the keyword says nothing
        };
        let order = value.cmp(&self.limit);
        match self.bound {
            Bound::AtLeast => order != Ordering::Less,
            Bound::Above => order == Ordering::Greater,
            Bound::AtMost => order != Ordering::Greater,
            Bound::Below => order == Ordering::Less,
        }
    }
}

/// An exact decimal: a sign, significant digits (no leading or trailing zeros; none for zero)
/// and the power of ten of the last digit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

/// Decimals longer than this are not read (a bound on the work one comparison does).
const MAX_DECIMAL_LEN: usize = 1024;

impl Decimal {
    /// Reads a JSON number, or a string holding one (`"1250.00"`, `"-3"`, `"1e3"`); `None` for
    /// anything else.
    fn of(value: &Value) -> Option<Decimal> {
        match value {
            Value::String(s) => Decimal::parse(s),
            Value::Number(n) => Decimal::parse(&n.to_string()),
            _ => None,
        }
    }

    fn parse(text: &str) -> Option<Decimal> {
        if text.is_empty() || text.len() > MAX_DECIMAL_LEN {
            return None;
        }
        let (negative, rest) = match text.as_bytes()[0] {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
            None => (rest, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() && fraction.is_empty()
            || !all_digits(whole)
            || !all_digits(fraction)
            || exponent.unsigned_abs() > 1 << 40
        {
            return None;
        }
        let mut digits: Vec<u8> = whole
            .bytes()
            .chain(fraction.bytes())
            .map(|b| b - b'0')
            .collect();
        let mut exponent = exponent - i64::try_from(fraction.len()).ok()?;
        while digits.last() == Some(&0) {
            digits.pop();
            exponent += 1;
        }
        let leading = digits.iter().take_while(|d| **d == 0).count();
        digits.drain(..leading);
        let negative = negative && !digits.is_empty();
        Some(Decimal {
            negative,
            digits,
            exponent,
        })
    }

    /// The power of ten just above the most significant digit (comparable between non-zero
    /// decimals of one sign: the larger it is, the larger the magnitude).
    fn magnitude(&self) -> i64 {
        self.exponent + i64::try_from(self.digits.len()).unwrap_or(i64::MAX)
    }

    fn cmp_magnitude(&self, other: &Decimal) -> Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        self.magnitude()
            .cmp(&other.magnitude())
            // Same magnitude: the digits from the most significant on, a missing one a zero.
            .then_with(|| self.digits.cmp(&other.digits))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Decimal) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.cmp_magnitude(other),
            (true, true) => other.cmp_magnitude(self),
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Decimal) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.digits.is_empty() {
            return f.write_str("0");
        }
        let digits: String = self.digits.iter().map(|d| char::from(b'0' + d)).collect();
        let sign = if self.negative { "-" } else { "" };
        write!(f, "{sign}{digits}e{}", self.exponent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn d(s: &str) -> Decimal {
        Decimal::parse(s).unwrap_or_else(|| panic!("{s} is a decimal"))
    }

    #[test]
    fn decimals_compare_exactly_whatever_their_spelling() {
        let ascending = [
            "-1e3",
            "-999.99",
            "-1",
            "-0.001",
            "0",
            "0.000",
            "-0",
            "1e-30",
            "0.5",
            "1",
            "1.0",
            "999.999999999999999999",
            "1000",
            "1000.00",
            "1e3",
            "1000.01",
            "1250.00",
            "100000000000000000000000000000.1",
        ];
        for pair in ascending.windows(2) {
            let (a, b) = (d(pair[0]), d(pair[1]));
            let same = ["0", "0.000", "-0", "1", "1.0", "1000", "1000.00", "1e3"];
            if same.contains(&pair[0]) && same.contains(&pair[1]) {
                assert_eq!(a.cmp(&b), Ordering::Equal, "{} = {}", pair[0], pair[1]);
            } else {
                assert_eq!(a.cmp(&b), Ordering::Less, "{} < {}", pair[0], pair[1]);
            }
        }
        for bad in [
            "",
            "-",
            ".",
            "1.2.3",
            "12a",
            "1e",
            "0x10",
            "1e99999999999999",
            " 1",
            "NaN",
        ] {
            assert_eq!(Decimal::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Decimal::parse(&"9".repeat(MAX_DECIMAL_LEN + 1)), None);
    }

    fn refunds() -> Approval {
        toml::from_str(
            r#"
approvals = 2
when = { type = "object", required = ["amount"], properties = { amount = { decimalMinimum = "1000" } } }
"#,
        )
        .expect("a policy")
    }

    #[test]
    fn refunds_of_a_thousand_or_more_need_approval_as_strings_and_as_numbers() {
        let p = refunds();
        assert_eq!(p.approvals.get(), 2);
        assert_eq!(p.expires_after.get(), Duration::from_secs(86_400));
        for (amount, needs) in [
            (json!("5000.00"), true),
            (json!("1250.00"), true),
            (json!("1000"), true),
            (json!("1000.00"), true),
            (json!("999.99"), false),
            (json!("50"), false),
            (json!(1250), true),
            (json!(1000.0), true),
            (json!(999.5), false),
            (json!("-5000"), false),
        ] {
            assert_eq!(
                p.required_for(&json!({"amount": amount})),
                needs,
                "amount {amount}"
            );
        }
        // An amount that is not a number: the decimal keyword says nothing, the condition asks.
        assert!(p.required_for(&json!({"amount": "lots"})));
        let always: Approval = toml::from_str("").expect("a policy");
        assert!(always.required_for(&json!({"amount": "1"})));
        assert_eq!(always.approvals.get(), 1);
    }

    /// The condition fails closed: no way of leaving out, misspelling or disguising the amount
    /// skips approval, with or without `required`, at the top level or nested.
    #[test]
    fn a_tested_field_left_out_misspelt_or_disguised_waits_for_a_person() {
        let required = refunds();
        let plain: Approval =
            toml::from_str(r#"when = { properties = { amount = { decimalMinimum = "1000" } } }"#)
                .expect("a policy");
        for p in [&required, &plain] {
            for evasion in [
                json!({}),
                json!({"Amount": "5000"}),
                json!({"AMOUNT": 5000}),
                json!({"amount ": "5000"}),
                json!({"amount": " 5000"}),
                json!({"amount": "5000 "}),
                json!({"amount": "5,000"}),
                json!({"amount": "5e3"}),
                json!({"amount": "+5000"}),
                json!({"amount": ["5000"]}),
                json!({"amount": {"value": "5000"}}),
                json!({"amount": null}),
                json!({"amount": true}),
            ] {
                assert!(p.required_for(&evasion), "{evasion} skipped approval");
            }
            assert!(
                !p.required_for(&json!({"amount": "50"})),
                "a small refund goes"
            );
            assert!(!p.required_for(&json!({"amount": "50", "Amount": "5000"})));
        }
        let nested: Approval = toml::from_str(
            r#"when = { properties = { payment = { properties = { "net/amount" = { decimalMinimum = "1000" } } } } }"#,
        )
        .expect("a policy");
        for evasion in [
            json!({}),
            json!({"payment": {}}),
            json!({"payment": {"net~1amount": "5000"}}),
            json!({"payment": {"net/amount": "5e3"}}),
            json!({"payment": {"net/amount": [1]}}),
        ] {
            assert!(nested.required_for(&evasion), "{evasion} skipped approval");
        }
        assert!(!nested.required_for(&json!({"payment": {"net/amount": "999"}})));
    }

    #[test]
    fn the_exclusive_and_upper_bounds_keep_their_side() {
        let p: Approval = toml::from_str(
            r#"when = { properties = { a = { decimalExclusiveMinimum = "10", decimalExclusiveMaximum = 20 }, b = { decimalMaximum = "-1.5" } } }"#,
        )
        .expect("a policy");
        let needs = |a: Value| p.required_for(&json!({"a": a, "b": "-2"}));
        assert!(!needs(json!("10")) && needs(json!("10.0001")) && needs(json!(19.99)));
        assert!(!needs(json!("20")) && !needs(json!(20)));
        assert!(!p.required_for(&json!({"a": "15", "b": "-1.49"})));
    }

    #[test]
    fn a_bad_condition_is_refused_naming_the_keyword() {
        for (when, says) in [
            (
                json!({"properties": {"a": {"decimalMinimum": "ten"}}}),
                "decimalMinimum",
            ),
            (
                json!({"properties": {"a": {"decimalMaximum": [1]}}}),
                "decimalMaximum",
            ),
            (json!({"type": 12}), "12"),
            (json!("object"), "JSON Schema object"),
            (
                json!({"$ref": "https://example.invalid/s.json"}),
                "example.invalid",
            ),
        ] {
            let e = ApprovalCondition::new(when.clone()).expect_err("refused");
            assert!(e.contains(says), "{when}: {e}");
        }
    }
}
