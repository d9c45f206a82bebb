//! `[console]`: how people sign in to the web console. Ops tokens always work; with
//! `[console.oidc]`, people sign in with the company's OpenID Connect provider instead, and
//! the groups the provider says they belong to decide the tenant they see and their role.
//!
//! ```toml
//! [console.oidc]
//! issuer = "https://id.example.com/realms/acme"
//! client_id = "oncebox-console"
//! redirect_url = "https://oncebox.example.com/console/oidc/callback"
//! groups_claim = "groups"
//! [console.oidc.groups]
//! payments-approvers = { tenant = "acme", role = "ops" }
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use super::ConfigError;
use super::types::HttpUrl;
use crate::duration::HumanDuration;
use crate::key::validate_token;

/// The console's sign-in settings.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Sign-in through an OpenID Connect provider, beside ops tokens.
    #[serde(default)]
    pub oidc: Option<OidcConfig>,
}

/// Sign-in through an OpenID Connect provider (authorization code with PKCE).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer URL: its discovery document is at
    /// `ISSUER/.well-known/openid-configuration`, and every ID token must name it.
    pub issuer: HttpUrl,
    /// The console's client id at the provider: every ID token's audience must hold it.
    pub client_id: String,
    /// The environment variable that holds the client's secret (never the file).
    #[serde(default = "default_secret_env")]
    pub client_secret_env: String,
    /// Where the provider sends people back: this server's `/console/oidc/callback`, as
    /// registered at the provider.
    pub redirect_url: HttpUrl,
    /// The ID token claim that lists the person's groups.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// The scopes asked for besides `openid`.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The provider's name on the sign-in button.
    #[serde(default = "default_name")]
    pub name: String,
    /// How far the provider's clock may be from this server's when an ID token's issue and
    /// expiry times are checked.
    #[serde(default = "default_skew")]
    pub max_clock_skew: HumanDuration,
    /// Group name → the tenant its members see and their role. A person in none of these
    /// groups is refused; one in several gets the first in name order.
    pub groups: BTreeMap<String, GroupGrant>,
}

/// What membership of a group grants in the console.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupGrant {
    /// The tenant the group's members see and decide for.
    pub tenant: String,
    /// Their role: `ops` (the console serves operators only).
    pub role: ConsoleRole,
}

/// A role the console grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsoleRole {
    /// An operator: sees the tenant's intents and decides on them.
    Ops,
}

/// The variable the client secret is read from by default.
pub(crate) const DEFAULT_SECRET_ENV: &str = "ONCEBOX_OIDC_CLIENT_SECRET";

fn default_secret_env() -> String {
    DEFAULT_SECRET_ENV.to_owned()
}
fn default_groups_claim() -> String {
    "groups".to_owned()
}
fn default_scopes() -> Vec<String> {
    vec!["email".to_owned(), "profile".to_owned()]
}
fn default_name() -> String {
    "your identity provider".to_owned()
}
fn default_skew() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(60))
}

/// The callback path every `redirect_url` must end in.
pub const CALLBACK_PATH: &str = "/console/oidc/callback";

impl OidcConfig {
    /// Checks what the types cannot: an issuer and a redirect over https (http only on
    /// loopback), the redirect to the console's callback, a client id, a secret variable, at
    /// least one group, each group's tenant.
    ///
    /// # Errors
    /// [`ConfigError`] naming the field within `console.oidc`.
    pub fn check(&self) -> Result<(), ConfigError> {
        let refuse = |field: &str, why: String| Err(ConfigError::new(field, why));
        for (field, url) in [
            ("issuer", &self.issuer),
            ("redirect_url", &self.redirect_url),
        ] {
            if !secure_or_loopback(url.as_str()) {
                return refuse(
                    field,
                    format!(
                        "{:?} must use https (http only on 127.0.0.1 or localhost)",
                        url.as_str()
                    ),
                );
            }
        }
        let path = self
            .redirect_url
            .as_str()
            .split(['?', '#'])
            .next()
            .unwrap_or("");
        if !path.ends_with(CALLBACK_PATH) {
            return refuse(
                "redirect_url",
                format!("must end in {CALLBACK_PATH} (this server's callback)"),
            );
        }
        if self.client_id.trim().is_empty() {
            return refuse("client_id", "must not be empty".to_owned());
        }
        if self.client_secret_env.trim().is_empty() {
            return refuse(
                "client_secret_env",
                "must name an environment variable".to_owned(),
            );
        }
        if self.groups_claim.trim().is_empty() {
            return refuse("groups_claim", "must name a claim".to_owned());
        }
        if self.groups.is_empty() {
            return refuse(
                "groups",
                "map at least one group to a tenant and role".to_owned(),
            );
        }
        for (group, grant) in &self.groups {
            if let Err(e) = validate_token(&grant.tenant, crate::intent::MAX_TENANT_LEN) {
                return refuse(&format!("groups.{group}.tenant"), format!("tenant {e}"));
            }
        }
        Ok(())
    }

