//! `oncebox ops approve` and `oncebox ops reject`: a person's decision on an intent awaiting
//! approval (docs/approvals.md), made through the ops API with the person's own token — as the
//! console makes it — so that the audit log records the principal the token names, never a
//! name typed on the command line.

use clap::Args as ClapArgs;
use oncebox_client::{Client, ClientError};

use crate::exit::{CliError, CliResult};

/// The environment variable holding the operator's own ops token.
pub(crate) const TOKEN_ENV: &str = "ONCEBOX_TOKEN";

/// The intent a decision is about, and the API it goes through.
#[derive(Debug, ClapArgs)]
pub(crate) struct Decision {
    /// The intent's idempotency key (of the token's tenant).
    pub(crate) key: String,
    /// The oncebox API (`oncebox serve`) to decide through, e.g. https://oncebox.example.com.
    /// Your ops token is read from ONCEBOX_TOKEN (never from the command line, where the shell
    /// history and the process list would keep it).
    #[arg(long, env = "ONCEBOX_API_URL")]
    pub(crate) api: String,
}

/// The intent `ops approve` approves, and why.
#[derive(Debug, ClapArgs)]
pub(crate) struct ApproveArgs {
    #[command(flatten)]
    pub(crate) decision: Decision,
    /// Why (recorded in the audit log).
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

/// The intent `ops reject` rejects, and why.
#[derive(Debug, ClapArgs)]
pub(crate) struct RejectArgs {
    #[command(flatten)]
    pub(crate) decision: Decision,
    /// Why (recorded in the audit log). Required.
    #[arg(long)]
    pub(crate) reason: String,
}

impl Decision {
    /// A client of the API with the operator's token.
    fn client(&self) -> Result<Client, CliError> {
        let token = std::env::var(TOKEN_ENV).unwrap_or_default();
        if token.trim().is_empty() {
            return Err(CliError::usage(
                TOKEN_ENV,
                format!(
                    "{TOKEN_ENV}: set it to your own ops token (oncebox ops token create --role ops --holder YOU): decisions are recorded under its holder"
                ),
            ));
        }
        Client::new(&self.api, token.trim()).map_err(refused)
    }
}

/// A client error as the CLI reports it: a refusal (409) exits 3, a missing key 4, bad input
/// or a token the API refuses 2.
fn refused(e: ClientError) -> CliError {
    match &e {
        ClientError::Api(p) if p.status == 409 => CliError::Conflict(p.to_string()),
        ClientError::Api(p) if p.status == 404 => CliError::NotFound(p.to_string()),
        ClientError::Api(p) if matches!(p.status, 400 | 401 | 403 | 422) => {
            let field = p.field.clone().unwrap_or_else(|| "request".into());
            CliError::usage(field, p.to_string())
        }
        ClientError::Invalid { field, message } => {
            let field = if *field == "base_url" { "api" } else { field };
            CliError::usage(field, format!("{field}: {message}"))
        }
        _ => CliError::Other(e.into()),
    }
}

fn print(intent: &oncebox_client::Intent, json_out: bool, note: &str) -> CliResult {
    if json_out {
        let doc = serde_json::to_string(intent).map_err(|e| CliError::Other(e.into()))?;
        println!("{doc}");
    } else {
        println!("{}\t{}", intent.idempotency_key, intent.status);
        eprintln!("{note}");
    }
    Ok(())
}

/// Records the operator's approval; the last one needed sends the intent on its way.
pub(crate) async fn approve(a: ApproveArgs, json_out: bool) -> CliResult {
    let client = a.decision.client()?;
    let intent = client
        .approve(&a.decision.key, a.reason.as_deref())
        .await
        .map_err(refused)?;
    let note = if intent.waits_for_a_person() {
        "approval recorded; waiting for another person"
    } else {
        "approval recorded: the intent is on its way to its destination"
    };
    print(&intent, json_out, note)
}

/// Rejects the intent: it ends rejected and is never sent.
pub(crate) async fn reject(a: RejectArgs, json_out: bool) -> CliResult {
    if a.reason.trim().is_empty() {
        return Err(CliError::usage(
            "reason",
            "reason: a rejection needs a reason",
        ));
    }
    let client = a.decision.client()?;
    let intent = client
        .reject(&a.decision.key, &a.reason)
        .await
        .map_err(refused)?;
    print(&intent, json_out, "rejected: it is never sent")
}
