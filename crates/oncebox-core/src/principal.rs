//! Principals: who submitted an intent and who decided on it, as the journal and the audit log
//! record them.
//!
//! A principal is an identity some mechanism vouches for, never a name typed into a form:
//!
//! - `user:NAME` — a named principal: the holder an API token was issued to
//!   (`oncebox ops token create --holder NAME`), or the name an application gives its intake
//!   (`Intake::with_principal`) or the CLI's `--principal`. Every token
//!   issued to one holder is one principal: a person with two tokens counts once.
//! - `oidc:ISSUER#SUBJECT` — a person signed in to the console through OpenID Connect: the
//!   issuer and subject of the ID token, the pair the protocol says is unique and never reused.
//! - `token:ID` — a token issued without a holder: each such token is its own principal.
//! - `db:ROLE` — the database role an intent was written under, when the writer named no
//!   principal (a library submit in the application's own transaction).
//!
//! The text form (`Display`, [`Principal::parse`]) is what the database stores; two principals
//! are the same exactly when their text forms are equal.

use std::fmt;

/// The longest principal name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 255;

/// Who: see the module's documentation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Principal {
    /// A named principal: a token's holder, or a name the writer configured.
    User(String),
    /// A person signed in through OpenID Connect.
    Oidc {
        /// The provider's issuer URL.
        issuer: String,
        /// The person's subject at that issuer.
        subject: String,
    },
    /// A token issued without a holder.
    Token(i64),
    /// A database role.
    Database(String),
}

/// A principal (or one of its parts) that cannot be used, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidPrincipal {
    /// The field or argument that held it.
    pub field: String,
    /// Why it is refused.
    pub reason: String,
}