    /// The grant of the first of `groups` (in name order) that this configuration maps.
    pub fn grant<'a>(&'a self, groups: &[String]) -> Option<(&'a str, &'a GroupGrant)> {
        self.groups
            .iter()
            .find(|(name, _)| groups.iter().any(|g| g == *name))
            .map(|(name, grant)| (name.as_str(), grant))
    }
}

/// `https://…`, or `http://` to a loopback host.
fn secure_or_loopback(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    matches!(host, "127.0.0.1" | "localhost" | "[::1]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const BASE: &str = "[actions.a]\ndestination = \"d\"\n[destinations.d]\nkind = \"http\"\nurl = \"http://h/\"\nidempotency = \"key\"\n";

    fn with(oidc: &str) -> Result<Config, ConfigError> {
        Config::from_toml(&format!("{BASE}[console.oidc]\n{oidc}"))
    }

    const GOOD: &str = "issuer = \"https://id.example.com\"\nclient_id = \"c\"\nredirect_url = \"https://o.example.com/console/oidc/callback\"\ngroups = { ops-team = { tenant = \"acme\", role = \"ops\" } }\n";

    #[test]
    fn a_provider_is_read_with_its_defaults_and_groups_map_in_name_order() {
        let c = with(GOOD).expect("valid");
        let oidc = c.console.oidc.expect("oidc");
        assert_eq!(oidc.client_secret_env, DEFAULT_SECRET_ENV);
        assert_eq!(oidc.groups_claim, "groups");
        assert_eq!(oidc.max_clock_skew.0.as_secs(), 60);
        let (name, grant) = oidc
            .grant(&["x".into(), "ops-team".into()])
            .expect("granted");
        assert_eq!((name, grant.tenant.as_str()), ("ops-team", "acme"));
        assert!(
            oidc.grant(&["Ops-Team".into()]).is_none(),
            "group names match exactly"
        );
    }

    #[test]
    fn bad_providers_are_refused_naming_the_field() {
        let cases = [
            (
                GOOD.replace("https://id", "http://id"),
                "console.oidc.issuer",
            ),
            (
                GOOD.replace("/console/oidc/callback", "/elsewhere"),
                "console.oidc.redirect_url",
            ),
            (
                GOOD.replace("client_id = \"c\"", "client_id = \" \""),
                "console.oidc.client_id",
            ),
            (
                GOOD.replace("role = \"ops\"", "role = \"root\""),
                "console.oidc.groups.ops-team.role",
            ),
            (
                GOOD.replace("tenant = \"acme\"", "tenant = \"a b\""),
                "console.oidc.groups.ops-team.tenant",
            ),
            (
                GOOD.replace(
                    "groups = { ops-team = { tenant = \"acme\", role = \"ops\" } }",
                    "groups = {}",
                ),
                "console.oidc.groups",
            ),
        ];
        for (text, field) in cases {
            let e = with(&text).expect_err(field);
            assert_eq!(e.field, field, "{e}");
        }
        let local = GOOD.replace("https://id.example.com", "http://127.0.0.1:9000");
        assert!(
            with(&local).is_ok(),
            "http on loopback, for a provider on this machine"
        );
    }
}
