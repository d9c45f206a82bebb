//! Configuration errors that name the field: the TOML parser's errors carry a byte span, which
//! is mapped back to the dotted path of the key it falls in (`destinations.billing.timeout`,
//! `actions.a.redact[0].pointer`).

use std::ops::Range;

use toml::de::{DeTable, DeValue};

/// A configuration that cannot be used, naming the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ConfigError {
    /// The dotted path of the field, such as `destinations.billing.timeout`; for a syntax
    /// error, `line L, column C`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl ConfigError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The same error about a field of the section `prefix` names: a check that knows only its
    /// section (`lookup.url`) is placed in the file (`destinations.billing.lookup.url`).
    #[must_use]
    pub fn within(self, prefix: &str) -> ConfigError {
        ConfigError {
            field: format!("{prefix}{}", self.field),
            reason: self.reason,
        }
    }
}

type Spanned<T> = toml::Spanned<T>;

/// The error of `toml::from_str(text)`, with its field named.
pub(super) fn from_toml(text: &str, e: &toml::de::Error) -> ConfigError {
    let reason = e.message().to_owned();
    let Some(span) = e.span() else {
        return ConfigError::new("config", reason);
    };
    let Ok(root) = DeTable::parse(text) else {
        return ConfigError::new(line_and_column(text, span.start), reason);
    };
    let mut path = Vec::new();
    locate(root.get_ref(), &span, &mut path);
    // A destination is read as a whole before its kind is known: an error inside one spans
    // the whole table. Reading that table again as its kind's fields finds the field itself.
    if let [first, name] = path.as_slice()
        && first == "destinations"
        && let Some(inner) = refine_destination(root.get_ref(), name)
    {
        return inner;
    }
    if path.is_empty() {
        return ConfigError::new(line_and_column(text, span.start), reason);
    }
    ConfigError::new(join(&path), reason)
}

/// Reads `[destinations.NAME]` again as the fields of its kind, directly from the spanned
/// document, so that an error carries the span of the very field.
fn refine_destination(root: &DeTable<'_>, name: &str) -> Option<ConfigError> {
    let table = root.get("destinations")?.get_ref().as_table()?;
    let (_, value) = table.iter().find(|(k, _)| k.get_ref() == name)?;
    let fields = value.get_ref().as_table()?;
    let kind = fields
        .iter()
        .find(|(k, _)| k.get_ref() == "kind")
        .and_then(|(_, v)| v.get_ref().as_str())?
        .to_owned();
    let mut rest = DeTable::new();
    for (k, v) in fields.iter().filter(|(k, _)| k.get_ref() != "kind") {
        rest.insert(k.clone(), v.clone());
    }
    let rest: Spanned<DeValue<'_>> = Spanned::new(value.span(), DeValue::Table(rest));
    let deserializer = toml::de::ValueDeserializer::from(rest);
    let error = match kind.as_str() {
        "http" => serde::Deserialize::deserialize(deserializer)
            .map(|_: super::HttpConfig| ())
            .err(),
        "amqp" => serde::Deserialize::deserialize(deserializer)
            .map(|_: super::AmqpConfig| ())
            .err(),
        "mcp" => serde::Deserialize::deserialize(deserializer)
            .map(|_: super::McpConfig| ())
            .err(),
        _ => None,
    }?;
    let span = error.span()?;
    let mut path = Vec::new();
    locate(root, &span, &mut path);
    Some(ConfigError::new(join(&path), error.message()))
}

/// Pushes onto `path` the keys (and array indices) whose extent contains `span`, outermost
/// first.
fn locate(table: &DeTable<'_>, span: &Range<usize>, path: &mut Vec<String>) {
    for (key, value) in table.iter() {
        if contains(&key.span(), span) || contains(&extent(value), span) {
            path.push(key.get_ref().to_string());
            locate_value(value, span, path);
            return;
        }
    }
}

fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// The text a value covers: its own span and its children's (a `[table]`'s own span is only
/// its header).
fn extent(value: &Spanned<DeValue<'_>>) -> Range<usize> {
    let mut r = value.span();
    let mut widen = |o: Range<usize>| {
        r.start = r.start.min(o.start);
        r.end = r.end.max(o.end);
    };
    match value.get_ref() {
        DeValue::Table(t) => {
            for (k, v) in t.iter() {
                widen(k.span());
                widen(extent(v));
            }
        }
        DeValue::Array(items) => items.iter().for_each(|i| widen(extent(i))),
        _ => {}
    }
    r
}

fn locate_value(value: &Spanned<DeValue<'_>>, span: &Range<usize>, path: &mut Vec<String>) {
    match value.get_ref() {
        DeValue::Table(t) => locate(t, span, path),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                if contains(&extent(item), span) {
                    if let Some(last) = path.last_mut() {
                        last.push_str(&format!("[{i}]"));
                    }
                    locate_value(item, span, path);
                    return;
                }
            }
        }
        _ => {}
    }
}

fn join(path: &[String]) -> String {
    path.join(".")
}

fn line_and_column(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("line {line}, column {column}")
}