impl InvalidPrincipal {
    fn new(field: &str, reason: impl Into<String>) -> InvalidPrincipal {
        InvalidPrincipal {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

/// Checks one part of a principal given in `field`: 1 to [`MAX_NAME_LEN`] bytes, no control
/// character, no space at either end.
///
/// # Errors
/// [`InvalidPrincipal`] naming `field` and saying why.
pub fn check_name<'a>(field: &str, name: &'a str) -> Result<&'a str, InvalidPrincipal> {
    if name.is_empty() {
        return Err(InvalidPrincipal::new(field, "must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(InvalidPrincipal::new(
            field,
            format!("at most {MAX_NAME_LEN} bytes (got {})", name.len()),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(InvalidPrincipal::new(
            field,
            "must not hold control characters",
        ));
    }
    if name.trim() != name {
        return Err(InvalidPrincipal::new(
            field,
            "must not start or end with a space",
        ));
    }
    Ok(name)
}

impl Principal {
    /// The named principal `name`, given in `field` (a token's `holder`, an intake's
    /// `principal`).
    ///
    /// # Errors
    /// [`InvalidPrincipal`] when `name` fails [`check_name`].
    pub fn named(field: &str, name: &str) -> Result<Principal, InvalidPrincipal> {
        Ok(Principal::User(check_name(field, name)?.to_owned()))
    }

    /// The OpenID Connect principal `subject` at `issuer`.
    ///
    /// # Errors
    /// [`InvalidPrincipal`] naming `iss` or `sub` when either fails [`check_name`] (a `#` in
    /// the issuer is refused too: an issuer URL has no fragment).
    pub fn oidc(issuer: &str, subject: &str) -> Result<Principal, InvalidPrincipal> {
        if check_name("iss", issuer)?.contains('#') {
            return Err(InvalidPrincipal::new("iss", "an issuer has no fragment"));
        }
        Ok(Principal::Oidc {
            issuer: issuer.to_owned(),
            subject: check_name("sub", subject)?.to_owned(),
        })
    }

    /// The principal of a token issued to `holder`: the OpenID Connect principal the holder
    /// names when it is one (`oidc:ISSUER#SUBJECT`: the person's token and their console
    /// sign-in are one principal), else the named principal `user:HOLDER`.
    pub fn of_holder(holder: &str) -> Principal {
        match holder.strip_prefix("oidc:") {
            Some(_) => Principal::parse("holder", holder)
                .unwrap_or_else(|_| Principal::User(holder.to_owned())),
            None => Principal::User(holder.to_owned()),
        }
    }

    /// Checks a holder given in `field` for a new token: a name, or an OpenID Connect
    /// principal written whole.
    ///
    /// # Errors
    /// [`InvalidPrincipal`] naming `field`.
    pub fn check_holder<'a>(field: &str, holder: &'a str) -> Result<&'a str, InvalidPrincipal> {
        check_name(field, holder)?;
        if holder.starts_with("oidc:") {
            Principal::parse(field, holder)?;
        }
        Ok(holder)
    }

    /// Reads a principal's text form (as stored), given in `field`.
    ///
    /// # Errors
    /// [`InvalidPrincipal`] naming `field` when the text has no known kind or a bad part.
    pub fn parse(field: &str, text: &str) -> Result<Principal, InvalidPrincipal> {
        let (kind, rest) = text.split_once(':').ok_or_else(|| {
            InvalidPrincipal::new(
                field,
                "expected user:NAME, oidc:ISSUER#SUBJECT, token:ID or db:ROLE",
            )
        })?;
        match kind {
            "user" => Principal::named(field, rest),
            "db" => Ok(Principal::Database(check_name(field, rest)?.to_owned())),
            "token" => rest
                .parse()
                .ok()
                .filter(|id: &i64| *id > 0 && rest == id.to_string())
                .map(Principal::Token)
                .ok_or_else(|| InvalidPrincipal::new(field, "a token principal is token:ID")),
            "oidc" => {
                let (issuer, subject) = rest.split_once('#').ok_or_else(|| {
                    InvalidPrincipal::new(field, "an OpenID principal is oidc:ISSUER#SUBJECT")
                })?;
                Principal::oidc(issuer, subject)
                    .map_err(|e| InvalidPrincipal::new(field, e.to_string()))
            }
            other => Err(InvalidPrincipal::new(
                field,
                format!("unknown kind {other:?}; expected user, oidc, token or db"),
            )),
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::User(name) => write!(f, "user:{name}"),
            Principal::Oidc { issuer, subject } => write!(f, "oidc:{issuer}#{subject}"),
            Principal::Token(id) => write!(f, "token:{id}"),
            Principal::Database(role) => write!(f, "db:{role}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_reads_back_as_itself() {
        let all = [
            Principal::named("holder", "alice@example.com").expect("name"),
            Principal::oidc("https://id.example.com/realms/a", "8f1c").expect("oidc"),
            Principal::Token(42),
            Principal::Database("app".into()),
        ];
        for p in all {
            assert_eq!(Principal::parse("p", &p.to_string()), Ok(p.clone()), "{p}");
        }
        // A name may hold a colon or a hash: only the first colon ends the kind.
        let odd = Principal::named("holder", "team:payments#2").expect("name");
        assert_eq!(odd.to_string(), "user:team:payments#2");
        assert_eq!(Principal::parse("p", &odd.to_string()), Ok(odd));
    }

    #[test]
    fn a_holder_may_name_an_openid_principal() {
        let person = Principal::oidc("https://id.example.com", "8f1c").expect("oidc");
        assert_eq!(Principal::of_holder(&person.to_string()), person);
        assert_eq!(
            Principal::of_holder("ana@example.com"),
            Principal::User("ana@example.com".into())
        );
        assert!(Principal::check_holder("holder", "oidc:https://id.example.com#8f1c").is_ok());
        let e = Principal::check_holder("holder", "oidc:no-subject").expect_err("half");
        assert_eq!(e.field, "holder");
    }

    #[test]
    fn bad_parts_are_refused_naming_the_field() {
        for bad in ["", " alice", "alice ", "a\0b", "a\nb", &"x".repeat(256)] {
            let e = Principal::named("holder", bad).expect_err(bad);
            assert_eq!(e.field, "holder", "{bad:?}");
        }
        assert!(Principal::named("holder", &"x".repeat(255)).is_ok());
        for bad in [
            "alice", "root:x", "token:0", "token:-1", "token:01", "oidc:x", "user:",
        ] {
            let e = Principal::parse("principal", bad).expect_err(bad);
            assert_eq!(e.field, "principal", "{bad:?}: {e}");
        }
        assert_eq!(
            Principal::oidc("https://a#b", "s").expect_err("#").field,
            "iss"
        );
        assert_eq!(
            Principal::oidc("https://a", "").expect_err("sub").field,
            "sub"
        );
    }
}
