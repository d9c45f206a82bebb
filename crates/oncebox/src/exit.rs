//! Errors at the binary's edge and their exit codes.

use std::process::ExitCode;

use oncebox_store::SubmitError;

/// Why a command failed, and so which exit code it ends with.
#[derive(Debug)]
pub(crate) enum CliError {
    /// Bad input: exit 2.
    Usage {
        field: Option<String>,
        message: String,
    },
    /// The key names another request: exit 3.
    Conflict(String),
    /// Nothing with that name: exit 4.
    NotFound(String),
    /// Anything else: exit 1.
    Other(anyhow::Error),
}

impl CliError {
    pub(crate) fn usage(field: impl Into<String>, message: impl Into<String>) -> Self {
        CliError::Usage {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    fn code(&self) -> u8 {
        match self {
            CliError::Usage { .. } => 2,
            CliError::Conflict(_) => 3,
            CliError::NotFound(_) => 4,
            CliError::Other(_) => 1,
        }
    }

    /// Prints the error on stderr (as JSON with `--json`) and returns the exit code.
    pub(crate) fn report(&self, json: bool) -> ExitCode {
        let (kind, field, message) = match self {
            CliError::Usage { field, message } => ("invalid", field.clone(), message.clone()),
            CliError::Conflict(m) => ("conflict", Some("idempotency_key".into()), m.clone()),
            CliError::NotFound(m) => ("not_found", None, m.clone()),
            CliError::Other(e) => ("error", None, sentence(e)),
        };
        if json {
            let doc = serde_json::json!({"error": kind, "field": field, "message": message, "exit_code": self.code()});
            eprintln!("{doc}");
        } else {
            eprintln!("error: {message}");
        }
        ExitCode::from(self.code())
    }
}

/// `e` and its causes as one sentence: each cause once, a database error by its message alone
/// (not the line of Postgres's source the driver appends, nor its repetitions down the chain),
/// and a missing oncebox table pointed at `oncebox migrate`.
fn sentence(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut missing_schema = false;
    for cause in e.chain() {
        let database = cause
            .downcast_ref::<sqlx::Error>()
            .or_else(|| match cause.downcast_ref::<oncebox_store::StoreError>() {
                Some(oncebox_store::StoreError::Database(d)) => Some(d),
                _ => None,
            })
            .and_then(|d| d.as_database_error());
        let text = match database {
            Some(db) => {
                missing_schema = schema_missing(db.code().as_deref(), db.message());
                db.message().to_owned()
            }
            None => cause.to_string(),
        };
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        if database.is_some() {
            // The rest of the chain is the same error again, in the driver's words.
            break;
        }
    }
    if missing_schema {
        out.push_str(
            "; this database has no oncebox schema, or an older one: run `oncebox migrate` first",
        );
    }
    out
}

/// Whether Postgres's error (`code`, `message`) says that the oncebox schema, or one of its
/// tables or functions, is not there: the database was never migrated, or not since this binary's
/// migrations.
fn schema_missing(code: Option<&str>, message: &str) -> bool {
    match code {
        // undefined_table, undefined_function
        Some("42P01" | "42883") => message.contains("oncebox."),
        // invalid_schema_name
        Some("3F000") => message.contains("\"oncebox\""),
        _ => false,
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> Self {
        CliError::Other(e)
    }
}

impl From<oncebox_store::StoreError> for CliError {
    fn from(e: oncebox_store::StoreError) -> Self {
        CliError::Other(e.into())
    }
}

impl From<sqlx::Error> for CliError {
    fn from(e: sqlx::Error) -> Self {
        CliError::Other(e.into())
    }
}

impl From<SubmitError> for CliError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Invalid(inv) => CliError::Usage {
                message: inv.to_string(),
                field: Some(inv.field),
            },
            conflict @ SubmitError::KeyConflict { .. } => CliError::Conflict(conflict.to_string()),
            SubmitError::Store(s) => CliError::Other(s.into()),
        }
    }
}

/// The result of a command.
pub(crate) type CliResult = Result<(), CliError>;

#[cfg(test)]
mod tests {
    use super::schema_missing;

    #[test]
    fn a_missing_schema_table_or_function_of_oncebox_is_a_missing_schema() {
        assert!(schema_missing(
            Some("3F000"),
            "schema \"oncebox\" does not exist"
        ));
        assert!(schema_missing(
            Some("42P01"),
            "relation \"oncebox.intents\" does not exist"
        ));
        assert!(schema_missing(
            Some("42883"),
            "function oncebox.intent_by_key(text, text) does not exist"
        ));
        assert!(!schema_missing(
            Some("42P01"),
            "relation \"orders\" does not exist"
        ));
        assert!(!schema_missing(
            Some("3F000"),
            "schema \"billing\" does not exist"
        ));
        assert!(!schema_missing(Some("23505"), "oncebox.intents"));
        assert!(!schema_missing(None, "oncebox."));
    }
}
